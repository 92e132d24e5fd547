"""Open MPI's MCA parameters: whether the user set one anywhere, and the ULFM defaults planaria adds.

``EVENT_TICK_US``: Open MPI looks at its event base (where the runtime's notices of failed
processes arrive, passed on from PMIx's thread) only every ``mpi_event_tick_rate`` µs of
progress, 10 ms unless set. ULFM learns of a failure from those notices, so each survivor
learned of it up to 10 ms after the first, and every fault-tolerant agreement and shrink
waits for the last one. At 1 ms the knowledge reaches every rank within about 1 ms of the first
(``python -m benchmarks recovery``, 9 processes on 2 cores: kill to resumed step 17.3 ms median
against 24.2 ms with the default, docs/benchmarks.md); the cost is one non-blocking poll of the
event base per ms of MPI progress.
A value the user set (environment, ``--mca``, a ``--tune`` file, an MCA parameter file) wins.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from itertools import pairwise

# os.path, not pathlib, and shutil only when needed: a rank's start imports this module, and
# neither is loaded there otherwise

#: MCA parameter files of the system (Debian's), read besides the installation's and the user's
SYSTEM_PARAM_FILES: tuple[str | os.PathLike[str], ...] = ("/etc/openmpi/openmpi-mca-params.conf",)
#: mpiexec options that set an MCA parameter (``--mca NAME VALUE``)
MCA_OPTIONS = ("--mca", "-mca", "--omca", "--gmca")
#: µs of MPI progress between two looks at Open MPI's event base in a ULFM job (module docstring)
EVENT_TICK_US = 1000
TICK_PARAM = "mpi_event_tick_rate"


def param_files(env: Mapping[str, str], mpiexec: str | None) -> list[str | os.PathLike[str]]:
    """The MCA parameter files Open MPI reads: its installation's (next to ``mpiexec``), the system's, the user's."""
    files = list(SYSTEM_PARAM_FILES)
    if mpiexec:
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(mpiexec)))
        files.insert(0, os.path.join(prefix, "etc", "openmpi-mca-params.conf"))
    home = env.get("HOME")
    if home:
        files.append(os.path.join(home, ".openmpi", "mca-params.conf"))
    return files


def file_sets(path: str | os.PathLike[str], name: str) -> bool:
    """Whether the MCA parameter file ``path`` sets ``name`` (an unreadable or missing file sets nothing)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    pattern = re.compile(rf"\s*{re.escape(name)}\s*=")
    return any(pattern.match(ln) for ln in lines)


def configured(name: str, env: Mapping[str, str], mpiexec_args: Sequence[str] = (),
               mpiexec: str | None = None) -> bool:
    """True when the user set the MCA parameter ``name`` anywhere planaria must not override:
    the environment, ``--mca`` among ``mpiexec_args``, a ``--tune`` file, or an MCA parameter file."""
    if f"OMPI_MCA_{name}" in env or "OMPI_MCA_mca_base_param_files" in env:
        return True
    args = list(mpiexec_args)
    if any(a in ("--tune", "-tune") or a.startswith("--tune=") for a in args):
        return True
    if any(a in MCA_OPTIONS and b == name for a, b in pairwise(args)):
        return True
    return any(file_sets(f, name) for f in param_files(env, mpiexec))


def ulfm_env(env: Mapping[str, str], mpiexec_args: Sequence[str] = (), mpiexec: str | None = None) -> dict[str, str]:
    """The environment variables planaria adds to a ULFM job: the event tick (module docstring),
    unless the user chose one."""
    if configured(TICK_PARAM, env, mpiexec_args, mpiexec):
        return {}
    return {f"OMPI_MCA_{TICK_PARAM}": str(EVENT_TICK_US)}


def set_rank_defaults() -> None:
    """In a rank of a ULFM job, before MPI starts: ``ulfm_env`` into this process's environment,
    for jobs launched by a bare ``mpiexec --with-ft ulfm`` (``planaria run`` passes it already).
    ``import planaria`` calls it; a program that imported ``mpi4py.MPI`` first keeps Open MPI's default."""
    if "mpi4py.MPI" in sys.modules or os.environ.get("OMPI_MCA_mpi_ft_enable", "0") in ("0", "", "false"):
        return                       # MPI started already (it reads its parameters then), or no ULFM
    if f"OMPI_MCA_{TICK_PARAM}" in os.environ:
        return                       # set by planaria run or by the user (before the look-up below)
    import shutil
    os.environ.update(ulfm_env(os.environ, (), shutil.which("mpiexec")))
