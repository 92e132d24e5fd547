"""A process's identity beyond its pid: its start time, so a pid the system handed out again is told apart.

Linux reuses pids (32768 of them by default, cycled by a busy machine in minutes), so a pid a rank
reported long ago may now name another process of the same user. ``/proc/<pid>/stat``'s field 22
is the process's start time in clock ticks since boot; the pair (pid, start) names one process.
"""
from __future__ import annotations


def start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), or None when it is gone or unreadable."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            stat = fh.read()
        # fields after the command name, which may hold spaces and parentheses: state is field 3
        return int(stat.rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
