"""Rank 1 receives from rank 0, which never sends and waits in the barrier."""
import numpy as np

from _corpus import comm, fault

buf = np.zeros(4)
x = comm.rank * 2.0
if comm.rank == 1:
    fault()
    comm.Recv(buf, source=0, tag=3)            # ROOT: no rank ever sends this message
comm.Barrier()
