"""planaria inside a real Slurm allocation (``salloc`` / ``sbatch``) on the two-node test cluster:
the job spans both nodes, survives a killed rank, probes and names hosts through Slurm, and with
``--restart 1`` finishes on the remaining node, bit for bit, after a node dies or is cut off."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import LOGIN_IP, NODES, SCRIPT, Cluster

# the first test also brings the cluster up (and installs Slurm where it is missing)
pytestmark = [pytest.mark.mpi, pytest.mark.slurm, pytest.mark.timeout(600)]

# ranks of two "nodes" share this machine's cores: without yielding, Open MPI's busy polling makes
# every message wait for a scheduler tick (docs/multihost.md)
YIELD = ["--mpiexec-arg=--mca", "--mpiexec-arg=mpi_yield_when_idle", "--mpiexec-arg=1"]
HEAT = ["python", "-m", "planaria.demo.heat", "--checkpoint", "file", "--steps", "20000", "--every", "2000",
        "--cells-per-rank", "5000"]
SAME = "final field equals the failure-free serial run bit for bit"


def _run(cluster: Cluster, *args: str, timeout: float = 180) -> str:
    out = cluster.login("salloc", "-N2", "-n4", cluster.planaria(), "run", "-n", "4", "--timeout",
                        str(int(timeout - 30)), *args, timeout=timeout)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    return text


def test_a_job_spans_both_nodes_and_survives_a_killed_rank(cluster: Cluster) -> None:
    text = _run(cluster, *YIELD, "--inject", "kill:rank=3,iter=50", "--", "python", "app.py", "1000")
    done = re.findall(r"world rank (\d) on (\S+): done 1000 steps, comm size 3", text)
    assert sorted(r for r, _ in done) == ["0", "1", "2"], text[-4000:]
    assert {h for _, h in done} == set(NODES), "the survivors should run on both nodes"
    assert re.search(rf"│ +3 │ {NODES[1]} +│ failed", text), text[-4000:]


def test_tcp_control_between_hosts_is_encrypted_and_works(cluster: Cluster) -> None:
    text = _run(cluster, "--control", f"tcp://{LOGIN_IP}:*", *YIELD, "--inject", "kill:rank=3,iter=50",
                "--", "python", "app.py", "1000")
    assert len(re.findall(r"done 1000 steps, comm size 3", text)) == 3, text[-4000:]
    job = cluster.jobs()[-1]
    assert (job / "control.uri").read_text().startswith(f"tcp://{LOGIN_IP}:")
    hellos = re.findall(r'"node": "(\w+)", "pid": \d+, "t": [\d.]+, "type": "node-hello"',
                        (job / "events.jsonl").read_text())
    assert sorted(hellos) == sorted(NODES), "each node's agent should reach the controller over TCP"


def test_probe_names_both_nodes_alive_from_inside_the_allocation(cluster: Cluster) -> None:
    code = ("from planaria.launch.layout import probe_host as p; "
            f"print('probe', sorted(h for h in {list(NODES)!r} if p(h)))")
    out = cluster.login("salloc", "-N2", "-n4", str(cluster.bin / "python"), "-c", code, timeout=90)
    assert f"probe {sorted(NODES)!r}" in out.stdout, out.stdout + out.stderr


def test_a_restart_after_a_rank_death_keeps_both_hosts(cluster: Cluster) -> None:
    text = _run(cluster, "--restart", "1", "--", "python", "plain.py")
    assert re.search(rf"restart 1 of 1 on {NODES[0]}, {NODES[1]} with 4 rank", text), text[-4000:]
    assert len(re.findall(r"attempt 1: rank \d on \S+ done", text)) == 4


def test_sbatch_job_uses_the_allocation(cluster: Cluster) -> None:
    script = cluster.work / "app.sbatch"
    out_file = cluster.work / "app.sbatch.out"
    script.write_text(f"#!/bin/bash\n#SBATCH -N2 -n4\ncd {cluster.work}\n"
                      f"{cluster.planaria()} run -n 4 --timeout 120 {' '.join(YIELD)} -- python app.py 300\n"
                      'echo "planaria rc=$?"\n')
    text = _sbatch(cluster, script, out_file, timeout=180)
    assert "planaria rc=0" in text, text[-4000:]
    hosts = re.findall(r"world rank \d on (\S+): done 300 steps, comm size 4", text)
    assert sorted(hosts) == sorted(NODES * 2), text[-4000:]


def test_a_job_whose_daemons_wait_for_resources_ends_at_the_start_timeout(cluster: Cluster) -> None:
    """A step of the allocation holds every CPU, so Open MPI's ``srun`` for its daemons waits
    ("Requested nodes are busy"): no rank starts. The job ends at --start-timeout (exit 2), not
    at --timeout, and its ``srun`` is ended with it, so the allocation's next step runs."""
    script = cluster.work / "busy.sbatch"
    out_file = cluster.work / "busy.sbatch.out"
    script.write_text(f"#!/bin/bash\n#SBATCH -N2 -n4\ncd {cluster.work}\n"
                      "srun -N2 -n4 sleep 90 &\nsleep 3\n"
                      f"{cluster.planaria()} run -n 4 --start-timeout 8 --timeout 80 -- python app.py 10\n"
                      'echo "planaria rc=$?"\n'
                      "kill %1; wait\n"
                      "srun -N2 -n2 --time=1 hostname | sort | tr '\\n' ' '; echo\n")
    t = time.monotonic()
    text = _sbatch(cluster, script, out_file, timeout=150)
    assert "planaria rc=2" in text, text[-4000:]
    assert "no rank had started 8 s after the launch" in text, text[-4000:]
    assert time.monotonic() - t < 75, text[-4000:]
    assert f"{NODES[0]} {NODES[1]}" in text, text[-4000:]


