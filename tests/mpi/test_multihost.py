"""One MPI job over two "hosts" (network namespaces joined by a veth pair).

Needs root and iproute2; skipped where namespaces cannot be created.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from planaria.launch import netns

pytestmark = [pytest.mark.mpi, pytest.mark.netns]

SCRIPTS = Path(__file__).parent / "scripts"
BINDIR = Path(sys.executable).parent
MPIEXEC = BINDIR / "mpiexec"
PREFIX = "plt-"


@pytest.fixture(scope="module")
def hosts(request):
    ok, reason = netns.available()
    if not ok:
        pytest.skip(f"network namespaces unavailable: {reason}")
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec next to {sys.executable}")
    netns.remove_orphaned(PREFIX)
    names = (f"{PREFIX}{os.getpid()}-h1", f"{PREFIX}{os.getpid()}-h2")
    hs = netns.create_hosts(names, "10.213.7.0/24", replace=True)
    request.addfinalizer(hs.destroy)
    return hs


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1")
    env["PATH"] = f"{BINDIR}{os.pathsep}{env.get('PATH', '')}"
    return env


def _mpiexec(hs: netns.HostSet, script: str, *args: str, ft: bool = False,
             timeout: float = 90) -> subprocess.CompletedProcess[str]:
    argv = [*hs.launch_prefix, str(MPIEXEC)]
    if ft:
        argv += ["--with-ft", "ulfm"]
    argv += [*hs.mpiexec_args(2, 2), "-n", "4", sys.executable, str(SCRIPTS / script), *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        pytest.fail(f"mpiexec timed out after {timeout}s\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.timeout(120)
def test_job_spans_two_hosts(hosts):
    h1, h2 = hosts.names
    cp = _mpiexec(hosts, "multihost_hostname.py")
    assert cp.returncode == 0, f"stdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    ranks = dict(re.findall(r"^RANK (\d+) HOST (\S+) SIZE 4$", cp.stdout, re.M))
    assert ranks == {"0": h1, "1": h1, "2": h2, "3": h2}, cp.stdout
    m = re.search(r"^HOSTS (\S+)$", cp.stdout, re.M)
    assert m and set(m.group(1).split(",")) == {h1, h2}, cp.stdout


@pytest.mark.timeout(120)
def test_ulfm_survives_rank_killed_on_second_host(hosts):
    h1, h2 = hosts.names
    cp = _mpiexec(hosts, "multihost_ulfm.py", h2, ft=True)
    report = f"exit {cp.returncode}\nstdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    assert "VICTIM 3" in cp.stdout, report
    detected = dict(re.findall(r"^RANK (\d+) HOST \S+ DETECTED class=(\d+)", cp.stdout, re.M))
    # the ranks on the first host see the failure as PROC_FAILED / REVOKED
    # (ERR_OTHER occasionally on the rank that noticed first)
    for r in ("0", "1"):
        assert r in detected, report
        assert int(detected[r]) in (75, 77, 16), report
    recovered = dict(re.findall(r"^RANK (\d+) HOST (\S+) ULFM-RECOVERED$", cp.stdout, re.M))
    assert recovered.get("0") == h1 and recovered.get("1") == h1, report
    assert "3" not in recovered, report
    assert re.search(r"SHRUNK size=3 sum=3", cp.stdout), report


def test_removing_a_host_deletes_its_open_mpi_shared_memory_files(hosts):
    # a host whose processes were all killed leaves Open MPI's sm_segment files in /dev/shm,
    # which no namespace separates; removing the host deletes its files and no other host's
    name = f"{PREFIX}{os.getpid()}-gone"
    mine = netns.SHM_DIR / f"sm_segment.{name}.0.5eed0001.0"
    longer = netns.SHM_DIR / f"sm_segment.{name}0.0.5eed0001.0"     # another host whose name extends it
    mine.write_bytes(b"x")
    longer.write_bytes(b"x")
    try:
        assert netns.remove_host(name) is False                    # no namespace by that name
        assert not mine.exists() and longer.exists()
    finally:
        mine.unlink(missing_ok=True)
        longer.unlink(missing_ok=True)


def test_orphaned_hosts_lose_their_shared_memory_files_and_live_ones_keep_them(hosts):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                                     # a pid that no longer runs
    orphan = netns.SHM_DIR / f"sm_segment.{PREFIX}{dead.pid}-h2.0.5eed0002.0"
    live = netns.SHM_DIR / f"sm_segment.{PREFIX}{os.getpid()}-h2.0.5eed0002.0"
    orphan.write_bytes(b"x")
    live.write_bytes(b"x")
    try:
        netns.remove_orphaned(PREFIX)
        assert not orphan.exists() and live.exists()
    finally:
        orphan.unlink(missing_ok=True)
        live.unlink(missing_ok=True)
