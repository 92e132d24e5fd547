"""Resilient communicators: one API (mpi4py's names), two backends (real ULFM, simulated failures)."""
from __future__ import annotations

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any


__all__ = ["FailureError", "ProcFailedError", "RevokedError"]


def __getattr__(name: str) -> Any:
    """The failure errors, from ``comm.errors`` on first use (making them imports mpi4py, which starts MPI)."""
    if name in __all__:
        from planaria.comm import errors
        return getattr(errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
