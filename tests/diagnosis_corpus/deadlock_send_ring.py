"""Every rank sends a large message to its right neighbour before receiving: all block in Send."""
import numpy as np

from _corpus import comm, fault

big = np.ones(1 << 20)                         # 8 MiB: rendezvous, the Send waits for the receive
buf = np.zeros(1 << 20)
right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
comm.Barrier()
fault()
comm.Send(big, dest=right, tag=1)              # ROOT: unsafe ordering, use Sendrecv
comm.Recv(buf, source=left, tag=1)
comm.Barrier()
