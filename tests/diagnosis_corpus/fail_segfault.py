"""Rank 1 crashes with SIGSEGV while the others wait in the Allreduce."""
import os
import signal

import numpy as np

from _corpus import comm, fault

b = np.zeros(1)
comm.Barrier()
if comm.rank == 1:
    fault()
    os.kill(os.getpid(), signal.SIGSEGV)       # ROOT: the crash
comm.Allreduce(np.ones(1), b)
