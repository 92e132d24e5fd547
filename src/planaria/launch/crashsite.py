"""Where a rank's Python failed, read from what it printed on its standard error as it died.

Two traces are read, per rank, as the launcher forwards the ranks' output:

* Python's fatal-error trace (``faulthandler``): ``planaria run`` starts ranks with
  ``PYTHONFAULTHANDLER=1`` (unless the user set it), so a rank killed by SIGSEGV, SIGBUS,
  SIGFPE, SIGILL or SIGABRT prints ``Fatal Python error: ...`` and the crashing thread's stack;
* an uncaught exception's traceback (``Traceback (most recent call last):`` ... ``KeyError: 2``):
  in a plain mpi4py program the rank then often hangs in ``MPI_Finalize`` and no longer answers,
  so its traceback is all that says where it failed.

The site is the innermost frame a user can act on (``diagnose.offline.frame_site``: the
program's own line, not numpy's or the standard library's). ``notify(rank, site, error)`` is
called when a trace is complete. ``mpi_call(rank)`` names the communicator method a fatal signal
struck in, when the crashing frame is planaria's MPI layer: a crash inside the MPI library.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_FATAL = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')          # faulthandler: innermost first
_TRACE = re.compile(r'^\s+File "(.+)", line (\d+), in (.+)$')         # traceback: outermost first
_HEADER = "Fatal Python error: "
_MPI_LAYER = "/planaria/comm/"                                         # frames of planaria's communicators
_TRACEBACK = "Traceback (most recent call last):"


class CrashSites:
    """Per-rank parser of faulthandler traces and tracebacks (lines fed one at a time, ranks interleaved)."""

    def __init__(self, notify: Callable[[int, str | None, str], None] | None = None) -> None:
        self.notify = notify
        self._reading: dict[int, str] = {}      # rank -> "error" (fatal header seen), "current", "traceback"
        self._error: dict[int, str] = {}
        self._stacks: dict[int, list[list[Any]]] = {}     # rank -> frames, outermost first
        self._partial: dict[int, list[list[Any]]] = {}    # a trace being read
        self._fatal: set[int] = set()                      # ranks whose trace is a fatal error's

    def feed(self, rank: int, line: str) -> None:
        """One line the rank wrote to its standard error (without the rank tag)."""
        if line.startswith(_HEADER):
            self._reading[rank] = "error"
            self._error[rank] = line[len(_HEADER):].strip()
            self._partial[rank] = []
            self._fatal.add(rank)
            return
        if line.startswith(_TRACEBACK) and self._reading.get(rank) not in ("error", "current"):
            self._reading[rank] = "traceback"       # a chained exception starts a new one: the last counts
            self._partial[rank] = []
            self._fatal.discard(rank)
            return
        state = self._reading.get(rank)
        if state is None:
            return
        if state == "error":
            if line.startswith("Current thread"):
                self._reading[rank] = "current"
            return
        if state == "current":
            m = _FATAL.match(line)
            if m is not None:
                self._partial[rank].insert(0, [m.group(1), int(m.group(2)), m.group(3)])
            elif line.strip():                  # the end of the crashing thread's stack
                self._done(rank, self._error.get(rank, "fatal error"))
            return
        m = _TRACE.match(line)
        if m is not None:
            self._partial[rank].append([m.group(1), int(m.group(2)), m.group(3)])
        elif line and not line[0].isspace():    # the exception line ends the traceback
            self._error[rank] = line.strip()
            self._done(rank, line.strip())

    def _done(self, rank: int, error: str) -> None:
        del self._reading[rank]
        self._stacks[rank] = self._partial.pop(rank, [])
        if self.notify is not None:
            try:
                self.notify(rank, self.site(rank), error)
            except Exception:  # noqa: BLE001 - reading the output must go on
                pass

    def site(self, rank: int) -> str | None:
        """``file:line in func`` where the rank failed (the frame a user can act on), or None."""
        from planaria.diagnose.offline import frame_site     # numpy-backed: only once a rank failed
        stack = self._stacks.get(rank) or self._partial.get(rank)     # a trace cut short counts too
        return frame_site(stack) if stack else None

    def mpi_call(self, rank: int) -> str | None:
        """The method of planaria's communicator (``split``) in which the rank died of a fatal
        signal, read from the innermost frame of its fatal-error trace; None when that frame is
        not in planaria's MPI layer (``planaria/comm``) or the rank printed no such trace."""
        if rank not in self._fatal:
            return None
        stack = self._stacks.get(rank) or self._partial.get(rank)
        if not stack:
            return None
        path, _, func = stack[-1]
        return str(func) if _MPI_LAYER in str(path) else None

    def error(self, rank: int) -> str | None:
        """The fatal error (``Segmentation fault``) or exception (``KeyError: 2``) the rank reported, or None."""
        return self._error.get(rank)