def _sbatch(cluster: Cluster, script: Path, out_file: Path, timeout: float) -> str:
    jid = cluster.login("sbatch", "--parsable", "-o", str(out_file), str(script), timeout=30).stdout.strip()
    assert jid.isdigit(), jid
    _wait_job(cluster, jid, timeout)
    return out_file.read_text(errors="replace")


def _wait_job(cluster: Cluster, jid: str, timeout: float) -> None:
    """Until the job's batch script has ended. A job left completing counts as ended: after a node
    dies, Slurm keeps its job completing until SlurmdTimeout declares the node down."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not cluster.login("squeue", "-h", "-j", jid, "-t", "PD,CF,R,S", timeout=30).stdout.strip():
            return
        time.sleep(1)
    cluster.login("scancel", jid, timeout=30)
    pytest.fail(f"Slurm job {jid} still ran after {timeout:.0f} s")


def _when_checkpointed(cluster: Cluster, before: list[Path], version: int, timeout: float = 120) -> Path:
    """The new job's directory, once it holds checkpoint ``version``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [p for p in cluster.jobs() if p not in before]
        if new and (new[-1] / "checkpoints" / f"v{version:08d}").exists():
            return new[-1]
        time.sleep(0.2)
    pytest.fail(f"no job reached checkpoint {version} in {timeout:.0f} s")


@pytest.mark.parametrize("how", ["kill", "link"])
def test_a_lost_node_is_survived_by_a_restart_on_the_other(cluster: Cluster, how: str) -> None:
    """kill: under sbatch, every process of node 2 dies (slurmd, prted, ranks); link: under salloc
    from the login host, node 2 is cut off with its processes running (once reported as success)."""
    before = cluster.jobs()
    cmd = [cluster.planaria(), "run", "-n", "4", "--restart", "1", "--timeout", "200", *YIELD, "--", *HEAT]
    out_file = cluster.work / f"nodefail-{how}.out"
    try:
        if how == "kill":
            script = cluster.work / "nodefail.sbatch"
            script.write_text(f"#!/bin/bash\n#SBATCH -N2 -n4 --no-kill\ncd {cluster.work}\n{' '.join(cmd)}\n"
                              'echo "planaria rc=$?"\n')
            jid = cluster.login("sbatch", "--parsable", "-o", str(out_file), str(script), timeout=30).stdout.strip()
            assert jid.isdigit(), jid
            _when_checkpointed(cluster, before, 6000)
            cluster.fail(2, "kill")
            _wait_job(cluster, jid, 240)
            text = out_file.read_text(errors="replace")
            assert "planaria rc=0" in text, text[-4000:]
        else:
            with open(out_file, "w") as sink:
                proc = subprocess.Popen(["bash", str(SCRIPT), "sh", "timeout", "-k", "5", "240", "salloc", "-N2",
                                         "-n4", "--no-kill", *cmd], cwd=cluster.work, env=cluster.env,
                                        stdout=sink, stderr=subprocess.STDOUT)
                try:
                    _when_checkpointed(cluster, before, 6000)
                    cluster.fail(2, "link")
                    rc = proc.wait(timeout=270)
                finally:
                    if proc.poll() is None:
                        proc.kill()
            text = out_file.read_text(errors="replace")
            assert rc == 0, text[-4000:]
        assert re.search(rf"dropped {NODES[1]}; restart 1 of 1 on {NODES[0]} with 4 rank", text), text[-4000:]
        assert SAME in text, text[-4000:]
    finally:
        cluster.node_up(2)
