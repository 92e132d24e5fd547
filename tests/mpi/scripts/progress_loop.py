"""Test job: STEPS steps of SECONDS each, announced with their total (``pl.step(i, total=n)``); a line
every 10 steps, "done RANK" at the end. Rank 1 is half as fast: it is the slowest rank.

    planaria run -n 3 -- python progress_loop.py STEPS SECONDS
"""
import sys
import time

import planaria as pl

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
comm = pl.world()
for i in range(steps):
    pl.step(i, total=steps)
    time.sleep(pause * (2 if comm.rank == 1 else 1))
    if i % 10 == 0:
        print(f"step {i} on {comm.rank}", flush=True)
comm.Barrier()
print("done", comm.rank, flush=True)
