"""Rank 1 spins in numpy matrix products forever; the others wait in the Allreduce."""
import numpy as np

from _corpus import comm, fault

a = np.random.default_rng(1).random((300, 300)) / 300
b = np.zeros(1)
comm.Barrier()
if comm.rank == 1:
    fault()
    while True:                                # ROOT: (the loop)
        a = a @ a + 0.5                        # ROOT: never ends
comm.Allreduce(np.ones(1), b)
