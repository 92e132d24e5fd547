"""Open MPI's shared-memory files that no running process uses any more, and their removal.

Open MPI's shared-memory transport keeps its files in /dev/shm (``sm_segment.<host>.<uid>.<job>.<n>``,
one per rank; ``vader_segment.*`` in Open MPI 4), and mpiexec deletes them when the job ends.
When mpiexec is killed itself (SIGKILL after a timeout, a lost host's runtime) nothing does, so
they stay until reboot: 16 MB each here, and a long series of killed test jobs fills /dev/shm with
them. A file is an orphan when this user owns it, no process maps it, and it is older than a
grace period (a starting job creates its file a moment before it maps it). Only files named after
this host are considered: a container or namespace with another host name that shares /dev/shm
may run jobs whose processes this one cannot see.
"""
from __future__ import annotations

import os
import _socket          # the C module behind socket: its import is not on the way to mpiexec
import stat
import time
from pathlib import Path

#: where Open MPI's shared-memory transport keeps its files
SHM_DIR = Path("/dev/shm")
#: file name prefixes of Open MPI's shared-memory transport (5.x, 4.x)
PREFIXES = ("sm_segment.", "vader_segment.")
#: files younger than this are left alone: their job may not have mapped them yet
GRACE_S = 2.0


def mapped_files(under: Path = SHM_DIR, proc: Path = Path("/proc")) -> set[str]:
    """Paths below ``under`` that some process maps, read from every ``/proc/<pid>/maps`` we may read.

    A process of another user is unreadable; that is safe here because only this user's files are
    ever removed, and this user's processes are readable.
    """
    root = str(under).rstrip("/") + "/"
    seen: set[str] = set()
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            with open(d / "maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    parts = line.rstrip("\n").split(None, 5)
                    if len(parts) == 6 and parts[5].startswith(root):
                        seen.add(parts[5].removesuffix(" (deleted)"))
        except OSError:          # the process ended meanwhile, or is not ours
            continue
    return seen


def host_names() -> set[str]:
    """The names Open MPI may give this host in a file name: the host name, and its part before the first dot."""
    name = _socket.gethostname()
    return {name, name.split(".", 1)[0]}


def orphaned(shm_dir: Path = SHM_DIR, *, grace_s: float = GRACE_S, now: float | None = None,
             proc: Path = Path("/proc"), hosts: set[str] | None = None) -> list[Path]:
    """This user's Open MPI shared-memory files of this host (``hosts``) in ``shm_dir`` that no
    process maps and older than ``grace_s``; none when /proc cannot tell what is mapped."""
    if not os.access(proc / "self" / "maps", os.R_OK):
        return []
    now = time.time() if now is None else now
    uid = os.getuid()
    prefixes = tuple(f"{pre}{h}.{uid}." for pre in PREFIXES for h in (hosts or host_names()))
    candidates = []
    for p in shm_dir.iterdir() if shm_dir.is_dir() else ():
        if not p.name.startswith(prefixes):
            continue
        try:
            st = p.lstat()
        except OSError:
            continue
        if st.st_uid == uid and now - st.st_mtime >= grace_s and stat.S_ISREG(st.st_mode):
            candidates.append(p)
    if not candidates:
        return []
    mapped = mapped_files(shm_dir, proc)     # after the listing: a file mapped meanwhile is seen as mapped
    return sorted(p for p in candidates if str(p) not in mapped)


def remove_orphaned(shm_dir: Path = SHM_DIR, *, grace_s: float = GRACE_S,
                    hosts: set[str] | None = None) -> list[Path]:
    """Delete :func:`orphaned` files; returns those deleted (one that vanished meanwhile is skipped)."""
    removed = []
    for p in orphaned(shm_dir, grace_s=grace_s, hosts=hosts):
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    return removed
