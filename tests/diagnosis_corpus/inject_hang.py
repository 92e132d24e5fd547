"""An Allreduce per step; the fault plan hangs rank 1 at step 5 (run with --inject hang:rank=1,iter=5)."""
import numpy as np

from _corpus import comm, fault, step

a = np.ones(4)
b = np.zeros(4)
for i in range(100_000):
    if i == 5 and comm.rank == 1:
        fault()                                # the plan's hang fires in the next step()
    step(i)                                    # ROOT: rank 1 hangs here (injected)
    comm.Allreduce(a, b)
