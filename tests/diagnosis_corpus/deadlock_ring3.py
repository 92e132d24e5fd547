"""Ranks 0, 1, 2 each receive from the next one before sending to the previous: a 3-rank cycle."""
import numpy as np

from _corpus import comm, fault

buf = np.zeros(4)
comm.Barrier()
if comm.rank < 3:
    fault()
    comm.Recv(buf, source=(comm.rank + 1) % 3, tag=2)   # ROOT: everyone receives first
    comm.Send(buf, dest=(comm.rank + 2) % 3, tag=2)
comm.Barrier()
