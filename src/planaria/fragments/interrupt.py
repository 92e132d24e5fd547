"""Turn a termination signal into an exception at a safe point of the executor's loop, then die by it.

A fragmented program that hangs in a CF which never returns (an endless loop, a blocked read)
is usually ended from outside: Ctrl-C, ``kill``, the batch system's SIGTERM, ``planaria run``'s
timeout. Without help the trace would lose what was still buffered and would not say which CFs
were waiting for what. While a run is in progress the executor catches SIGTERM, SIGINT and
SIGHUP in the main thread (where its loop runs; CF bodies run in pool threads). The handler only
notes the signal; the loop raises :class:`Interrupted` at its next turn, never in the middle of
a trace write or a table update. The executor then writes the unfinished CFs and an ``exit``
record, closes the trace and lets the signal take its usual course: the previous Python handler
runs, or the process dies by the signal. A second signal before the loop noticed the first (the
loop is stuck in a blocking call) acts at once, as it would have without the executor.
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


class Catcher:
    """Holds the handlers it replaced and the signal it noted, for the length of one run."""

    def __init__(self) -> None:
        self.old: dict[int, Any] = {}      # signal -> the handler it had before the run
        self.active = False
        self.pending: int | None = None
        self.raised = False

    def install(self) -> Catcher:
        """Note SIGTERM/SIGINT/SIGHUP instead of acting on them (main thread only; an ignored signal stays ignored)."""
        if threading.current_thread() is not threading.main_thread():
            return self
        for s in SIGNALS:
            prev = signal.getsignal(s)
            if prev is signal.SIG_IGN or prev is None:   # nohup'ed, or set outside Python: leave it
                continue
            self.old[s] = prev
            signal.signal(s, self._note)
        self.active = True
        return self

    def _note(self, signum: int, _frame: Any) -> None:
        if self.pending is None:
            self.pending = signum
            return
        self.restore()                 # a second signal: the loop did not get to the first one
        self.raised = True
        self.redeliver(signum)

    def check(self) -> None:
        """At a safe point of the loop: raise :class:`Interrupted` for a noted signal."""
        if self.pending is not None and not self.raised:
            self.raised = True
            raise Interrupted(self.pending)

    def restore(self) -> None:
        """Put the replaced handlers back (idempotent)."""
        if self.active:
            for s, prev in self.old.items():
                signal.signal(s, prev)
            self.active = False

    def redeliver(self, signum: int) -> None:
        """After cleanup: run the handler that was there before, or die by the signal (its default action)."""
        previous = self.old.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, None)     # e.g. Python's SIGINT handler raises KeyboardInterrupt
            return
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    def close(self) -> None:
        """End of the run: restore the handlers; a signal noted too late for the loop still takes its course."""
        self.restore()
        if self.pending is not None and not self.raised:
            self.raised = True
            self.redeliver(self.pending)
