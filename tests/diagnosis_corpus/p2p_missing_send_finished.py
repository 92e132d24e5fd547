"""Rank 1 waits for a message from rank 0; rank 0 forgot to send it and has finished."""
import numpy as np

from _corpus import comm, fault

buf = np.zeros(4)
comm.Barrier()
if comm.rank == 1:
    fault()
    comm.Recv(buf, source=0, tag=9)            # ROOT: rank 0 never sends tag 9
