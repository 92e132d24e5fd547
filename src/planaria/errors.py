"""Every exception planaria raises, under one root: ``PlanariaError``.

- failure errors (``FailureError``: ``ProcFailedError``, ``RevokedError``): a communication call
  met a process failure. They are ``mpi4py.MPI.Exception`` subclasses (hence ``RuntimeError``)
  whose ``Get_error_class()`` is ULFM's, so mpi4py code that catches ``MPI.Exception`` keeps
  working; ``str()`` is planaria's message. Named like mpi4py's (``...Error``).
- user-facing stops and refusals, named for the condition: ``BadInput`` (a ``ValueError``: a
  fault plan, a setting, a command line planaria cannot use), ``RecoveryStopped``
  (``SparesExhausted``, ``Unrecoverable``, ``RecoveryCallbackFailed``: the job cannot go on, exit status 3).

Other modules define their own narrower classes on these bases (``PlanError(BadInput)``...),
each keeping the builtin base its callers catch. Nothing here imports the rest of planaria.

Importing ``mpi4py.MPI`` starts MPI, which the ``planaria`` command and ``import planaria`` must
not do: the failure errors are made on first use of their names (PEP 562).
"""
from __future__ import annotations

from collections.abc import Iterable

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    E = TypeVar("E", bound=BaseException)


class PlanariaError(Exception):
    """The root of every planaria exception."""


class BadInput(PlanariaError, ValueError):
    """Input planaria cannot use (a fault plan, a setting, a program's arguments): the user's to fix."""


class RecoveryStopped(PlanariaError, RuntimeError):
    """The job cannot go on: raised at every living process (working ranks and spares) alike.

    Left uncaught, it ends each rank with one line naming it and exit status ``exit_status``
    (3; the runtime's exception hook), so ``planaria run`` exits with that status too.
    """

    exit_status = 3


class SparesExhausted(RecoveryStopped):
    """More processes failed than there were spares, and the user chose to stop."""


class Unrecoverable(RecoveryStopped):
    """No checkpoint version can be restored by every rank (too many holders of some data failed)."""


class RecoveryCallbackFailed(RecoveryStopped):
    """``Resilient(on_recovery=...)`` raised at some working rank; every living process stops with
    this error once the recovery has completed everywhere (the original is its ``__cause__`` on the
    ranks where it was raised)."""


_failures_seen = False



def failure_raised(err: E) -> E:
    """Remember that this process met a process failure (its MPI_Finalize may then spin, so the
    runtime waits less for it) and give ``err`` back: ``raise failure_raised(RevokedError())``.

    Called where a failure is detected and raised; making a ``FailureError`` has no such effect.
    """
    global _failures_seen
    _failures_seen = True
    return err


def failures_seen() -> bool:
    """Whether this process has raised a ``FailureError`` (then its MPI_Finalize may spin)."""
    return _failures_seen


if TYPE_CHECKING:       # what the classes made by ``_define`` look like to a type checker
    from mpi4py import MPI

    class FailureError(PlanariaError, MPI.Exception):
        error_class_code: int

    class ProcFailedError(FailureError):
        ranks: frozenset[int]

        def __init__(self, ranks: Iterable[int] = (), message: str | None = None) -> None: ...

    class RevokedError(FailureError):
        def __init__(self, message: str = "communicator revoked") -> None: ...


_FAILURES = ("FailureError", "ProcFailedError", "RevokedError")


def __getattr__(name: str) -> Any:
    """``FailureError``, ``ProcFailedError``, ``RevokedError``: made (importing mpi4py) when first asked for."""
    if name not in _FAILURES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _define()
    return globals()[name]


def _define() -> None:
    from mpi4py import MPI

    err_proc_failed: int = getattr(MPI, "ERR_PROC_FAILED", MPI.ERR_OTHER)
    err_revoked: int = getattr(MPI, "ERR_REVOKED", MPI.ERR_OTHER)

    class FailureError(PlanariaError, MPI.Exception):
        """Base of the errors a communication call raises because of a process failure.

        An ``MPI.Exception`` whose error code and class are ULFM's (``error_class``), and whose
        arguments are planaria's (the message), so ``str()`` and pickling work as for any exception.
        """

        error_class_code: int = err_proc_failed

        def __init__(self, *args: object) -> None:
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

        def __reduce__(self) -> tuple[Any, ...]:  # keep ranks when pickled between processes
            return (type(self), (tuple(sorted(self.ranks)), str(self)))

    class RevokedError(FailureError):
        """The communicator was revoked (ULFM's MPI_ERR_REVOKED)."""

        error_class_code = err_revoked

        def __init__(self, message: str = "communicator revoked") -> None:
            super().__init__(message)

    for cls in (FailureError, ProcFailedError, RevokedError):
        cls.__qualname__ = cls.__name__          # pickled by reference: planaria.errors.<name>
        globals()[cls.__name__] = cls
