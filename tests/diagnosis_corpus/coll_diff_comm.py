"""Rank 0 enters the barrier of a duplicate communicator, the others the world's barrier."""
from _corpus import comm, fault

other = comm.Dup()
comm.Barrier()
if comm.rank == 0:
    fault()
    other.Barrier()                            # ROOT: wrong communicator
else:
    comm.Barrier()
comm.Barrier()
