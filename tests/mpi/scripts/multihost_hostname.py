"""Every rank reports its rank and hostname; used by tests/mpi/test_multihost.py."""
import socket

from mpi4py import MPI

comm = MPI.COMM_WORLD
names = comm.allgather(socket.gethostname())
print(f"RANK {comm.rank} HOST {socket.gethostname()} SIZE {comm.size}", flush=True)
if comm.rank == 0:
    print("HOSTS " + ",".join(names), flush=True)
comm.Barrier()
