"""The communicators' failure errors (defined in ``planaria.errors``, importable here as ever) and
the observers of failed processes the backends report to.

The errors are made on first use of their names (importing ``mpi4py.MPI`` starts MPI, which the
``planaria`` command and ``import planaria`` must not do).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from planaria import errors as _errors
from planaria.errors import failure_raised, failures_seen

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any
    from planaria.errors import FailureError, ProcFailedError, RevokedError

__all__ = ["FailureError", "ProcFailedError", "RevokedError", "failure_raised", "failures_seen",
           "observe_failures", "saw_failed"]

_observers: list[Callable[[frozenset[int]], None]] = []


def observe_failures(fn: Callable[[frozenset[int]], None]) -> None:
    """Call ``fn(world_ranks)`` whenever a communicator reports failed processes (the runtime
    relays these "undeliverable message" signals to the controller)."""
    _observers.append(fn)


def saw_failed(world_ranks: Iterable[int]) -> None:
    """A backend found these world ranks failed; tell the observers (never raises)."""
    if not _observers:
        return
    ranks = frozenset(int(r) for r in world_ranks)
    if not ranks:
        return
    for fn in list(_observers):
        try:
            fn(ranks)
        except Exception:  # noqa: BLE001 - observing must never change the error path
            pass


_NAMES = ("FailureError", "ProcFailedError", "RevokedError")


def __getattr__(name: str) -> Any:
    """``FailureError``, ``ProcFailedError``, ``RevokedError``: ``planaria.errors``', made when first asked for."""
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_errors, name)
    globals()[name] = value
    return value
