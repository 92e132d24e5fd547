"""A compute loop with an Allreduce per step; the fault plan kills rank 2 at step 10
(run with --inject kill:rank=2,iter=10)."""
import numpy as np

from _corpus import comm, fault, step

a = np.ones(16)
b = np.zeros(16)
for i in range(10_000):
    if i == 10 and comm.rank == 2:
        fault()                                # the plan's kill fires in the next step()
    step(i)                                    # ROOT: rank 2 is killed here (injected)
    comm.Allreduce(a, b)
