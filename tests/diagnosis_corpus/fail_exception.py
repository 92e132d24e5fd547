"""Rank 2 raises an uncaught exception while the others wait in the barrier."""
from _corpus import comm, fault

comm.Barrier()
values = {0: 1.0, 1: 2.0, 3: 4.0}
if comm.rank == 2:
    fault()
x = values[comm.rank]                          # ROOT: KeyError on rank 2
comm.Barrier()
