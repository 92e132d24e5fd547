"""Rank 3 exits (status 0) before the last barrier; the others wait for it."""
import sys

from _corpus import comm, fault

comm.Barrier()
if comm.rank == 3:
    fault()
    sys.exit(0)                                # ROOT: leaves before the barrier
comm.Barrier()
