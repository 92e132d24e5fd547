"""A 1-D heat stencil with Sendrecv halos, the rod's ends sending or receiving only; the fault
plan drops rank 1's messages to rank 2 (run with --inject drop:src=1,dst=2,p=1). The
neighbours' next messages arrive early at ranks 1 and 2 and wait there unmatched."""
import numpy as np

from _corpus import comm, fault, step

u = np.zeros(64)
left = comm.rank - 1 if comm.rank > 0 else None
right = comm.rank + 1 if comm.rank < comm.size - 1 else None
for it in range(6):
    step(it)
    if it == 0 and comm.rank == 1:
        fault()                                # the plan drops every message 1 -> 2
    if left is not None and right is not None:
        comm.Sendrecv(u[-2:-1], dest=right, sendtag=1, recvbuf=u[:1], source=left, recvtag=1)   # ROOT: dropped
        comm.Sendrecv(u[1:2], dest=left, sendtag=2, recvbuf=u[-1:], source=right, recvtag=2)
    elif right is not None:
        comm.Send(u[-2:-1], dest=right, tag=1)
        comm.Recv(u[-1:], source=right, tag=2)
    else:
        comm.Recv(u[:1], source=left, tag=1)
        comm.Send(u[1:2], dest=left, tag=2)
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
