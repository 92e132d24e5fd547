"""Steps with a small Allreduce each, shrinking past failures; prints 'done' at the end.

ULFM reports a failure non-uniformly: a collective can complete at some ranks and raise at
others, and those that completed only fail at their next call. So after a shrink the
survivors agree on the step to go on from (the furthest any of them completed); without
that, their step counts drift apart and one rank ends up waiting in an Allreduce the others
never call.
"""
import sys
import time

import numpy as np
from mpi4py import MPI

import planaria as pl


def recover(c: pl.Comm, done: int) -> tuple[pl.Comm, int]:
    """Revoke and shrink until the survivors agree on how many steps are done."""
    while True:
        c.revoke()
        c = c.shrink()
        mine, furthest = np.array([done], dtype=np.int64), np.zeros(1, dtype=np.int64)
        try:
            c.Allreduce(mine, furthest, op=MPI.MAX)
            return c, int(furthest[0])
        except pl.FailureError:
            continue


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
comm = pl.world()
c = comm
i = 0
while i < steps:
    pl.step(i)
    try:
        c.Allreduce(np.ones(1), np.zeros(1))
        i += 1
    except pl.FailureError:
        c, i = recover(c, i)
    time.sleep(0.03)
print("done", comm.rank, c.size, flush=True)
