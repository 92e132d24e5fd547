"""Shared fixtures: the MPICH venv used to prove the simulation backend on a second MPI library."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]

# the suite shares 2 cores with MPI jobs: a generated example's run time says nothing about its
# correctness, so no per-example deadline (a property that must be fast is a benchmark's goal)
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def _mpich_python() -> Path:
    """Path of the MPICH venv's python, creating the venv (mpich + mpi4py + planaria) on first use."""
    given = os.environ.get("PLANARIA_MPICH_PYTHON")
    if given:
        return Path(given)
    venv = REPO / ".venv-mpich"
    with open(REPO / ".venv-mpich.lock", "w") as lock:     # one test process makes it, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _make_mpich_venv(venv)


def _make_mpich_venv(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if not (venv / "bin" / "mpichversion").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip = [str(py), "-m", "pip", "install", "-q"]
        subprocess.run(pip + ["mpich>=4.2,<6", "mpi4py>=4.1,<5", "numpy>=1.26,<3", "pyzmq>=25,<28",
                              "msgpack>=1.0,<2", "typer>=0.12,<1", "rich>=13,<16"], check=True, timeout=900)
        subprocess.run(pip + ["--no-deps", "-e", str(REPO)], check=True, timeout=300)
    return py


@pytest.fixture(scope="session")
def mpich_python() -> str:
    return str(_mpich_python())


def _is_worker(session: pytest.Session) -> bool:
    return hasattr(session.config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    """The tests start hundreds of Python processes that import planaria: compile its bytecode once,
    also where PYTHONDONTWRITEBYTECODE keeps each of those processes from caching what it compiled."""
    import compileall
    compileall.compile_dir(str(REPO / "src" / "planaria"), quiet=1)
    from planaria.launch import sessiondirs
    sessiondirs.remove_stale()      # a killed mpiexec's directory fails the next mpiexec with its pid


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Jobs whose mpiexec the tests killed left Open MPI's shared-memory files (delete those nothing
    maps any more) and session directories."""
    if _is_worker(session):
        return                      # the other test process may still run jobs: the main process cleans up
    from planaria.launch import sessiondirs, shmfiles
    shmfiles.remove_orphaned()
    sessiondirs.remove_stale()
