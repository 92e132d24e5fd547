"""Where a rank's Python crashed, read from the trace Python's ``faulthandler`` prints on a fatal signal.

``planaria run`` starts ranks with ``PYTHONFAULTHANDLER=1`` (unless the user set it), so a rank
killed by SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT prints ``Fatal Python error: ...`` and the
crashing thread's stack on its standard error before it dies. The launcher feeds every rank's
standard-error lines to :class:`CrashSites`, which keeps, per rank, the error and the crashing
thread's stack; its site is the innermost frame a user can act on (``diagnose.offline.frame_site``:
the program's own line, not numpy's or the standard library's), the site a post-mortem names.
"""
from __future__ import annotations

import re
from typing import Any

_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')
_HEADER = "Fatal Python error: "


class CrashSites:
    """Per-rank parser of faulthandler traces (lines fed one at a time, ranks interleaved)."""

    def __init__(self) -> None:
        self._reading: dict[int, str] = {}      # rank -> "error" (header seen) or "current" (in its stack)
        self._error: dict[int, str] = {}
        self._stacks: dict[int, list[list[Any]]] = {}     # rank -> frames, innermost first

    def feed(self, rank: int, line: str) -> None:
        """One line the rank wrote to its standard error (without the rank tag)."""
        if line.startswith(_HEADER):
            self._reading[rank] = "error"
            self._error[rank] = line[len(_HEADER):].strip()
            self._stacks[rank] = []
            return
        state = self._reading.get(rank)
        if state is None:
            return
        if state == "error":
            if line.startswith("Current thread"):
                self._reading[rank] = "current"
            return
        m = _FRAME.match(line)
        if m is None:                           # the end of the crashing thread's stack
            if line.strip():
                del self._reading[rank]
            return
        self._stacks[rank].append([m.group(1), int(m.group(2)), m.group(3)])

    def site(self, rank: int) -> str | None:
        """``file:line in func`` where the rank crashed (the frame a user can act on), or None."""
        from planaria.diagnose.offline import frame_site     # numpy-backed: only once a rank crashed
        stack = self._stacks.get(rank)
        return frame_site(stack[::-1]) if stack else None

    def error(self, rank: int) -> str | None:
        """The fatal error the rank reported (``Segmentation fault``...), or None."""
        return self._error.get(rank)
