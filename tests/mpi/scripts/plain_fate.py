"""Test job without planaria's runtime (plain mpi4py). argv: MODE [MARKER]; the marker tags the processes.
  kill     rank 1 SIGKILLs itself, rank 0 exits 0 a little later (without MPI_Finalize)
  abort    rank 0 calls MPI_Abort(5) while rank 1 sleeps (with ULFM, mpiexec then leaves rank 1 running)
  hang     rank 1 SIGKILLs itself, rank 0 sleeps 60 s (as if waiting for it)
  stuck    rank 1 sleeps 60 s outside MPI while the other ranks wait for it in a barrier
  sleep    every rank sleeps 6 s, then exits 0 (without MPI_Finalize)
"""
import os
import signal
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
comm.Barrier()
if sys.argv[1] == "kill":
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    os._exit(0)     # with ULFM, MPI_Finalize can wait for ever for the dead rank
elif sys.argv[1] == "hang":
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
elif sys.argv[1] == "stuck":
    if rank == 1:
        time.sleep(60)  # STUCK_LINE
    comm.Barrier()
elif sys.argv[1] == "sleep":
    time.sleep(6)
    os._exit(0)
elif sys.argv[1] == "abort":
    if rank == 0:
        time.sleep(0.3)
        comm.Abort(5)
    time.sleep(60)
