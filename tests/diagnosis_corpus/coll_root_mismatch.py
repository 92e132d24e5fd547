"""Rank 3 broadcasts from root 1, every other rank from root 0."""
import numpy as np

from _corpus import comm, fault

a = np.full(1 << 18, float(comm.rank))         # 2 MiB: the broadcast cannot finish early
comm.Barrier()
if comm.rank == 3:
    fault()
    comm.Bcast(a, root=1)                      # ROOT: wrong root
else:
    comm.Bcast(a, root=0)
comm.Barrier()
