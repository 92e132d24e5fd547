"""Plain mpi4py test job: one line on stdout and one on stderr per rank."""
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"hello from {comm.Get_rank()} of {comm.Get_size()}", flush=True)
print(f"note from {comm.Get_rank()}", file=sys.stderr, flush=True)
comm.Barrier()
