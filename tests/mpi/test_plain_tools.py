"""ps, ctl and diagnose of a running program without planaria's runtime (plain mpi4py).

The launcher knows such ranks only from the rank recorder; the diagnosis reads their stacks
with py-spy --native and names the rank that is not in an MPI call while the others wait.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.mpi.mpijob import root_env

pytestmark = [pytest.mark.mpi]
SCRIPT = Path(__file__).parent / "scripts" / "plain_fate.py"


def _cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planaria.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _stuck_line() -> int:
    return next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if "STUCK_LINE" in line)


@pytest.mark.timeout(150)
def test_ps_diagnose_and_ctl_on_a_plain_program(tmp_path):
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-m", "planaria.cli.main", "run", "-n", "3", "--timeout", "90", "--json",
                             "--", "python", str(SCRIPT), "stuck", marker], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        rows: list[dict] = []
        deadline = time.time() + 40
        while time.time() < deadline:
            res = _cli(env, "ps", "latest", "--json", timeout=20)
            rows = json.loads(res.stdout)["ranks"] if res.returncode == 0 else []
            if len(rows) == 3 and all(r["state"] == "running" and r["pid"] for r in rows):
                break
            time.sleep(0.3)
        assert [r["rank"] for r in rows] == [0, 1, 2], rows
        assert all(r["runtime"] is False for r in rows)
        time.sleep(1.0)                         # ranks 0 and 2 are in the barrier by now
        res = _cli(env, "event", "latest", "USER+1", timeout=20)
        assert res.returncode == 0 and "no handler runs" in res.stdout, res.stdout + res.stderr

        res = _cli(env, "diagnose", "--json", timeout=90)
        assert res.returncode == 0, res.stderr
        report = json.loads(res.stdout)
        assert report["verdict"] == "hang", report["text"]
        cause = report["root_causes"][0]
        assert cause["rank_list"] == [1] and cause["waiters"] == 2, report["text"]
        assert cause["site"].endswith(f"plain_fate.py:{_stuck_line()} in <module>"), report["text"]
        assert [(w["op"], w["ranks"]) for w in report["waiting"]] == [("MPI_Barrier", "0,2")], report["text"]

        # a paused rank shows as paused in ps, and running again after resume
        assert _cli(env, "ctl", "latest", "pause", "--ranks", "2", timeout=20).returncode == 0
        states = {r["rank"]: r["state"] for r in json.loads(_cli(env, "ps", "latest", "--json", timeout=20).stdout)["ranks"]}
        assert states == {0: "running", 1: "running", 2: "paused"}, states
        assert _cli(env, "ctl", "latest", "resume", "--ranks", "2", timeout=20).returncode == 0
        states = {r["rank"]: r["state"] for r in json.loads(_cli(env, "ps", "latest", "--json", timeout=20).stdout)["ranks"]}
        assert states[2] == "running", states

        res = _cli(env, "ctl", "latest", "kill", "--ranks", "1", "--json", timeout=20)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["ranks"] == [1]
        out, err = proc.communicate(timeout=60)  # the others see the failure, or the default handler ends them
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    summary = json.loads(out)
    assert summary["outcome"] in ("failed", "aborted"), err
    assert {r["rank"]: r["how"] for r in summary["ranks"]}[1] == "ended by planaria ctl kill"

    res = _cli(env, "diagnose", "--json", timeout=30)      # post-mortem, from the log and the summary
    assert res.returncode == 0, res.stderr
    post = json.loads(res.stdout)
    assert [c["rank_list"] for c in post["root_causes"]] == [[1]], post["text"]
    assert post["root_causes"][0]["reason"] == "ended by planaria ctl kill", post["text"]
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == []


@pytest.mark.timeout(90)
def test_timed_kills_of_the_plan_reach_a_plain_program(tmp_path):
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    plan = ["--inject", "kill:rank=1,time=3", "--inject", "hang:rank=2,iter=4"]
    res = _cli(env, "run", "-n", "3", "--timeout", "40", "--json", *plan, "--", "python", str(SCRIPT), "sleep",
               timeout=80)
    assert res.returncode == 0, res.stderr                      # no injector in the ranks: nothing happened
    assert "--inject had no effect: no rank used planaria's runtime" in res.stderr
    res = _cli(env, "run", "-n", "3", "--timeout", "40", "--json", "--default-handler", "none",
               "--launcher-kills", *plan, "--", "python", str(SCRIPT), "sleep", timeout=80)
    assert res.returncode == 128 + signal.SIGKILL, res.stderr
    assert "these faults need planaria's runtime in the ranks: hang:rank=2,iter=4" in res.stderr
    how = {r["rank"]: (r["how"], r["t"]) for r in json.loads(res.stdout)["ranks"]}
    assert how[1][0] == "injected kill at t=3.00s (sent by the launcher)", how
    assert 3 <= how[1][1] < 6, how
    assert how[0][0] == how[2][0] == "exit 0"
    post = json.loads(_cli(env, "diagnose", "--json", timeout=30).stdout)
    assert [c["rank_list"] for c in post["root_causes"]] == [[1]], post["text"]
    assert post["root_causes"][0]["reason"].startswith("killed by injection (injected kill at t=3.00s"), post["text"]
