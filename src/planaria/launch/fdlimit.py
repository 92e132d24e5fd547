"""The launcher's open-file limit: raised to the hard limit at start.

The controller holds one connection per agent (one per rank) plus its job files; the common
default soft limit of 1,024 descriptors would cap a launcher near 1,000 ranks, although the hard
limit (often 2**20 or more) allows far more. Raising the soft limit up to the hard one needs no
privilege; the children (mpiexec, the ranks) inherit the raised value.
"""
from __future__ import annotations

import resource


def raise_open_files() -> tuple[int, int]:
    """Set the soft RLIMIT_NOFILE to the hard limit (or the system's ceiling); return (before, now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else _ceiling()
    if soft != resource.RLIM_INFINITY and want > soft:
        for target in (want, 1 << 20, 65536):       # some systems refuse values above nr_open
            if target <= soft:
                break
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(target, want), hard))
                break
            except (ValueError, OSError):
                continue
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _ceiling() -> int:
    """The per-process maximum the kernel allows (``fs.nr_open``), for an unlimited hard limit."""
    try:
        with open("/proc/sys/fs/nr_open", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return 1 << 20
