"""Open MPI's session directories that a killed mpiexec left behind, and their removal.

Each mpiexec (PRRTE's ``prterun``) keeps its session directory in the temporary directory as
``ompi.<its pid>``, with the PMIx server's rendezvous sockets in it, and deletes it when it ends.
A killed mpiexec (SIGKILL after a timeout or a Ctrl-C) leaves it. Once the pid comes round again,
the next mpiexec with that pid finds its sockets' names taken and stops at once: "The PMIx
server's listener thread failed to start" (exit 213). Seen here in a test run, and reproduced by
giving an mpiexec a stale directory under its own pid. A directory is removed only when it
belongs to this user, is older than a grace period, no process with its pid runs, and its PMIx
rendezvous files (``pmix.<host>.tool...``) do not name another host: a launcher in another PID
namespace that shares this file system (the Slurm test cluster's hosts) has pids this process
cannot see, and removing its live directory would make its ranks fail in ``MPI_Init``.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import time
from pathlib import Path

from planaria.util.procstat import pid_alive
from planaria.launch.shmfiles import host_names

#: a session directory of Open MPI 5's launcher: ``ompi.<pid>``
NAME = re.compile(r"^ompi\.(\d+)$")
#: directories younger than this are left alone: their launcher may be starting
GRACE_S = 2.0


def base_dir(env: dict[str, str] | None = None) -> Path:
    """Where Open MPI puts its session directories: TMPDIR (or TEMP, TMP), else /tmp."""
    env = dict(os.environ) if env is None else env
    for name in ("TMPDIR", "TEMP", "TMP"):
        if env.get(name):
            return Path(env[name])
    return Path("/tmp")


def stale(base: Path | None = None, *, grace_s: float = GRACE_S, now: float | None = None) -> list[Path]:
    """This user's ``ompi.<pid>`` directories in ``base`` whose pid no longer runs."""
    base = base_dir() if base is None else base
    now = time.time() if now is None else now
    uid = os.getuid()
    out = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    for e in entries:
        m = NAME.match(e.name)
        if not m:
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != uid or not stat.S_ISDIR(st.st_mode) or now - st.st_mtime < grace_s:
            continue
        if pid_alive(int(m.group(1))) is False and not _other_host(Path(e.path)):   # unknown counts as running
            out.append(Path(e.path))
    return sorted(out)


def _other_host(d: Path) -> bool:
    """Whether the PMIx rendezvous files in ``d`` name hosts, none of them this one (a directory
    without such files says nothing, and is judged by its pid alone)."""
    try:
        names = os.listdir(d)
    except OSError:
        return False
    named = {n.split(".")[1] for n in names if n.startswith("pmix.") and n.count(".") >= 2}
    return bool(named) and not named & host_names()


def remove_stale(base: Path | None = None, *, grace_s: float = GRACE_S) -> list[Path]:
    """Delete :func:`stale` directories; returns those deleted."""
    removed = []
    for d in stale(base, grace_s=grace_s):
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            removed.append(d)
    return removed
