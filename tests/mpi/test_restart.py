"""``planaria run --restart``: a job loses a whole host and is relaunched on the host left.

Two test hosts (network namespaces); every process of the second one, its Open MPI daemon
included, is killed while the job runs. Open MPI then aborts the whole job; the launcher must
drop the dead host, relaunch in the same job directory, and the application must resume from its
newest complete file checkpoint and finish with the right result.

Needs root and iproute2; skipped where namespaces cannot be created.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planaria.checkpoint import FileStore
from planaria.launch import netns
from tests.mpi.mpijob import two_test_hosts

pytestmark = [pytest.mark.mpi, pytest.mark.netns]

SCRIPTS = Path(__file__).parent / "scripts"
BINDIR = Path(sys.executable).parent
PREFIX = "plr-"
STEPS, EVERY, PAUSE = 120, 5, 0.05


@pytest.fixture
def hosts(tmp_path):
    yield from two_test_hosts(tmp_path, PREFIX, "10.213.11.0/24")


def _kill_host(hs: netns.HostSet, name: str) -> list[int]:
    """SIGKILL every process of host ``name`` (its daemon, the ranks, the launch agent)."""
    killed = []
    for _ in range(3):  # a process may fork while we kill
        cp = subprocess.run([hs.ip, "netns", "pids", name], capture_output=True, text=True, timeout=10)
        pids = [int(x) for x in cp.stdout.split() if x.isdigit()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return killed


@pytest.mark.timeout(240)
def test_restart_after_host_loss(hosts, tmp_path):
    hs, state_root = hosts
    h1, h2 = hs.names
    home = tmp_path / "home"
    env = dict(os.environ)
    env.update(PLANARIA_HOME=str(home), PLANARIA_HOSTS_DIR=str(state_root), PYTHONUNBUFFERED="1")
    env.pop("PLANARIA_CONTROL_URI", None)
    argv = [sys.executable, "-m", "planaria.cli.main", "run", "--netns", f"{h1},{h2}", "-n", "4",
            "--restart", "1", "--timeout", "120", "--",
            "python", str(SCRIPTS / "restart_app.py"), str(STEPS), str(EVERY), str(PAUSE)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    out = err = ""
    try:
        # wait until the first attempt runs on both hosts and has a few complete checkpoints
        deadline = time.time() + 90
        newest = None
        while time.time() < deadline and proc.poll() is None:
            jobs = list((home / "jobs").glob("*")) if (home / "jobs").exists() else []
            if jobs and (jobs[0] / "checkpoints").is_dir():
                newest = FileStore.latest_complete(jobs[0] / "checkpoints", nranks=4)
                if newest is not None and newest >= 3 * EVERY:
                    break
            time.sleep(0.1)
        assert proc.poll() is None, "the job ended before the host was killed"
        assert newest is not None and newest >= 3 * EVERY, f"no checkpoints in time (newest {newest})"
        assert newest < STEPS - 4 * EVERY, "the job ran too fast to be interrupted"
        killed = _kill_host(hs, h2)
        assert killed, f"nothing ran on {h2}"
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            out2, err2 = proc.communicate(timeout=10)
            out, err = out + out2, err + err2
    report = f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    assert proc.returncode == 0, report

    jobdir = next((home / "jobs").iterdir())
    attempts = [json.loads(line) for line in (jobdir / "attempts.jsonl").read_text().splitlines()]
    assert len(attempts) == 2, report + f"\nattempts: {attempts}"
    first, second = attempts
    assert first["node_failure"], first
    assert first["status"] != 0 and first["next"] == "restart", first
    assert first["hosts"] == [h1, h2] and first["dropped_hosts"] == [h2], first
    assert second["restart"] == 1 and second["hosts"] == [h1], second
    assert second["status"] == 0 and second["node_failure"] is None, second
    assert second["ranks"] == {"finished": 4}, second
    assert f"restart 1 of 1 on {h1}" in err, report

    summary = json.loads((jobdir / "summary.json").read_text())
    assert summary["status"] == 0 and summary["restarts"] == 1, summary
    assert {r["host"] for r in summary["ranks"]} == {h1}, summary

    starts = [json.loads(m) for m in re.findall(r"^\[0\] START (\{.*\})$", out, re.M)]
    assert len(starts) == 2, report
    assert starts[0]["restart"] == 0 and starts[0]["resumed_from"] is None, starts
    assert set(starts[0]["hosts"]) == {h1, h2}, starts
    assert starts[1]["restart"] == 1 and starts[1]["hosts"] == [h1] * 4, starts
    # resumed from the newest complete checkpoint, at or after the one seen before the kill
    assert starts[1]["resumed_from"] is not None and starts[1]["resumed_from"] >= newest > 0, starts
    assert starts[1]["first_step"] == starts[1]["resumed_from"], starts
    results = [json.loads(m) for m in re.findall(r"^\[0\] RESULT (\{.*\})$", out, re.M)]
    assert results == [{"ok": True, "restart": 1, "resumed_from": starts[1]["resumed_from"], "size": 4}], report


# --------------------------------------------------------------------------- without test hosts


def _run_cli(home: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(PLANARIA_HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("PLANARIA_CONTROL_URI", None)
    return subprocess.run([sys.executable, "-m", "planaria.cli.main", "run", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(120)
def test_restart_on_this_machine_without_reinjecting(tmp_path):
    """All ranks die at step 12 in the first attempt; the relaunch resumes from version 10."""
    home = tmp_path / "home"
    cp = _run_cli(home, "-n", "2", "--restart", "2", "--timeout", "90",
                  "--inject", "kill:rank=1,iter=100000", "--",
                  "python", str(SCRIPTS / "restart_app.py"), "30", "5", "0.01", "12")
    report = f"exit {cp.returncode}\nstdout:\n{cp.stdout}\nstderr:\n{cp.stderr}"
    assert cp.returncode == 0, report
    jobdir = next((home / "jobs").iterdir())
    attempts = [json.loads(line) for line in (jobdir / "attempts.jsonl").read_text().splitlines()]
    assert [a["attempt"] for a in attempts] == [1, 2], attempts
    assert attempts[0]["node_failure"] and attempts[0]["next"] == "restart", attempts[0]
    assert attempts[0]["inject"] and attempts[1]["inject"] == "", attempts   # no --reinject
    assert attempts[1]["status"] == 0 and attempts[1]["hosts"] is None, attempts[1]
    assert "restart 1 of 2 on this machine" in cp.stderr, report
    results = [json.loads(m) for m in re.findall(r"^\[0\] RESULT (\{.*\})$", cp.stdout, re.M)]
    assert results == [{"ok": True, "restart": 1, "resumed_from": 10, "size": 2}], report
    summary = json.loads((jobdir / "summary.json").read_text())
    assert summary["restarts"] == 1 and len(summary["attempts"]) == 2, summary


@pytest.mark.timeout(60)
def test_no_restart_when_the_application_fails(tmp_path):
    """A rank that finishes with an error is the application's verdict: no relaunch."""
    home = tmp_path / "home"
    cp = _run_cli(home, "-n", "2", "--restart", "1", "--timeout", "50", "--",
                  "python", "-c", "import sys; sys.exit(3)")
    assert cp.returncode != 0, cp.stderr
    jobdir = next((home / "jobs").iterdir())
    attempts = [json.loads(line) for line in (jobdir / "attempts.jsonl").read_text().splitlines()]
    assert len(attempts) == 1 and attempts[0]["node_failure"] is None, attempts
    assert "node failure" not in cp.stderr and "restart 1 of" not in cp.stderr, cp.stderr


