"""Test job: every rank prints, then sleeps (argv: SECONDS MARKER; the marker tags the processes)."""
import sys
import time

from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
print(f"rank {rank} sleeping {sys.argv[2] if len(sys.argv) > 2 else ''}", flush=True)
time.sleep(float(sys.argv[1]))
