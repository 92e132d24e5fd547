"""Whether a process runs, and its identity beyond its pid: its start time, so a pid the system
handed out again is told apart.

Linux reuses pids (32768 of them by default, cycled by a busy machine in minutes), so a pid a rank
reported long ago may now name another process of the same user. ``/proc/<pid>/stat``'s field 22
is the process's start time in clock ticks since boot; the pair (pid, start) names one process.
"""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool | None:
    """True if ``pid`` exists (one this user may not signal counts), False if it is gone, None when
    that cannot be told."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return None
    return True


def _fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (state) on; None when unreadable."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            stat = fh.read()
    except (OSError, ValueError):
        return None
    # the fields after the command name, which may hold spaces and parentheses
    return stat.rsplit(b")", 1)[-1].split()


def _field(pid: int, index: int) -> int | None:
    """Field ``index`` of ``/proc/<pid>/stat`` counted from field 3 (state) as 0; None when unreadable."""
    try:
        return int((_fields(pid) or [])[index])
    except (ValueError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), or None when it is gone or unreadable."""
    return _field(pid, 19)


def parent_of(pid: int) -> int | None:
    """The parent pid of process ``pid``, or None when it is gone or unreadable."""
    return _field(pid, 1)


def stopped(pid: int) -> bool:
    """True when process ``pid`` is stopped (state T or t: a stop signal, or a tracer such as py-spy)."""
    fields = _fields(pid)
    return fields is not None and fields[:1] in ([b"T"], [b"t"])


def running(pid: int, ticks: int) -> bool:
    """Whether process ``pid`` is still the one that started at ``ticks`` and has not ended (a
    zombie, not yet reaped by its parent, has)."""
    fields = _fields(pid)
    try:
        return fields is not None and int(fields[19]) == ticks and fields[0] not in (b"Z", b"X")
    except (ValueError, IndexError):
        return False


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start ticks) of every living descendant of ``pid``, whatever its process group or
    session: a launcher's helpers (an ``ssh`` or ``srun`` starting a remote daemon) may leave both.
    One pass over ``/proc`` (psutil would do the same, at the price of a dependency for one call)."""
    children: dict[int, list[tuple[int, int]]] = {}      # parent pid -> (pid, start ticks) of its children
    for name in os.listdir("/proc"):
        fields = _fields(int(name)) if name.isdigit() else None
        try:
            if fields is not None:
                children.setdefault(int(fields[1]), []).append((int(name), int(fields[19])))
        except (ValueError, IndexError):
            pass
    out: list[tuple[int, int]] = []
    todo = list(children.get(int(pid), []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child[0], []))
    return out