@pytest.mark.timeout(30)
def test_usage_errors(tmp_path):
    home = tmp_path / "home"
    cp = _run_cli(home, "-n", "2", "--restart", "-1", "--", "python", "-c", "pass")
    assert cp.returncode == 2 and "--restart" in cp.stderr, cp.stderr
    cp = _run_cli(home, "-n", "2", "--netns", "nosuch-h1,nosuch-h2", "--", "python", "-c", "pass")
    assert cp.returncode == 2 and "no test hosts" in cp.stderr, cp.stderr
    cp = _run_cli(home, "-n", "2", "--netns", "a-h1,a-h2", "--hosts", "x:2", "--", "python", "-c", "pass")
    assert cp.returncode == 2 and "--netns" in cp.stderr, cp.stderr
    assert not (home / "jobs").exists() or not list((home / "jobs").iterdir())


def test_runtime_watch_and_restart_rule():
    from planaria.launch.attempt import AttemptResult
    from planaria.launch.output import RuntimeWatch
    from planaria.launch.runner import EXIT_OK, node_failure

    w = RuntimeWatch()
    for line in ["PRTE has lost communication with a remote daemon.", "",
                 "  HNP daemon   : [prterun-a-1@0,0] on node a",
                 "  Remote daemon: [prterun-a-1@0,1] on node b", ""]:
        w.feed(line)
    assert w.daemon_loss and w.lost_hosts == ["b"]
    w = RuntimeWatch()
    for line in ["A daemon failed to report back after being spawned. This could", "",
                 "  Local host:    a", "  Remote host:   c"]:
        w.feed(line)
    assert w.daemon_loss and w.lost_hosts == ["c"]
    w = RuntimeWatch()
    w.feed("  Remote host:   c")          # not after a daemon-loss report
    assert not w.daemon_loss and w.lost_hosts == []

    def att(**kw):
        a = AttemptResult(number=1, argv=[], hosts=None, inject="", t_start=0.0)
        for k, v in kw.items():
            setattr(a, k, v)
        return a

    lost = {0: {"state": "lost"}, 1: {"state": "lost"}}
    assert node_failure(att(outcome="failed", status=1, table=lost))
    assert node_failure(att(outcome="failed", status=1, daemon_loss=True, lost_hosts=["b"]))
    assert node_failure(att(outcome="failed", status=1, mpiexec_rc=-9))
    assert node_failure(att(outcome="finished", status=EXIT_OK, table=lost)) is None
    assert node_failure(att(outcome="timeout", status=124, table=lost)) is None
    assert node_failure(att(outcome="interrupted", status=130, table=lost)) is None
    some_done = {0: {"state": "lost"}, 1: {"state": "finished", "exit_code": 2}}
    assert node_failure(att(outcome="failed", status=2, table=some_done)) is None
    # after a daemon loss the runtime aborted the job, whatever some ranks said before dying
    assert node_failure(att(outcome="failed", status=1, table=some_done, daemon_loss=True))
    assert node_failure(att(outcome="failed", status=3, mpiexec_rc=3)) is None
    # ranks Open MPI's known crash took: restarted although some ranks finished (with exit 3, say)
    crashed = {**some_done, 2: {"state": "lost"}}
    assert "rank(s) 0,2 crashed inside the MPI library" in node_failure(
        att(outcome="failed", status=3, table=crashed, library_crashed=[0, 2]))
    assert node_failure(att(outcome="finished", status=EXIT_OK, table=crashed, library_crashed=[0, 2])) is None
    # a program without planaria's runtime: the rank recorder's records stand in for the table
    killed = {0: {"end": 1.0, "signal": 9}, 1: {"end": 1.0, "signal": 9}}
    assert node_failure(att(outcome="failed", status=137, fates=killed, rank_signalled=True))
    one_done = {0: {"end": 1.0, "exit_code": 0}, 1: {"end": 1.0, "signal": 9}}
    assert node_failure(att(outcome="failed", status=137, fates=one_done, rank_signalled=True)) is None
    # the probes, not the runtime's report, decide which host is gone: the note says when they differ
    from planaria.launch.runner import _misnamed
    assert _misnamed(att(lost_hosts=["a"]), ["b"]) == "; the probes find b gone and a answering"
    assert _misnamed(att(lost_hosts=["a"]), ["a", "b"]) == "; the probes find b gone too"
    assert _misnamed(att(lost_hosts=["a"]), ["a"]) == ""
    assert _misnamed(att(lost_hosts=[]), ["a"]) == ""
