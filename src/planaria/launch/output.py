"""mpiexec's output: streamed to the terminal re-tagged, mirrored to output.log, and read for the
runtime's daemon-loss reports and the ranks' crash sites."""
from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from planaria.launch.crashsite import CrashSites
from planaria.launch.jobdir import JobDir

_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>: ?(.*)$", re.DOTALL)


def tag_line(line: str) -> tuple[int | None, str, str]:
    """Split an Open MPI ``--output tag`` line into (rank, stream, text); rank None if untagged."""
    m = _TAG.match(line)
    if not m:
        return None, "", line
    return int(m.group(2)), m.group(3), m.group(4)


# Open MPI (PRRTE) messages telling that a host's runtime daemon is gone; the job is then aborted.
_DAEMON_LOSS = ("lost communication with a remote daemon", "daemon failed to report back",
                # under Slurm (PRRTE's plm/slurm): a node's daemon step ended, e.g. its link went down
                "launching the per-node daemon", "srun returned non-zero exit status")
_DAEMON_HOST = (re.compile(r"^\s*Remote daemon:.*\bon node (\S+)"),
                re.compile(r"^\s*Remote host:\s+(\S+)"))
_RANK_SIGNALLED = re.compile(r"process rank \d+ with PID \d+ on node \S+ exited on signal")


class RuntimeWatch:
    """Picks daemon-loss reports (and the hosts they name) out of mpiexec's untagged output."""

    def __init__(self) -> None:
        self.daemon_loss = False
        self.lost_hosts: list[str] = []
        self.rank_signalled = False
        self._armed = 0

    def feed(self, line: str) -> None:
        low = line.lower()
        if any(k in low for k in _DAEMON_LOSS):
            self.daemon_loss = True
            self._armed = 12      # the host names follow within a few lines
            return
        if _RANK_SIGNALLED.search(line):
            self.rank_signalled = True
        if self._armed:
            self._armed -= 1
            for rx in _DAEMON_HOST:
                m = rx.match(line)
                if m and m.group(1) not in self.lost_hosts:
                    self.lost_hosts.append(m.group(1))


class Output:
    """Streams mpiexec's output to our terminal, re-tagged, and mirrors it to output.log."""

    def __init__(self, jobdir: JobDir, json_mode: bool, prog: str = "planaria run") -> None:
        self.prog = prog               # names the command in the launcher's own lines
        self._log = open(jobdir.output_path, "a", encoding="utf-8", errors="replace")
        self._lock = threading.Lock()
        self._json = json_mode
        self.watch = RuntimeWatch()
        self.sink: Any = None          # the controller's io(rank, channel, text), for attached tools
        self.crashes = CrashSites()    # where a rank's Python crashed (faulthandler's trace)
        # while the progress bar is shown: prints a line above it when it goes to the bar's
        # terminal (True), or says it does not (``planaria.launch.progressbar``)
        self.above: Callable[[str, TextIO], bool] | None = None

    def pump(self, stream: Any, is_err: bool) -> None:
        """Copy every line of ``stream`` (until EOF)."""
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            rank, kind, text = tag_line(line)
            sink = self.sink
            if sink is not None and rank is not None:
                sink(rank, kind, text)
            if rank is None:
                with self._lock:
                    self.watch.feed(line)
                shown, dest = line, sys.stderr if (is_err or self._json) else sys.stdout
            elif kind == "stdout":
                shown, dest = f"[{rank}] {text}", sys.stderr if self._json else sys.stdout
            else:
                self.crashes.feed(rank, text)
                shown, dest = f"[{rank}!] {text}", sys.stderr
            self.write(shown, dest)
        stream.close()

    def write(self, line: str, dest: TextIO | None) -> None:
        """Print ``line`` to ``dest`` (if any) and append it to output.log."""
        with self._lock:
            above = self.above
            if dest is not None:
                try:
                    if above is None or not above(line, dest):
                        dest.write(line + "\n")
                        dest.flush()
                except (OSError, ValueError):
                    pass
            self._log.write(line + "\n")
            self._log.flush()

    def note(self, msg: str) -> None:
        """A launcher line on stderr, also kept in output.log."""
        self.write(f"{self.prog}: {msg}", sys.stderr)

    def close(self) -> None:
        """Close output.log."""
        with self._lock:
            self._log.close()
