"""A real two-node Slurm cluster (``cluster.sh``: slurmctld plus two slurmd nodes in network
namespaces on this machine) for the tests of planaria under Slurm, up for this test session only."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "cluster.sh"
STATE = Path(os.environ.get("SLURMTEST_DIR", "/tmp/planaria-slurm"))
LOCK_WAIT = 900.0          # seconds to wait for another test run's cluster (one per machine at a time)
NODES = ("plslurm1", "plslurm2")
LOGIN_IP = "10.214.0.10"
APP = '''# a planaria program (pl.world + handle_failures) that shrinks past failures, one line per rank
import socket, sys, time
import numpy as np
from mpi4py import MPI
import planaria as pl
from planaria import events

steps = int(sys.argv[1])
comm = pl.world()
me = MPI.COMM_WORLD.Get_rank()
events.handle_failures("app")
total, i = np.zeros(1), 0
while i < steps:
    pl.step(i)
    try:
        comm.Allreduce(np.ones(1), total)
        i += 1
    except pl.FailureError:
        comm.revoke()
        comm = comm.shrink()
        i = comm.allreduce(i, op=MPI.MAX)
print(f"world rank {me} on {socket.gethostname()}: done {i} steps, comm size {comm.Get_size()}", flush=True)
'''
PLAIN = '''# a plain mpi4py program: world rank 0 kills itself in the first attempt
import os, signal, socket, time
from mpi4py import MPI
c = MPI.COMM_WORLD
if c.Get_rank() == 0 and os.environ.get("PLANARIA_RESTART") == "0":
    time.sleep(1)
    os.kill(os.getpid(), signal.SIGKILL)
c.Barrier()
print(f"attempt {os.environ.get('PLANARIA_RESTART')}: rank {c.Get_rank()} on {socket.gethostname()} done", flush=True)
'''


class Cluster:
    """The running test cluster: commands on its login host, node failures and repairs."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work = work
        self.env = env
        self.bin = Path(sys.executable).parent

    def script(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), *args], cwd=self.work, env=self.env, text=True,
                              capture_output=True, timeout=timeout)

    def login(self, *cmd: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """``cmd`` on the login host, in the work directory (bounded: a hung job fails the test)."""
        return self.script("sh", "timeout", "-k", "5", str(int(timeout)), *cmd, timeout=timeout + 30)

    def planaria(self) -> str:
        return str(self.bin / "planaria")

    def fail(self, node: int, how: str) -> None:
        out = self.script("fail", str(node), how)
        assert out.returncode == 0, out.stderr

    def node_up(self, node: int) -> None:
        out = self.script("node-up", str(node), timeout=150)
        assert out.returncode == 0, f"node {node} did not come back: {out.stderr[-2000:]}"

    def jobs(self) -> list[Path]:
        return sorted((self.work / ".planaria" / "jobs").glob("*"))


def _why_not() -> str | None:
    """Why this machine cannot run the test cluster, or None."""
    if os.environ.get("PLANARIA_SLURM_TESTS") == "0":
        return "turned off by PLANARIA_SLURM_TESTS=0"
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "the Slurm test cluster needs root on Linux (network namespaces, slurmd)"
    for tool in ("ip", "nsenter", "unshare", "timeout"):
        if shutil.which(tool) is None:
            return f"the Slurm test cluster needs {tool!r}, which is not installed"
    from planaria.launch import netns
    ok, reason = netns.available()
    if not ok:
        return f"the Slurm test cluster's hosts are network namespaces: {reason}"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "Slurm (slurm-wlm, munge) is not installed and there is no apt-get to install it"
    return None


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = _why_not()
    if why:
        pytest.skip(why)
    STATE.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(f"{STATE}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(lock)
                pytest.fail(f"another test run held the Slurm test cluster ({STATE}.lock) for {LOCK_WAIT:.0f} s")
            time.sleep(1)
    work = tmp_path_factory.mktemp("slurm")
    (work / "app.py").write_text(APP)
    (work / "plain.py").write_text(PLAIN)
    env = dict(os.environ, VENV=str(Path(sys.executable).parent.parent), SLURMTEST_DIR=str(STATE),
               SLURMTEST_PIDNS=os.environ.get("SLURMTEST_PIDNS", "1"))
    c = Cluster(work, env)
    try:
        c.script("down", timeout=120)                # what a killed earlier run left
        up = c.script("up", timeout=600)
        if up.returncode != 0 and shutil.which("slurmctld") is None:
            pytest.skip(f"Slurm is not installed and could not be: {up.stderr.strip().splitlines()[-1:]}")
        assert up.returncode == 0, f"the test cluster did not come up:\n{up.stderr[-3000:]}"
        yield c
    finally:
        c.script("down", timeout=120)
        os.close(lock)
