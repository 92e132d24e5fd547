"""Ranks 0 and 1 each receive from the other before sending: a 2-rank deadlock."""
import numpy as np

from _corpus import comm, fault

buf = np.zeros(4)
comm.Barrier()
if comm.rank < 2:
    fault()
    comm.Recv(buf, source=1 - comm.rank, tag=7)    # ROOT: both receive first
    comm.Send(buf, dest=1 - comm.rank, tag=7)
comm.Barrier()
