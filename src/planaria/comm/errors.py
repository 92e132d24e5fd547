"""Failure exceptions raised by every planaria communicator, whatever the backend."""
from __future__ import annotations

from collections.abc import Iterable


class FailureError(RuntimeError):
    """Base of the errors a communication call raises because of a process failure."""


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
