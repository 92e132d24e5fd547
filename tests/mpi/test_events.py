"""Event notification and tools with real jobs under planaria run (ULFM backend)."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from tests.mpi.mpijob import SCRIPTS, root_env

pytestmark = [pytest.mark.mpi]

APP = str(SCRIPTS / "events_app.py")
U = lambda n: -3000 - n  # noqa: E731  (planaria.events.user_code)


def _env(home: Path) -> dict[str, str]:
    env = root_env()
    env["PLANARIA_HOME"] = str(home)
    return env


def _run(home: Path, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", *args]
    env = _env(home)
    env["PLANARIA_FINALIZE_TIMEOUT"] = "3"      # MPI_Finalize may spin after a failure
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _results(text: str) -> list[dict]:
    return [json.loads(line.split("RESULT ", 1)[1]) for line in text.splitlines() if "RESULT " in line]


def _jobdir(home: Path) -> Path:
    jobs = sorted((home / "jobs").iterdir())
    assert jobs, "no job directory"
    return jobs[-1]


def _events(jobdir: Path) -> list[dict]:
    return [json.loads(x) for x in (jobdir / "events.jsonl").read_text().splitlines() if x.strip()]


@pytest.mark.timeout(90)
def test_resilient_handler_keeps_the_job_alive_after_a_kill(tmp_path):
    res = _run(tmp_path, ["-n", "3", "--spares", "1", "--timeout", "50",       # default handler: abort
                          "--inject", "kill:rank=1,iter=10", "--", sys.executable, APP, "resilient", "40"])
    assert res.returncode == 0, res.stderr[-3000:]
    out = _results(res.stdout)
    working = [r for r in out if r["logical"] is not None]
    assert sorted(r["logical"] for r in working) == [0, 1, 2], out
    # every survivor's resilient handler completed the merged process-failed event naming rank 1
    for r in working:
        assert ["PMIX_ERR_PROC_ABORTED_BY_SIG", [1]] in r["events"], r
    evs = _events(_jobdir(tmp_path))
    relayed = [e for e in evs if e["type"] == "event" and e["affected"] == [1]
               and e["name"] != "PLANARIA_EVENT_FAULT_LOCALIZED"]     # (the localization's incident)
    assert len(relayed) == 1, relayed                       # several signals, one event
    assert not [e for e in evs if e["type"] == "abort"]


@pytest.mark.timeout(90)
def test_without_a_resilient_handler_the_default_handler_ends_the_job(tmp_path):
    t = time.monotonic()
    res = _run(tmp_path, ["-n", "3", "--timeout", "50",          # the default: --default-handler abort
                          "--inject", "kill:rank=1,iter=10", "--", sys.executable,
                          str(SCRIPTS / "steady_loop.py"), "1000"])
    took = time.monotonic() - t
    assert res.returncode == 1, res.stderr[-3000:]
    assert took < 20, took                                   # the loop alone would take 30 s
    jd = _jobdir(tmp_path)
    summary = json.loads((jd / "summary.json").read_text())
    assert summary["outcome"] == "aborted"
    aborts = [e for e in _events(jd) if e["type"] == "abort"]
    assert aborts and aborts[0]["event"]["affected"] == [1]
    assert "default event handler" in res.stderr
    # the survivors' state was collected before the job was stopped, and names the dead rank
    report = json.loads((jd / "diag-1.json").read_text())
    named = [rc for rc in report["root_causes"] if 1 in rc.get("rank_list", [])]
    assert named or "rank 1 failed" in report["text"], report["text"]


@pytest.mark.timeout(90)
def test_notify_only_default_handler_lets_the_survivors_go_on(tmp_path):
    res = _run(tmp_path, ["-n", "3", "--default-handler", "none", "--timeout", "50",
                          "--inject", "kill:rank=1,iter=10", "--", sys.executable,
                          str(SCRIPTS / "steady_loop.py"), "40"])
    jd = _jobdir(tmp_path)
    assert not [e for e in _events(jd) if e["type"] == "abort"], res.stderr[-3000:]
    summary = json.loads((jd / "summary.json").read_text())
    states = {r["rank"]: r["state"] for r in summary["ranks"]}
    assert states[1] == "failed" and states[0] == states[2] == "finished", summary["ranks"]


@pytest.mark.timeout(60)
def test_chain_order_ranges_and_cache_in_a_job(tmp_path):
    res = _run(tmp_path, ["-n", "3", "--timeout", "40", "--", sys.executable, APP, "events"])
    assert res.returncode == 0, res.stderr[-3000:]
    out = {r["rank"]: r for r in _results(res.stdout)}
    assert sorted(out) == [0, 1, 2]
    for r in out.values():
        assert r["order"] == ["G", "A", "B", "D", "C", "E"]    # first, single category, multi; F never runs
        assert r["seen_by_E"] == ["G", "A", "B", "D", "C"]
        assert r["only1"] == [1]                                # registration range: custom {1}
        assert r["late"] == ["late"]                            # cached event reached the late registrant
    assert out[0]["ranges"] == sorted([U(4), U(5)])            # local + proc_local
    assert out[1]["ranges"] == out[2]["ranges"] == sorted([U(3), U(4)])   # custom {1,2} + local


def _cli(home: Path, *args: str, stdin: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planaria.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env(home), input=stdin)


@pytest.mark.timeout(120)
def test_tools_against_a_running_job_and_refusals(tmp_path):
    # the job outlives the `ctl kill` below: notify-only default handler
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "3", "--timeout", "80",
           "--default-handler", "none", "--", sys.executable, APP, "tools", "60"]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            ps = _cli(tmp_path, "ps", "latest", "--json")
            rows = json.loads(ps.stdout)["ranks"] if ps.returncode == 0 else []
            if len(rows) == 3 and all(r["state"] == "running" for r in rows):
                break
            assert time.monotonic() < deadline, ps.stderr
            time.sleep(0.3)
        assert {"rank", "host", "pid", "state", "role", "last_heartbeat_s"} <= set(rows[0])
        assert all(r["pid"] for r in rows) and all(r["last_heartbeat_s"] < 3 for r in rows)
        jd = _jobdir(tmp_path)

        # security: secret and socket are private; a client without the secret gets no answer
        assert stat.S_IMODE(os.stat(jd / "secret").st_mode) == 0o600
        uri = (jd / "control.uri").read_text().strip()
        assert uri.startswith("ipc://")
        assert stat.S_IMODE(os.stat(uri[len("ipc://"):]).st_mode) == 0o600
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(uri)
        s.send(msgpack.packb({"type": "ps"}))
        s.send(msgpack.packb({"type": "ps", "tok": "0" * 64}))
        assert not s.poll(1000)
        s.close()
        ctx.term()

        # key-values: rank 0 published 'ready'; rank 1 waits for 'answer'
        assert _cli(tmp_path, "lookup", "latest", "ready").stdout.strip() == 'ready="yes"'
        missing = _cli(tmp_path, "lookup", "latest", "nothing", "--wait", "--timeout", "0.5")
        assert missing.returncode == 1 and missing.stdout == ""
        assert missing.stderr == "planaria lookup: nothing not published within 0.5 s\n", missing.stderr
        waiter = subprocess.Popen([sys.executable, "-m", "planaria.cli.main", "lookup", "latest", "answer",
                                   "--wait", "--timeout", "inf"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=_env(tmp_path))
        time.sleep(1.0)
        assert waiter.poll() is None                 # still waiting for the key
        assert _cli(tmp_path, "publish", "latest", "answer=42").returncode == 0
        got, _ = waiter.communicate(timeout=10)
        assert waiter.returncode == 0 and got == "answer=42\n"
        again = _cli(tmp_path, "publish", "latest", "answer=43")
        assert again.returncode == 1 and "already published" in again.stderr
        # log record, user event, job control
        assert _cli(tmp_path, "log", "latest", "tool note", "--field", "k=1").returncode == 0
        sent = json.loads(_cli(tmp_path, "event", "latest", "USER+5", "--info", "a=1", "--json").stdout)
        assert sent["event"] >= 1
        wrong = _cli(tmp_path, "event", "latest", "USER+5", "--range", "custom", "--ranks", "7")
        assert wrong.returncode == 2 and "rank 7 is not in job" in wrong.stderr, wrong.stderr
        assert _cli(tmp_path, "ctl", "latest", "pause", "--ranks", "2").returncode == 0
        rows = json.loads(_cli(tmp_path, "ps", "latest", "--json").stdout)["ranks"]
        assert [r["state"] for r in rows] == ["running", "running", "paused"]
        assert _cli(tmp_path, "ctl", "latest", "resume", "--ranks", "2").returncode == 0
        bad = _cli(tmp_path, "ctl", "latest", "signal", "--ranks", "7", "--signal", "USR2")
        assert bad.returncode == 1 and "no such rank" in bad.stderr
        # attach: tagged output, XML, stdin pushed to rank 0 and 2
        att = _cli(tmp_path, "attach", "latest", "--stdin", "0,2", "--for", "2.5", "--timestamp",
                   stdin="first line\n")
        assert att.returncode == 0, att.stderr
        lines = att.stdout.splitlines()
        assert any(ln.endswith("[0,stdout] STDIN 0 first line") for ln in lines), lines[-10:]
        assert any(ln.endswith("[2,stdout] STDIN 2 first line") for ln in lines), lines[-10:]
        assert not any("STDIN 1" in ln for ln in lines), lines[-10:]
        xml = _cli(tmp_path, "attach", "latest", "--xml", "--ranks", "1", "--for", "1").stdout.splitlines()
        assert xml[0].startswith("<job ") and xml[-1] == "</job>"
        assert all(ln.startswith('<stdout rank="1">') for ln in xml[1:-1]) and len(xml) > 2
        # an attached tool sees relayed events and leaves when the job ends
        watcher = subprocess.Popen([sys.executable, "-m", "planaria.cli.main", "attach", "latest", "--events",
                                    "--no-history", "--channels", "stderr"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
        time.sleep(1.5)
        assert _cli(tmp_path, "event", "latest", "USER+6").returncode == 0
        # kill a rank: announced once as killed by command
        assert _cli(tmp_path, "ctl", "latest", "kill", "--ranks", "2").returncode == 0
        time.sleep(1.0)
        assert _cli(tmp_path, "publish", "latest", "stop=1").returncode == 0
        out, err = job.communicate(timeout=40)
        seen, _ = watcher.communicate(timeout=20)
        assert watcher.returncode == 0
        assert "PMIX_ERR_PROC_KILLED_BY_CMD from rm affected=[2]" in seen, seen
        assert "USER+6 from tool {}" in seen, seen             # origin as events.jsonl has it
        assert seen.strip().splitlines()[-1].startswith("[event") and "PMIX_EVENT_JOB_END" in seen
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)
            job.communicate()
        w = locals().get("watcher")
        if w is not None and w.poll() is None:
            w.kill()
            w.communicate()
    assert "[1] LOOKUP 1 42" in out, out[-2000:]
    assert re.search(r"\[2\] NOTPUB 2 (0\.[5-9]|[1-4]\.\d) never not published within 0\.5 s", out), out[-2000:]
    evs = _events(jd)
    refused = [e for e in evs if e["type"] == "refused"]
    assert {e["why"] for e in refused} == {"no token", "bad token"}
    assert any(e["type"] == "log" and e.get("message") == "tool note" for e in evs)
    assert any(e["type"] == "log" and e.get("message") == "tools job started" and e["rank"] == 0 for e in evs)
    user = [e for e in evs if e["type"] == "event" and e["code"] == U(5)]
    assert user and user[0]["targets"] == [0, 1, 2] and user[0]["origin"] == "tool"
    killed = [e for e in evs if e["type"] == "event" and e["affected"] == [2]
              and e["name"] != "PLANARIA_EVENT_FAULT_LOCALIZED"]
    assert len(killed) == 1 and killed[0]["name"] == "PMIX_ERR_PROC_KILLED_BY_CMD"
    assert [e["action"] for e in evs if e["type"] == "ctl"] == ["pause", "resume", "signal", "kill"]


@pytest.mark.timeout(90)
def test_bench_events_tiny(tmp_path):
    env = root_env()
    res = subprocess.run([sys.executable, "-m", "benchmarks", "events", "--ranks", "3",
                          "--count", "30", "--burst", "200", "--local", "50", "--json"],
                         capture_output=True, text=True, timeout=80, env=env, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    r = out["result"]
    assert r["ranks"] == 3 and r["missing_events"] == 0 and r["burst_complete"]
    assert r["local"]["n"] == 50 and r["controller"]["n"] == 90 and r["controller_all_ranks"]["n"] == 30
    assert 0 < r["local"]["p50_ms"] <= r["local"]["p99_ms"]
    assert 0 < r["controller"]["p50_ms"] <= r["controller"]["p99_ms"] <= r["controller"]["max_ms"]
    assert r["events_per_s"] > 0 and out["goal"]["limit_ms"] == 1.0


@pytest.mark.timeout(90)
def test_a_ctl_kill_without_ulfm_is_named_as_the_cause_of_the_abort(tmp_path):
    """sim on plain mpiexec: the killed rank takes the others down before the abort's collection can
    reach them. The launcher says so and prints the post-mortem: the ctl kill first, never 'node down'."""
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "4", "--backend", "sim", "--timeout", "60",
           "--", sys.executable, str(SCRIPTS / "steady_loop.py"), "100000"]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path))
    try:
        deadline = time.time() + 30
        while time.time() < deadline and _cli(tmp_path, "ps", "latest", "--json").returncode != 0:
            time.sleep(0.5)
        time.sleep(2.0)
        assert _cli(tmp_path, "ctl", "latest", "kill", "--ranks", "3").returncode == 0
        _, err = job.communicate(timeout=40)
    finally:
        if job.poll() is None:
            job.kill()
    assert "root cause: rank 3 killed by command (planaria ctl)" in err, err[-3000:]
    assert "node down" not in err, err[-3000:]
