"""planaria: keep long MPI computations alive through process failures, and tell why a run failed or hung.

Quick start (inside a rank started by ``planaria run``)::

    import planaria as pl
    comm = pl.world()                 # fault-tolerant communicator (real ULFM or simulated)
    for i in range(steps):
        pl.step(i)                    # cheap; drives iteration-triggered fault injection
        ...

The names below are loaded on first use (PEP 562), so tools that only need a sub-package,
such as the ``planaria`` command, start without numpy and mpi4py.
"""
from __future__ import annotations

import importlib
import os as _os

if "OMPI_MCA_mpi_ft_enable" in _os.environ:
    # A rank of a ULFM job, most likely before anything started MPI (importing planaria's
    # modules may): Open MPI's settings planaria changes for ULFM (``planaria.comm.mca``).
    from planaria.comm.mca import set_rank_defaults as _set_rank_defaults
    _set_rank_defaults()

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any
    from planaria.comm.base import Comm, Request
    from planaria.errors import (BadInput, FailureError, PlanariaError, ProcFailedError, RevokedError,
                                 RecoveryCallbackFailed, SparesExhausted, Unrecoverable)
    from planaria.runtime.bootstrap import fail_stop, finalize, phase, step, watch, world

__version__ = "0.1.0"

#: public name -> the module that defines it
_HOME = {
    "Comm": "planaria.comm.base", "Request": "planaria.comm.base",
    "PlanariaError": "planaria.errors", "FailureError": "planaria.errors",
    "ProcFailedError": "planaria.errors", "RevokedError": "planaria.errors",
    "BadInput": "planaria.errors", "SparesExhausted": "planaria.errors", "Unrecoverable": "planaria.errors",
    "RecoveryCallbackFailed": "planaria.errors",
    "world": "planaria.runtime.bootstrap", "step": "planaria.runtime.bootstrap",
    "phase": "planaria.runtime.bootstrap", "watch": "planaria.runtime.bootstrap",
    "finalize": "planaria.runtime.bootstrap", "fail_stop": "planaria.runtime.bootstrap",
}

__all__ = [          # the names of _HOME, spelled out for linters
    "Comm", "Request", "PlanariaError", "FailureError", "ProcFailedError", "RevokedError",
    "BadInput", "SparesExhausted", "Unrecoverable", "RecoveryCallbackFailed",
    "world", "step", "phase", "watch", "finalize", "fail_stop", "__version__",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module when the name is first used, and keep the name here."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'planaria' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
