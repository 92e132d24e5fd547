"""Rank 1 waits for rank 2's message; the fault plan kills rank 2 first
(run with --inject kill:rank=2,iter=1)."""
import numpy as np

from _corpus import comm, fault, step

buf = np.zeros(4)
comm.Barrier()
if comm.rank == 2:
    fault()                                    # the plan's kill fires in the next step()
    step(1)                                    # ROOT: rank 2 is killed here (injected)
    comm.Send(np.ones(4), dest=1, tag=3)
elif comm.rank == 1:
    comm.Recv(buf, source=2, tag=3)
comm.Barrier()
