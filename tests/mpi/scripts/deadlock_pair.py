"""Ranks 0 and 1 each receive from the other first: a deadlock (other ranks wait in a barrier)."""
import numpy as np

import planaria as pl

comm = pl.world()
buf = np.zeros(1)
if comm.rank < 2:
    comm.Recv(buf, source=1 - comm.rank, tag=7)
comm.Barrier()
