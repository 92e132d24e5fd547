"""Rank 0 sends to rank 1; rank 1 receives from rank 2, which sends nothing."""
import numpy as np

from _corpus import comm, fault

buf = np.zeros(4)
if comm.rank == 0:
    comm.Send(np.ones(4), dest=1, tag=7)
elif comm.rank == 1:
    fault()
    comm.Recv(buf, source=2, tag=7)            # ROOT: source 2, the message comes from 0
comm.Barrier()
