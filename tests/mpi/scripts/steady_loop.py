"""Steps with a small Allreduce each, shrinking past failures; prints 'done' at the end."""
import sys
import time

import numpy as np

import planaria as pl

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
comm = pl.world()
c = comm
for i in range(steps):
    pl.step(i)
    try:
        c.Allreduce(np.ones(1), np.zeros(1))
    except pl.FailureError:
        c.revoke()
        c = c.shrink()
    time.sleep(0.03)
print("done", comm.rank, c.size, flush=True)
