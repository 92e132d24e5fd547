"""Failure exceptions raised by every planaria communicator, whatever the backend."""
from __future__ import annotations

from collections.abc import Callable, Iterable

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


_failures_seen = False


def failures_seen() -> bool:
    """Whether this process has raised a ``FailureError`` (then its MPI_Finalize may spin)."""
    return _failures_seen


class FailureError(RuntimeError):
    """Base of the errors a communication call raises because of a process failure."""

    def __init__(self, *args: object) -> None:
        global _failures_seen
        _failures_seen = True
        super().__init__(*args)


class ProcFailedError(FailureError):
    """An operation involved a failed process (ULFM's MPI_ERR_PROC_FAILED).

    ``ranks`` holds the ranks (in the communicator that raised) known to have
    failed when the error was raised; it may be empty when the MPI library did
    not yet say which process it was.
    """

    def __init__(self, ranks: Iterable[int] = (), message: str | None = None) -> None:
        self.ranks: frozenset[int] = frozenset(int(r) for r in ranks)
        text = message or f"process failure: rank(s) {sorted(self.ranks) or '?'} failed"
        super().__init__(text)

    def __reduce__(self):  # keep ranks when pickled between processes
        return (type(self), (tuple(sorted(self.ranks)), str(self)))


class RevokedError(FailureError):
    """The communicator was revoked (ULFM's MPI_ERR_REVOKED)."""

    def __init__(self, message: str = "communicator revoked") -> None:
        super().__init__(message)
