"""Resilient communicators: one API (mpi4py's names), two backends (real ULFM, simulated failures)."""
from planaria.comm.errors import FailureError, ProcFailedError, RevokedError

__all__ = ["FailureError", "ProcFailedError", "RevokedError"]
