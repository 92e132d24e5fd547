"""Rank 1 reduces 1 Mi doubles, every other rank 1 double."""
import numpy as np

from _corpus import comm, fault

count = (1 << 20) if comm.rank == 1 else 1
a = np.ones(count)
b = np.zeros(count)
comm.Barrier()
if comm.rank == 1:
    fault()
comm.Allreduce(a, b)                           # ROOT: rank 1 passes a different count
comm.Barrier()
