"""A live view of running jobs: ``pl.step(i, total=n)`` in ``planaria ps`` and ``planaria top``, a
fragments run's CF counters per rank, the progress bar of ``planaria run`` in a terminal only."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.mpi.mpijob import SCRIPTS, root_env

pytestmark = [pytest.mark.mpi]
LOOP = str(SCRIPTS / "progress_loop.py")
FRAGMENTS = str(SCRIPTS / "fragments_prog.py")


def _env(home: Path) -> dict[str, str]:
    env = root_env()
    env["PLANARIA_HOME"] = str(home)
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "planaria.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _start(env: dict[str, str], *argv: str, opts: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "planaria.cli.main", "run", "-n", "3", "--timeout", "60", *opts,
                             "--", sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)


def _top_until(env: dict[str, str], ok: Any, within: float = 40) -> dict[str, Any]:
    """``top latest --once --json`` until ``ok(snapshot)``; the last snapshot."""
    snap: dict[str, Any] = {}
    deadline = time.time() + within
    while time.time() < deadline:
        res = _cli(env, "top", "latest", "--once", "--json")
        if res.returncode == 0:
            snap = json.loads(res.stdout)
            if ok(snap):
                return snap
        time.sleep(0.3)
    raise AssertionError(f"top never showed it: {snap}")


def _end(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)


def _measured(snap: dict[str, Any]) -> bool:
    rows = snap.get("ranks") or []
    return len(rows) == 3 and all(r["state"] == "running" and r["rate"] for r in rows)


@pytest.mark.timeout(150)
def test_steps_with_a_total_in_top_and_ps(tmp_path):
    env = _env(tmp_path)
    assert _cli(env, "top", "no-such-job", "--once").returncode == 2            # bad input: one line, exit 2
    res = _cli(env, "top", "latest", "--json")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--once" in res.stderr, res.stderr
    proc = _start(env, LOOP, "60", "0.1")         # 6 s at ranks 0 and 2, 12 s at rank 1
    try:
        snap = _top_until(env, _measured)
        rows = snap["ranks"]
        assert [r["rank"] for r in rows] == [0, 1, 2]
        assert all(r["total"] == 60 and isinstance(r["step"], int) and r["role"] == "initial" for r in rows), rows
        assert all(r["last_heartbeat_s"] < 3 and r["cfs"] is None for r in rows), rows
        # rank 1 takes twice as long per step: the slowest, at about half the rate
        assert rows[1]["rate"] < 0.8 * min(rows[0]["rate"], rows[2]["rate"]), rows
        pr = snap["progress"]
        assert pr["total"] == 60 and pr["done"] <= rows[1]["step"] + 3 and pr["rate"] > 0, snap
        # an event relayed meanwhile is in the snapshot's events (from the job record)
        assert _cli(env, "event", "latest", "USER+1", "--info", "phase=io").returncode == 0
        snap = _top_until(env, lambda s: any(e["name"] == "USER+1" for e in s.get("events") or []), within=10)
        (ev,) = [e for e in snap["events"] if e["name"] == "USER+1"]
        assert ev["origin"] == "tool" and ev["info"] == {"phase": "io"}, ev
        # ps: the progress column, and --json as before with total and rate added
        table = _cli(env, "ps", "latest")
        assert table.returncode == 0 and "progress" in table.stdout and "/60" in table.stdout, table.stdout
        ps = json.loads(_cli(env, "ps", "latest", "--json").stdout)["ranks"]
        keys = {"rank", "host", "pid", "state", "role", "last_heartbeat_s", "step", "backend", "runtime", "logical"}
        assert all(keys | {"total", "rate"} <= set(r) and r["total"] == 60 for r in ps), ps
        summ = json.loads(_cli(env, "ps", "latest", "--summary", "--json").stdout)
        assert summ["progress"]["total"] == 60 and summ["ranks"] == 3, summ
        # the live view ends by itself when the job does, with the final state
        watch = subprocess.run([sys.executable, "-m", "planaria.cli.main", "top", "latest", "--interval", "0.5"],
                               capture_output=True, text=True, env=env, timeout=60)
        assert watch.returncode == 0, watch.stderr
        assert "finished" in watch.stdout and "exit 0" in watch.stdout, watch.stdout[-2000:]
        out, err = _end(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    assert "slowest rank" not in err                # stderr is a pipe here: no progress bar
    assert sorted(int(line.split()[-1]) for line in out.splitlines() if " done " in line) == [0, 1, 2], out
    final = json.loads(_cli(env, "top", "latest", "--once", "--json").stdout)
    assert final["status"] == "finished" and {r["state"] for r in final["ranks"]} == {"finished"}, final
    assert [r["step"] for r in final["ranks"]] == [59, 59, 59], final     # the bye's last step


@pytest.mark.timeout(120)
def test_a_fragments_run_shows_its_cf_counters_per_rank(tmp_path):
    env = _env(tmp_path)
    # 120 CFs of 0.1 s, 40 on each rank, one thread each; the heartbeats with counters pass a node agent
    proc = _start(env, FRAGMENTS, "steady", "-", opts=("--node-agents",))

    def counting(snap: dict[str, Any]) -> bool:
        rows = snap.get("ranks") or []
        return len(rows) == 3 and all((r["cfs"] or {}).get("done", 0) > 0 for r in rows) \
            and any(r["cfs"]["busy_pct"] > 0 for r in rows)
    try:
        snap = _top_until(env, counting)
        for r in snap["ranks"]:
            cf = r["cfs"]
            assert set(cf) == {"done", "queued", "moved", "busy_pct"}, cf
            assert 0 < cf["done"] <= 41 and cf["moved"] == 0 and 0 <= cf["busy_pct"] <= 100, cf
        out, err = _end(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    assert out.count("STATUS") == 3 and "unfinished=0" in out, out
    (jobdir,) = (tmp_path / "jobs").iterdir()
    assert '"node-hello"' in (jobdir / "events.jsonl").read_text()      # the ranks went through one


def _in_a_terminal(argv: list[str], env: dict[str, str], within: float) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as stdin, stdout and stderr; (exit status, what it wrote)."""
    pid, fd = pty.fork()
    if pid == 0:                                  # the child: its terminal is the pty
        os.execve(argv[0], argv, env)
    got = b""
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(fd, 1 << 16)
            except OSError:                       # the child closed its end
                break
            if not data:
                break
            got += data
    finally:
        done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.killpg(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), got.decode("utf-8", "replace")


@pytest.mark.timeout(90)
def test_the_progress_bar_shows_in_a_terminal_above_the_output(tmp_path):
    env = _env(tmp_path)
    env.update(TERM="xterm", COLUMNS="100")
    code, text = _in_a_terminal([sys.executable, "-m", "planaria.cli.main", "run", "-n", "2", "--timeout", "40",
                                 "--", sys.executable, LOOP, "16", "0.15"], env, 60)
    assert code == 0, text[-3000:]
    assert "slowest rank" in text and "16/16" in text, text[-3000:]
    # the ranks' lines are whole lines, printed above the bar (each after a line clear)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    lines = [ln.strip() for ln in plain.replace("\r", "\n").split("\n") if "] done " in ln]
    assert sorted(lines) == ["[0] done 0", "[1] done 1"], text[-3000:]
