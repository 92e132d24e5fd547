"""Rank 2 calls Bcast where every other rank calls Allreduce."""
import numpy as np

from _corpus import comm, fault

a = np.ones(8)
b = np.zeros(8)
comm.Barrier()
if comm.rank == 2:
    fault()
    comm.Bcast(a, root=0)                      # ROOT: the others are in Allreduce
else:
    comm.Allreduce(a, b)
comm.Barrier()
