"""A 1-D heat stencil with Sendrecv halos; at step 3 rank 2 skips the barrier the others enter."""
import numpy as np

from _corpus import comm, fault, step

u = np.zeros(64)
left, right = (comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size
for it in range(6):
    step(it)
    comm.Sendrecv(u[1:2], dest=left, sendtag=1, recvbuf=u[-1:], source=right, recvtag=1)
    comm.Sendrecv(u[-2:-1], dest=right, sendtag=2, recvbuf=u[:1], source=left, recvtag=2)
    u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    if it == 3 and comm.rank == 2:
        fault()
        continue
    comm.Barrier()                             # ROOT: rank 2 skips it at step 3
