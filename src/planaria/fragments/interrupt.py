"""Turn a termination signal into an exception in the executor's loop, then die by it as asked.

A fragmented program that hangs in a CF which never returns (an endless loop, a blocked read)
is usually ended from outside: Ctrl-C, ``kill``, the batch system's SIGTERM, ``planaria run``'s
timeout. Without help the trace would lose what was still buffered and would not say which CFs
were waiting for what. While a run is in progress the executor catches SIGTERM, SIGINT and
SIGHUP in the main thread (where its loop runs; CF bodies run in pool threads), writes the
unfinished CFs and an ``exit`` record, closes the trace and then lets the signal take its
usual course: the previous Python handler runs, or the process dies by the signal.
"""
from __future__ import annotations

import signal
import threading
from typing import Any

SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGINT", "SIGHUP")) if s is not None)


class Interrupted(BaseException):
    """A termination signal arrived during a run (BaseException: user code must not swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _raise(signum: int, _frame: Any) -> None:
    raise Interrupted(signum)


def install() -> dict[int, Any]:
    """Make SIGTERM/SIGINT/SIGHUP raise :class:`Interrupted`; the previous handlers, for :func:`restore`.

    Only in the main thread (Python runs handlers there); a signal that is ignored stays ignored.
    """
    old: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return old
    for s in SIGNALS:
        prev = signal.getsignal(s)
        if prev is signal.SIG_IGN or prev is None:   # nohup'ed, or set outside Python: leave it
            continue
        old[s] = prev
        signal.signal(s, _raise)
    return old


def restore(old: dict[int, Any]) -> None:
    """Put the handlers :func:`install` replaced back (a second signal then acts as it did before)."""
    for s, prev in old.items():
        signal.signal(s, prev)


def redeliver(signum: int, old: dict[int, Any]) -> None:
    """After cleanup: run the handler that was there before, or die by the signal (its default action)."""
    previous = old.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, None)        # e.g. Python's SIGINT handler raises KeyboardInterrupt
        return
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)
