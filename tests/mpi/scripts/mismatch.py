"""Rank 1 waits for a message that is there but does not match its receive; the rest wait in a barrier.

    python mismatch.py tag      # rank 0 sends tag 8, rank 1 receives tag 7 from rank 0
    python mismatch.py source   # rank 0 sends tag 7, rank 1 receives tag 7 from rank 2
"""
import sys

import numpy as np

import planaria as pl

comm = pl.world()
buf = np.zeros(1)
if comm.rank == 0:
    comm.Send(np.ones(1), dest=1, tag=8 if sys.argv[1] == "tag" else 7)
elif comm.rank == 1:
    comm.Recv(buf, source=0 if sys.argv[1] == "tag" else 2, tag=7)     # the receive that waits
comm.Barrier()
