"""Rank 2 never leaves a Python loop; the others wait in the barrier."""
from _corpus import comm, fault

comm.Barrier()
x = 0
if comm.rank == 2:
    fault()
    while x >= 0:                              # ROOT: (the loop)
        x += 1                                 # ROOT: the loop never ends
comm.Barrier()
