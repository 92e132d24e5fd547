"""Failure exceptions raised by every planaria communicator, whatever the backend.

They are ``mpi4py.MPI.Exception`` subclasses (hence still ``RuntimeError``), so code written for
mpi4py that catches ``MPI.Exception`` and asks ``Get_error_class()`` sees ULFM's classes
(``MPI.ERR_PROC_FAILED``, ``MPI.ERR_REVOKED``); ``str()`` keeps planaria's message.

Importing ``mpi4py.MPI`` starts MPI, which the ``planaria`` command and ``import planaria`` must
not do: the classes are made on first use of their names (PEP 562), like the package's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

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


_NAMES = ("FailureError", "ProcFailedError", "RevokedError")


def __getattr__(name: str) -> Any:
    """``FailureError``, ``ProcFailedError``, ``RevokedError``: made (importing mpi4py) when first asked for."""
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _define()
    return globals()[name]


def _define() -> None:
    from mpi4py import MPI

    err_proc_failed: int = getattr(MPI, "ERR_PROC_FAILED", MPI.ERR_OTHER)
    err_revoked: int = getattr(MPI, "ERR_REVOKED", MPI.ERR_OTHER)

    class FailureError(MPI.Exception):
        """Base of the errors a communication call raises because of a process failure.

        An ``MPI.Exception`` whose error code and class are ULFM's (``error_class``), and whose
        arguments are planaria's (the message), so ``str()`` and pickling work as for any exception.
        """

        error_class_code: int = err_proc_failed

        def __init__(self, *args: object) -> None:
            global _failures_seen
            _failures_seen = True
            RuntimeError.__init__(self, *args)      # not MPI.Exception's: its argument is an error code

        def __int__(self) -> int:
            return self.error_class_code

        def __str__(self) -> str:
            return RuntimeError.__str__(self)

        def __repr__(self) -> str:
            return f"{type(self).__name__}({str(self)!r})"

        def Get_error_code(self) -> int:
            """The MPI error code: ULFM's error class (no MPI call, so it also works after MPI ends)."""
            return self.error_class_code

        def Get_error_class(self) -> int:
            """``MPI.ERR_PROC_FAILED`` or ``MPI.ERR_REVOKED``."""
            return self.error_class_code

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

        error_class_code = err_revoked

        def __init__(self, message: str = "communicator revoked") -> None:
            super().__init__(message)

    for cls in (FailureError, ProcFailedError, RevokedError):
        cls.__qualname__ = cls.__name__          # pickled by reference: planaria.comm.errors.<name>
        globals()[cls.__name__] = cls
