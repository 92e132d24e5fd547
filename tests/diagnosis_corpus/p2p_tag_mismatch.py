"""Rank 0 sends tag 8, rank 1 receives tag 7 from rank 0: the receive never matches."""
import numpy as np

from _corpus import comm, fault

buf = np.zeros(4)
if comm.rank == 0:
    comm.Send(np.ones(4), dest=1, tag=8)
elif comm.rank == 1:
    fault()
    comm.Recv(buf, source=0, tag=7)            # ROOT: tag 7, the sender uses 8
comm.Barrier()
