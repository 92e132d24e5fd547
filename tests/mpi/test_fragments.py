"""Fragmented programs on real ranks: DFs across ranks, a hang ends with a report, the balancer, a killed rank."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from planaria.launch.mpiexec import single_host_transport_args
from planaria.trace.analyze import analyze_dir
from planaria.trace.writer import read_traces
from tests.mpi.mpijob import SCRIPTS, mpiexec, root_env
from tests.streams import wait_for_line

pytestmark = pytest.mark.mpi
PROG = str(SCRIPTS / "fragments_prog.py")
ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}


def _status(out: str) -> dict[int, dict[str, str]]:
    rows = {}
    for m in re.finditer(r"STATUS (\d+) (\w+) (.*)", out):
        rows[int(m.group(1))] = {"status": m.group(2), **dict(kv.split("=") for kv in m.group(3).split())}
    return rows


@pytest.mark.timeout(60)
def test_dfs_fetched_across_ranks(tmp_path):
    res = mpiexec(3, [PROG, "spread", str(tmp_path)], ft=True, env=ENV, timeout=45)
    assert res.code == 0, res.err[-2000:]
    st = _status(res.out)
    assert sorted(st) == [0, 1, 2] and {r["status"] for r in st.values()} == {"finished"}
    assert all(int(r["local_done"]) > 0 for r in st.values())          # every rank ran CFs
    # the closing drain took exactly the runtime messages the other ranks counted as sent to each
    assert all(r["unmatched"] == "0" for r in st.values())
    # b[i] = a[i]^2 + a[i+1] with a[i] = i set on rank i % 3 and read on rank (i + 1) % 3
    assert re.search(r"RESULT 572 on 2 inputs from \[0, 1, 2\]", res.out)
    recs = read_traces(tmp_path)
    assert {r["rank"] for r in recs} == {0, 1, 2}
    rep = analyze_dir(tmp_path)
    assert rep["status"] == "finished" and rep["hung"] == 0 and rep["finished"] == 38


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rule", ["safra", "paper"])
def test_hang_on_ranks_ends_with_a_report(tmp_path, rule):
    # started as scripts/../scripts/fragments_prog.py: the report names the file normalized
    res = mpiexec(4, [str(SCRIPTS / ".." / "scripts" / "fragments_prog.py"), "hang", str(tmp_path)], ft=True,
                  env={**ENV, "PLANARIA_TERMINATION": rule}, timeout=45)
    assert res.code == 0, res.err[-2000:]
    st = _status(res.out)
    assert {r["status"] for r in st.values()} == {"hung"} and len(st) == 4
    assert all(float(r["elapsed"]) < 10 for r in st.values())
    assert "Following CFs appear to be the root cause of the system hang" in res.err
    rep = analyze_dir(tmp_path)
    (rc,) = rep["root_causes"]
    assert rc["expr"] == "square_plus(y[i], x[i], 1)" and rc["instances"] == 2
    assert rc["file"] == os.path.normpath(PROG) and "/../" not in json.dumps(rep, default=str)
    assert [r["decl"] for r in rc["awaited"][0]["ranges"]] == ["x[8..9]"]
    assert rc["awaited"][0]["maybe_set_at"][0]["expr"] == "put(x[i], i)"
    assert {r["termination"] for r in read_traces(tmp_path) if r["k"] == "run"} == {rule}


@pytest.mark.timeout(60)
def test_balancer_spreads_cfs_created_on_one_rank(tmp_path):
    # through the CLI: the program passes no balancer, `planaria fragments run --balancer` turns it on
    env = root_env()
    env.update(ENV, PLANARIA_HOME=str(tmp_path))
    cmd = [sys.executable, "-m", "planaria.cli.main", "fragments", "run", "-n", "3", "--balancer",
           "--jobs-difference-ratio", "0.25", "--threads", "1", "--timeout", "45", "--",
           sys.executable, PROG, "nobalance", "-"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=55)
    assert res.returncode == 0, res.stderr[-2000:]
    st = _status(res.stdout)
    assert {r["status"] for r in st.values()} == {"finished"} and sorted(st) == [0, 1, 2, 3]
    done = [int(st[r]["local_done"]) for r in range(3)]
    assert int(st[3]["local_done"]) == 0                # rank 3 is the balancer
    assert sum(done) == 25 and sum(1 for d in done if d > 0) == 3
    assert all(r["unmatched"] == "0" for r in st.values())   # balancer messages and moved CFs included
    # serial work is 6 x 0.2 + 18 x 0.05 = 2.1 s, all created on worker 0
    assert float(st[0]["elapsed"]) < 0.75 * 2.1
    (job,) = list((tmp_path / "jobs").iterdir())
    recs = read_traces(job / "trace")
    assert any(r["k"] == "links" and all(b > 0 for b in r["bandwidth"]) for r in recs)
    moves = [r for r in recs if r["k"] == "move"]
    assert moves and int(st[0]["moves"]) == len(moves)
    assert {r["threads"] for r in recs if r["k"] == "run"} == {1}


@pytest.mark.timeout(90)
def test_idle_ranks_sleep_until_rung_and_polling_still_works(tmp_path):
    # one CF of 1 s on rank 0: the other ranks wait. With the doorbell they sleep until a message
    # or the 20 ms fallback; polling MPI every 0.5 ms cost about 0.1-0.2 s of CPU per idle second
    res = mpiexec(4, [PROG, "idle", str(tmp_path / "bell")], ft=True, env=ENV, timeout=45)
    assert res.code == 0, res.err[-2000:]
    st = _status(res.out)
    assert {r["status"] for r in st.values()} == {"finished"} and len(st) == 4
    # CPU seconds and wall seconds of each rank's fr.run (a rank that started late waits less)
    cpu = {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
           for m in re.finditer(r"CPU (\d+) ([\d.]+) ([\d.]+)", res.out)}
    assert sorted(cpu) == [0, 1, 2, 3] and cpu[0][1] >= 1.0
    assert all(cpu[r][1] >= 0.5 and cpu[r][0] < 0.06 * cpu[r][1] for r in (1, 2, 3)), cpu
    assert {r["wakeups"] for r in read_traces(tmp_path / "bell") if r["k"] == "run"} == {"doorbell"}
    # PLANARIA_FRAGMENT_WAKEUPS=poll: the loop polls MPI as it would without a doorbell, and
    # CFs still find their inputs across ranks
    res = mpiexec(3, [PROG, "spread", str(tmp_path / "poll")], ft=True,
                  env={**ENV, "PLANARIA_FRAGMENT_WAKEUPS": "poll"}, timeout=45)
    assert res.code == 0, res.err[-2000:]
    assert {r["status"] for r in _status(res.out).values()} == {"finished"}
    assert re.search(r"RESULT 572 on 2 inputs from \[0, 1, 2\]", res.out)
    assert {r["wakeups"] for r in read_traces(tmp_path / "poll") if r["k"] == "run"} == {"poll"}


@pytest.mark.timeout(60)
def test_two_runs_at_once_on_disjoint_communicators_each_have_their_doorbells(tmp_path):
    # ranks {0, 2} and {1, 3} run at once on communicators of the same size: their doorbells are
    # named by world rank, so neither run finds its names taken and falls back to polling
    res = mpiexec(4, [PROG, "halves", str(tmp_path)], ft=True, env=ENV, timeout=45)
    assert res.code == 0, res.err[-2000:]
    st = _status(res.out)
    assert sorted(st) == [0, 1, 2, 3] and {r["status"] for r in st.values()} == {"finished"}
    assert all(r["unmatched"] == "0" for r in st.values())
    # each half's report runs on its worker 1 and read inputs set on its own two world ranks
    assert sorted(re.findall(r"RESULT 70 on (\d) inputs from \[(\d), (\d)\]", res.out)) == [
        ("2", "0", "2"), ("3", "1", "3")], res.out
    for half in ("0", "1"):
        runs = [r for r in read_traces(tmp_path / half) if r["k"] == "run"]
        assert len(runs) == 2 and {r["wakeups"] for r in runs} == {"doorbell"}, runs


@pytest.mark.timeout(60)
def test_a_run_shorter_than_the_link_probe_ends_cleanly(tmp_path):
    # the balancer measures its links while the run goes on; a program that is over at once must
    # still match every ping before the closing collective, and five workers must all answer
    res = mpiexec(6, [PROG, "tiny", str(tmp_path)], ft=True, env=ENV, timeout=45)
    assert res.code == 0, res.err[-2000:]
    st = _status(res.out)
    assert sorted(st) == list(range(6)) and {r["status"] for r in st.values()} == {"finished"}
    assert {int(r["done"]) for r in st.values()} == {1}                 # the root CF, nothing else
    assert all(r["unmatched"] == "0" for r in st.values())
    (links,) = [r for r in read_traces(tmp_path) if r["k"] == "links"]
    assert len(links["bandwidth"]) == 5 and all(b > 0 and b != float("inf") for b in links["bandwidth"])


@pytest.mark.timeout(60)
def test_killed_rank_keeps_its_flushed_trace(tmp_path):
    env = root_env()
    env.update(ENV, PLANARIA_HOME=str(tmp_path))
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "3", "--timeout", "40", "--",
           sys.executable, PROG, "kill", "-"]
    subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=55)
    (job,) = list((tmp_path / "jobs").iterdir())
    files = sorted(p.name for p in (job / "trace").iterdir())
    assert files == ["trace-r0.jsonl", "trace-r1.jsonl", "trace-r2.jsonl"]
    killed = [r for r in read_traces(job / "trace") if r.get("rank") == 1]
    assert any(r["k"] == "start" for r in killed) and not any(r["k"] == "exit" for r in killed)
    out = subprocess.run([sys.executable, "-m", "planaria.cli.main", "trace", "analyze", str(job), "--json"],
                         env=env, capture_output=True, text=True, timeout=30)
    import json
    rep = json.loads(out.stdout)
    assert rep["ranks_without_exit"] == [1]
    assert [h["expr"] for h in rep["root_causes"]] == ['die(fr.df("never"), z[0])']
    assert rep["root_causes"][0]["state"] == "running when its rank died"
    assert os.path.getsize(job / "trace" / "trace-r1.jsonl") > 0


@pytest.mark.timeout(60)
def test_cli_exit_status_tells_a_hung_program(tmp_path):
    """`planaria fragments run` exits 1 for a hung program (every rank exits normally after the hang report)."""
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    cmd = [sys.executable, "-m", "planaria.cli.main", "fragments", "run", "-n", "2", "--timeout", "40", "--",
           sys.executable, PROG, "hang", "-"]   # traces in the job directory
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=55)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "planaria fragments run: the program hung" in res.stderr


def _every_rank_running(trace_dir: Path, n: int, timeout: float) -> bool:
    """Whether every one of ``n`` ranks wrote its ``run`` record (flushed as the run starts) within ``timeout`` s."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [trace_dir / f"trace-r{r}.jsonl" for r in range(n)]
        if all(f.exists() and '"k":"run"' in f.read_text() for f in files):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.timeout(90)
