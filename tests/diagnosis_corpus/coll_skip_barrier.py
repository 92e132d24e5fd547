"""Rank 2 skips the barrier every other rank enters, and goes on to the Allreduce."""
import numpy as np

from _corpus import comm, fault

a = np.ones(4)
b = np.zeros(4)
comm.Allreduce(a, b)
if comm.rank == 2:
    fault()
if comm.rank != 2:
    comm.Barrier()                             # ROOT: rank 2 does not call it
comm.Allreduce(a, b)
comm.Barrier()
