"""planaria: keep long MPI computations alive through process failures, and tell why a run failed or hung.

Quick start (inside a rank started by ``planaria run``)::

    import planaria as pl
    comm = pl.world()                 # fault-tolerant communicator (real ULFM or simulated)
    for i in range(steps):
        pl.step(i)                    # cheap; drives iteration-triggered fault injection
        ...
"""
from planaria.comm.base import Comm, Request
from planaria.comm.errors import FailureError, ProcFailedError, RevokedError
from planaria.runtime.bootstrap import fail_stop, finalize, phase, step, watch, world

__version__ = "0.1.0"

__all__ = [
    "Comm", "Request", "FailureError", "ProcFailedError", "RevokedError",
    "world", "step", "phase", "watch", "finalize", "fail_stop", "__version__",
]
