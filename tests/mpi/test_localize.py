"""Fault localization on real jobs: each scenario's diagnosis names the faulty ranks and the call site.

Each case is a 4-rank job under ``planaria run`` with run-time detection on; the job hangs (or
runs slowly, or fails) and ``planaria diagnose`` is asked, as a user would. Bounded: the job
has its own --timeout and the driver kills it after the diagnosis.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import localize

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", list(localize.CASES))
def test_diagnosis_names_the_fault(case, tmp_path):
    res = localize.run_case(case, home=tmp_path, timeout=60)
    assert res["ok"], f"{case}: {res['problems']}\n{res['text']}"
    assert res["diagnose_s"] < 30
    # every incident of the run-time localization is also announced on the event bus
    import json
    recs = [json.loads(x) for x in (Path(res["job"]) / "events.jsonl").read_text().splitlines() if x.strip()]
    incidents = [r for r in recs if r.get("type") == "incident"]
    announced = [r for r in recs if r.get("type") == "event" and r.get("name") == "PLANARIA_EVENT_FAULT_LOCALIZED"]
    said = [(sorted(r["incident"]["ranks"]), r["incident"]["verdict"]) for r in incidents]
    assert [(ev["affected"], ev["info"]["verdict"]) for ev in announced] == said[:len(announced)], (announced, said)
    if case == "unmatched":              # the job stays hung long after its incident: all announced
        assert incidents and len(announced) == len(incidents), (len(announced), len(incidents))
    if case == "spin":                   # the spinning rank's service answered the probes (woken by knocks)
        faulty = localize.CASES[case].ranks
        answered = [e["evidence"].get("ping") for r in incidents for e in r["incident"].get("evidence") or ()
                    if e.get("dst") in faulty and "ping" in e["evidence"]]     # status replies carry no ping
        assert answered and all(a is True for a in answered), answered


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", ["unmatched", "spin"])
def test_diagnosis_on_simulated_failures_backend(case, tmp_path):
    res = localize.run_case(case, home=tmp_path, backend="sim", timeout=60)
    assert res["ok"], f"{case}: {res['problems']}\n{res['text']}"


def test_check_rejects_a_report_that_misses_the_fault():
    case = localize.CASES["spin"]
    line = localize.site_line("spin")
    good = {"text": f"rank 2 computing at faulty.py:{line} in main", "root_causes": [{"rank_list": [2]}]}
    assert localize.check(case, good) == []
    assert localize.check(case, {"text": good["text"], "root_causes": [{"ranks": "1"}]})
    assert localize.check(case, {"text": "rank 2 computing", "root_causes": [{"ranks": "2"}]})


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_message_log_ids_counts_and_members(backend):
    from tests.mpi.mpijob import SCRIPTS, mpiexec
    res = mpiexec(4, [str(SCRIPTS / "msglog_check.py")], ft=(backend == "ulfm"),
                  env={"PLANARIA_DETECT": "1", "PLANARIA_BACKEND": backend}, timeout=60)
    assert res.ok_ranks("msglog") == [0, 1, 2, 3], res.out + res.err[-3000:]


def _launch(tmp_path, *run_args):
    import os
    import subprocess
    import sys
    env = localize.run_env(tmp_path, {})
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "4", "--detect-timeouts", localize.DETECT,
           *run_args, "--", sys.executable, "-m", "benchmarks.faulty", "spin"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True), env, os


@pytest.mark.timeout(120)
def test_sigusr1_to_the_launcher_writes_a_diagnosis(tmp_path):
    import json
    import signal
    import time
    proc, env, os = _launch(tmp_path, "--timeout", "60")
    try:
        job = localize.job_dir(tmp_path)
        localize.wait_ready(job, 4, proc, 40.0)
        time.sleep(1.0)
        proc.send_signal(signal.SIGUSR1)
        deadline = time.time() + 30
        while time.time() < deadline and not (job / "diag-1.json").exists():
            time.sleep(0.1)
        report = json.loads((job / "diag-1.json").read_text())
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert report["root_causes"][0]["rank_list"] == [2], report["text"]
    assert f"faulty.py:{localize.site_line('spin')}" in report["text"]
    assert "SIGUSR1: collecting every rank's state" in err


@pytest.mark.timeout(120)
def test_timeout_kill_is_preceded_by_a_diagnosis(tmp_path):
    proc, env, os = _launch(tmp_path, "--timeout", "8")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 124, err[-2000:]
    job = localize.job_dir(tmp_path)
    assert (job / "diag-1.state").exists() and (job / "diag-1.txt").exists()
    assert "timeout: collecting every rank's state" in err
    assert "rank 2" in (job / "diag-1.txt").read_text()


def test_diagnose_cli_bad_job_is_one_line(tmp_path):
    import subprocess
    import sys
    env = localize.run_env(tmp_path, {})
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "diagnose", "nosuchjob"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "nosuchjob" in res.stderr


@pytest.fixture
def two_hosts(tmp_path):
    from tests.mpi.mpijob import two_test_hosts
    yield from two_test_hosts(tmp_path, "pll-", "10.213.13.0/24")


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_repeated_io_errors_name_the_host(two_hosts, tmp_path):
    """Ranks 2 and 3 run on the second host; their I/O errors are reported as that host's fault."""
    hs, state_root = two_hosts
    res = localize.run_case("ioerr", home=tmp_path / "home", timeout=90, netns=",".join(hs.names),
                            hosts_dir=str(state_root))
    assert res["ok"], f"{res['problems']}\n{res['text']}"
    import json
    ranks = json.loads((Path(res["job"]) / "summary.json").read_text())["ranks"]
    host_of = {r["rank"]: r["host"] for r in ranks}
    assert host_of[2] == host_of[3] != host_of[0], host_of
    assert f"host {host_of[2]}: repeated I/O errors" in res["text"], res["text"]


def test_bench_localize_rejects_bad_thresholds_before_launching():
    with pytest.raises(ValueError, match="foo"):
        localize.run(["spin"], detect="foo=1")
