"""Rank 2 stops itself with SIGSTOP (as a paused or swapped-out process would) inside the loop."""
import os
import signal

import numpy as np

from _corpus import comm, fault

b = np.zeros(1)
for i in range(100_000):
    if comm.rank == 2 and i == 20:
        fault()
        os.kill(os.getpid(), signal.SIGSTOP)   # ROOT: the process is stopped
    comm.Allreduce(np.ones(1), b)
