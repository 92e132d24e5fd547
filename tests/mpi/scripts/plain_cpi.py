"""An mpi4py program that knows nothing of planaria: pi by the midpoint rule, the interval count
read on rank 0 (as mpi4py's compute-pi demo). ``--loop K`` repeats the reduction K times."""
import sys
from math import pi as PI

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
loops = int(sys.argv[sys.argv.index("--loop") + 1]) if "--loop" in sys.argv else 1
n = np.array(0, dtype="i")
if rank == 0:
    n.fill(int(input()))
comm.Bcast([n, MPI.INT], root=0)
h = 1.0 / int(n)
mine = np.array(sum(4.0 / (1.0 + (h * (i - 0.5)) ** 2) for i in range(rank + 1, int(n) + 1, size)) * h)
pi = np.zeros(1)
for _ in range(loops):
    comm.Allreduce([mine, MPI.DOUBLE], [pi, MPI.DOUBLE], op=MPI.SUM)
if rank == 0:
    print(f"WORLD {type(comm).__module__}.{type(comm).__name__}")
    print(f"PI {pi[0]:.12f} ERROR {abs(pi[0] - PI):.3e}", flush=True)
