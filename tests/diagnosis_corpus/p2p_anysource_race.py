"""Rank 0 takes 'the first message' with ANY_SOURCE assuming it is rank 2's; rank 1's is there first
(rank 2 sends a second later), so the wildcard takes it, the receive from rank 1 waits forever and
rank 2's message is left over. The timing makes the race go the same way in every run and mode."""
import time

import numpy as np
from mpi4py import MPI

from _corpus import comm, fault

buf = np.zeros(2)
comm.Barrier()
if comm.rank == 0:
    time.sleep(0.5)
    fault()
    comm.Recv(buf, source=MPI.ANY_SOURCE, tag=4)   # ROOT: wildcard receive, meant to be rank 2's message
    comm.Recv(buf, source=1, tag=4)
elif comm.rank in (1, 2):
    if comm.rank == 2:
        time.sleep(1.5)
    comm.Send(np.full(2, comm.rank, dtype=float), dest=0, tag=4)
comm.Barrier()