def test_sigterm_to_mpiexec_leaves_every_ranks_unfinished_cfs(tmp_path):
    """SIGTERM to mpiexec while a CF spins (how a batch system or Ctrl-C ends a job): mpiexec passes it on, each rank
    writes what it had buffered, its unfinished CFs and an exit record; the analyzer names the spinning CF."""
    import signal
    env = root_env()
    env.update(ENV)
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    cmd = [mpiexec, "--oversubscribe", "--with-ft", "ulfm", *single_host_transport_args(env, (), mpiexec), "-n", "3",
           sys.executable, PROG, "spin", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        line = wait_for_line(proc.stdout, "SPINNING", 45)
        assert "SPINNING on 1" in line, "the job never reached its spinning CF"
        # rank 1 spins once rank 0 sent it the CF; a rank still starting would die by the signal's
        # default action, before its run could catch it: wait until every rank's run record is on disk
        assert _every_rank_running(tmp_path, 3, 30), "not every rank started its run"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode != 0
    recs = read_traces(tmp_path)
    exits = {r["rank"]: r for r in recs if r["k"] == "exit"}
    assert sorted(exits) == [0, 1, 2], err[-2000:]
    assert {(e["status"], e["signal"]) for e in exits.values()} == {("killed", "SIGTERM")}
    running = [r for r in recs if r["k"] == "unfinished" and r["state"] == "running"]
    assert [r["rank"] for r in running] == [1]
    rep = analyze_dir(tmp_path)
    assert rep["status"] == "killed" and rep["ranks_without_exit"] == []
    assert [(h["expr"], h["state"]) for h in rep["root_causes"]] == [("spin(s[0], z[0])", "running")]
    assert rep["hung"] == 7          # spin and the 6 CFs that wait for s[0]
    assert rep["root_causes"][0]["running_s"] > 0
    assert all(h["running_s"] is None for h in analyze_dir(tmp_path, all_hung=True)["all_hung"]
               if h["state"] != "running")


@pytest.mark.timeout(90)
def test_cli_timeout_leaves_an_analyzable_trace(tmp_path):
    """`planaria fragments run --timeout` ends a spinning program with SIGTERM: exit 124, and the trace names the CF."""
    env = root_env()
    env.update(ENV, PLANARIA_HOME=str(tmp_path))
    cmd = [sys.executable, "-m", "planaria.cli.main", "fragments", "run", "-n", "2", "--timeout", "6", "--",
           sys.executable, PROG, "spin", "-"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=75)
    assert res.returncode == 124, res.stderr[-2000:]
    assert "the ranks were ended by a signal" in res.stderr
    (job,) = list((tmp_path / "jobs").iterdir())
    rep = analyze_dir(job / "trace")
    assert rep["status"] == "killed" and rep["ranks_without_exit"] == []
    assert [(h["expr"], h["state"]) for h in rep["root_causes"]] == [("spin(s[0], z[0])", "running")]


@pytest.mark.timeout(90)
def test_a_df_assigned_twice_stops_the_run_with_one_line(tmp_path):
    """LuNA aborts on a second assignment: the run stops at every rank, each rank ends with one line
    naming the DF and both assignments, the job fails, and trace analyze exits 1."""
    env = {**os.environ, **root_env(), **ENV, "PLANARIA_HOME": str(tmp_path)}
    env.pop("PLANARIA_CONTROL_URI", None)
    cmd = [sys.executable, "-m", "planaria.cli.main", "fragments", "run", "-n", "3", "--timeout", "60", "--",
           sys.executable, PROG, "twice", "-"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=80)
    assert res.returncode != 0, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ": ProgramError: " in ln and ln.startswith("[")]
    assert len(lines) == 3, res.stderr
    src = PROG
    for ln in lines:
        assert re.search(rf"DF x\[0\] assigned twice: by put\(x\[0\], [12]\) at {re.escape(src)}:\d+, "
                         rf"then by put\(x\[0\], [12]\) at {re.escape(src)}:\d+", ln), ln
    assert "Traceback" not in res.stderr
    (job,) = list((tmp_path / "jobs").iterdir())
    out = subprocess.run([sys.executable, "-m", "planaria.cli.main", "trace", "analyze", str(job), "--json"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    import json
    (m,) = json.loads(out.stdout)["multiple_init"]
    assert m["name"] == "x[0]"


@pytest.mark.timeout(90)
def test_a_long_running_cf_is_named_by_the_mpi_level_diagnosis(tmp_path):
    """A CF that spins keeps its rank's loop busy: the ranks look fine to MPI, but the launcher's
    diagnosis (at --timeout) names the CF, its rank and its source line."""
    env = {**os.environ, **root_env(), **ENV, "PLANARIA_HOME": str(tmp_path)}
    env.pop("PLANARIA_CONTROL_URI", None)
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "3", "--timeout", "10", "--",
           sys.executable, PROG, "spin", "-"]
    subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=80)
    (job,) = list((tmp_path / "jobs").iterdir())
    import json
    rep = json.loads((job / "diag-1.json").read_text())
    assert rep["verdict"] == "long-cf", rep["text"]
    (cf,) = [c for c in rep["root_causes"] if c["kind"] == "long-cf"]
    spin_line = next(i for i, ln in enumerate(Path(PROG).read_text().splitlines(), 1)
                     if ln.strip().startswith("spin(s[0], z[0])"))
    assert cf["rank_list"] == [1] and cf["site"] == f"{PROG}:{spin_line}"
    assert cf["reason"].startswith("CF spin(s[0], z[0]) has been running for ")
    assert rep["text"].startswith("computation fragments running for more than 5 s:")
