"""Real jobs through ``planaria run`` (each mpiexec start costs ~1-2 s)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import msgpack
import pytest
import zmq

pytestmark = pytest.mark.mpi

SCRIPTS = Path(__file__).parent / "scripts"


def planaria(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "planaria.cli.main", "run", *args]


def env_for(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PLANARIA_HOME"] = str(home)
    env.pop("PLANARIA_CONTROL_URI", None)
    return env


def run(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(planaria(home, *args), env=env_for(home), capture_output=True,
                          text=True, timeout=timeout)


def only_job(home: Path) -> Path:
    jobs = list((home / "jobs").iterdir())
    assert len(jobs) == 1, jobs
    return jobs[0]


def alive(marker: str) -> list[str]:
    res = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True, timeout=10)
    return [ln for ln in res.stdout.splitlines() if "pgrep" not in ln]


def wait_file(path_glob: str, home: Path, timeout: float = 20) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        hits = list((home / "jobs").glob(path_glob)) if (home / "jobs").exists() else []
        if hits:
            return hits[0]
        time.sleep(0.1)
    raise AssertionError(f"{path_glob} did not appear")


@pytest.mark.timeout(60)
def test_hello_job_tags_output(tmp_path):
    res = run(tmp_path, "-n", "2", "--", "python", str(SCRIPTS / "hello.py"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "[0] hello from 0 of 2" in lines
    assert "[1] hello from 1 of 2" in lines
    assert "[1!] note from 1" in res.stderr.splitlines()
    job = only_job(tmp_path)
    log = (job / "output.log").read_text()
    assert "[0] hello from 0 of 2" in log and "[0!] note from 0" in log
    manifest = json.loads((job / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["exit_status"] == 0
    assert "--with-ft" in manifest["argv"]
    assert json.loads((job / "summary.json").read_text())["status"] == 0


TICK_PROBE = ("import os, planaria as pl; w = pl.world(); "
              "print('TICK', w.rank, os.environ.get('OMPI_MCA_mpi_event_tick_rate'))")


@pytest.mark.timeout(90)
def test_ulfm_ranks_look_at_open_mpis_events_every_ms(tmp_path):
    """ULFM learns of failed processes from Open MPI's event base, which it looks at every 10 ms
    unless told otherwise (``planaria.comm.mca``): 1 ms under planaria run and a bare mpiexec, and
    whatever the user set stays."""
    from tests.mpi.mpijob import mpiexec
    res = run(tmp_path, "-n", "2", "--", "python", "-c", TICK_PROBE)
    assert res.returncode == 0, res.stderr
    assert sorted(ln.split("] ", 1)[1] for ln in res.stdout.splitlines() if "TICK" in ln) == ["TICK 0 1000", "TICK 1 1000"]
    bare = mpiexec(2, ["-c", TICK_PROBE], ft=True, timeout=60)
    assert bare.code == 0, bare.err
    assert sorted(bare.lines("TICK")) == ["TICK 0 1000", "TICK 1 1000"]
    mine = run(tmp_path, "-n", "2", "--mpiexec-arg=--mca", "--mpiexec-arg=mpi_event_tick_rate", "--mpiexec-arg=300",
               "--", "python", "-c", TICK_PROBE)
    assert mine.returncode == 0, mine.stderr
    assert sorted(ln.split("] ", 1)[1] for ln in mine.stdout.splitlines() if "TICK" in ln) == ["TICK 0 300", "TICK 1 300"]


@pytest.mark.timeout(60)
def test_agent_ranks_in_table(tmp_path):
    res = run(tmp_path, "-n", "2", "--json", "--", "python", str(SCRIPTS / "agent_hello.py"), "ok")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    for r in summary["ranks"]:
        assert r["state"] == "finished" and r["exit_code"] == 0
        assert r["step"] == 2  # heartbeats carried the app's step
        assert r["pid"] and r["host"] and r["role"] == "worker"
    events = [json.loads(x) for x in (only_job(tmp_path) / "events.jsonl").read_text().splitlines()]
    kinds = [(e["type"], e.get("rank")) for e in events]
    for rank in (0, 1):
        assert ("hello", rank) in kinds and ("bye", rank) in kinds
    assert all("tok" not in e for e in events)


@pytest.mark.timeout(90)
def test_a_launcher_started_with_a_low_open_file_limit_serves_every_rank(tmp_path):
    """Soft limit 22 (hard unchanged): 8 agents once took the controller's last descriptors and
    its thread died; the launcher now raises its soft limit to the hard one."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    res = subprocess.run(planaria(tmp_path, "-n", "8", "--json", "--", "python", str(SCRIPTS / "agent_hello.py"), "ok"),
                         env=env_for(tmp_path), capture_output=True, text=True, timeout=80,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (22, hard)))
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert [(r["rank"], r["state"]) for r in summary["ranks"]] == [(r, "finished") for r in range(8)]
    events = [json.loads(x) for x in (only_job(tmp_path) / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["type"] == "controller-error"]


@pytest.mark.timeout(60)
def test_killed_rank_is_named_lost(tmp_path):
    res = run(tmp_path, "-n", "3", "--json", "--", "python", str(SCRIPTS / "agent_hello.py"), "kill", "1")
    summary = json.loads(res.stdout)
    by_rank = {r["rank"]: r for r in summary["ranks"]}
    assert by_rank[1]["state"] == "lost"
    assert by_rank[1]["how"] == "killed by signal 9 (SIGKILL) (no report)"
    assert by_rank[1]["t"] is not None and by_rank[1]["t"] > 0
    assert by_rank[0]["state"] == by_rank[2]["state"] == "finished"
    assert res.returncode == 0  # survivors finished
    assert "lost" in res.stderr and "SIGKILL" in res.stderr  # the rich summary


def run_plain(home: Path, mode: str, *opts: str, marker: str = "-", timeout: float = 30
              ) -> tuple[subprocess.CompletedProcess[str], float, dict[int, dict]]:
    """``planaria run -n 2 --json`` of scripts/plain_fate.py (no planaria runtime in the ranks):
    the result, its wall time, and the summary's rows by rank."""
    t = time.time()
    res = run(home, "-n", "2", "--json", "--timeout", repr(timeout), *opts, "--", "python",
              str(SCRIPTS / "plain_fate.py"), mode, marker, timeout=timeout + 20)
    rows = {r["rank"]: r for r in json.loads(res.stdout)["ranks"]} if res.stdout.strip() else {}
    return res, time.time() - t, rows


@pytest.mark.timeout(60)
def test_plain_program_killed_rank_sets_the_status(tmp_path):
    # with ULFM mpiexec itself exits 0 here; --default-handler none: the job ends by itself
    # (rank 0 exits 0.5 s later), not by the launcher
    res, _, by_rank = run_plain(tmp_path, "kill", "--default-handler", "none")
    assert res.returncode == 128 + signal.SIGKILL, res.stderr
    assert by_rank[1]["state"] == "lost" and by_rank[1]["how"] == "killed by signal 9 (SIGKILL)"
    assert by_rank[0]["state"] == "finished" and by_rank[0]["exit_code"] == 0
    assert by_rank[1]["host"] and by_rank[1]["pid"]


@pytest.mark.timeout(60)
def test_plain_program_failure_ends_the_job_by_default(tmp_path):
    # rank 0 waits for ever (here 60 s) after rank 1 died: with ULFM nothing would end the job
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    res, took, by_rank = run_plain(tmp_path, "hang", marker=marker)
    assert took < 20
    assert res.returncode == 128 + signal.SIGKILL, res.stderr
    assert "rank 1 killed by signal 9 (SIGKILL) and no rank uses planaria's runtime" in res.stderr
    assert json.loads(res.stdout)["outcome"] == "aborted"
    assert by_rank[1]["how"] == "killed by signal 9 (SIGKILL)"
    assert by_rank[0]["state"] == "lost" and by_rank[0]["how"] == "ended by the job abort (default handler)"
    time.sleep(0.5)
    assert alive(marker) == []
    # --default-handler none: as plain ULFM, the job runs on (here until its --timeout)
    res, _, by_rank = run_plain(tmp_path / "none", "hang", "--default-handler", "none", marker=marker, timeout=6)
    assert res.returncode == 124, res.stderr
    assert by_rank[0]["how"] == "ended by the launcher at the timeout (6 s)" and by_rank[0]["t"] >= 6
    assert by_rank[1]["how"] == "killed by signal 9 (SIGKILL)"
    time.sleep(0.5)
    assert alive(marker) == []


@pytest.mark.timeout(60)
def test_plain_program_abort_leaves_nothing_running(tmp_path):
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    res, took, by_rank = run_plain(tmp_path, "abort", marker=marker)
    assert took < 20                    # rank 1 sleeps 60 s, and --timeout would end it at 30 s
    assert res.returncode == 5, res.stderr
    assert by_rank[0]["exit_code"] == 5
    assert by_rank[1]["state"] == "lost"
    how = by_rank[1]["how"]
    if "still running" in how:          # mpiexec left it behind; the launcher ended it
        assert "rank(s) 1 still ran after mpiexec exited: killed" in res.stderr
    else:                               # the MPI runtime, or the launcher's default handler, ended it
        assert how.startswith("killed by signal") or how == "ended by the job abort (default handler)", how
    time.sleep(0.5)
    assert alive(marker) == []


@pytest.mark.timeout(60)
def test_no_rank_fates_runs_the_command_directly(tmp_path):
    res = run(tmp_path, "-n", "1", "--no-rank-fates", "--", "python", str(SCRIPTS / "hello.py"))
    assert res.returncode == 0, res.stderr
    job = only_job(tmp_path)
    argv = json.loads((job / "manifest.json").read_text())["argv"]
    assert not any("rankfate" in a for a in argv)
    assert not (job / "fates").exists()


@pytest.mark.timeout(60)
def test_reported_failure_and_survivor_code(tmp_path):
    res = run(tmp_path / "a", "-n", "2", "--json", "--", "python", str(SCRIPTS / "agent_hello.py"), "fail", "1")
    by_rank = {r["rank"]: r for r in json.loads(res.stdout)["ranks"]}
    assert by_rank[1]["state"] == "failed" and by_rank[1]["how"] == "test failure on purpose"
    assert res.returncode == 0
    res = run(tmp_path / "b", "-n", "2", "--", "python", str(SCRIPTS / "agent_hello.py"), "code", "1")
    assert res.returncode == 3, res.stderr


@pytest.mark.timeout(60)
def test_timeout_kills_everything(tmp_path):
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    t = time.time()
    res = run(tmp_path, "-n", "2", "--timeout", "3", "--", "python", str(SCRIPTS / "sleeper.py"), "100", marker,
              timeout=40)
    assert res.returncode == 124, res.stderr
    assert time.time() - t < 12
    assert "timeout" in res.stderr
    time.sleep(0.5)
    assert alive(marker) == []
    assert json.loads((only_job(tmp_path) / "manifest.json").read_text())["status"] == "timeout"


@pytest.mark.timeout(60)
def test_a_launcher_that_starts_no_rank_is_ended_at_the_start_timeout(tmp_path):
    """Open MPI starts a host's daemon through its launch agent (ssh, srun); one that never
    answers leaves mpiexec waiting for ever, deaf to SIGTERM. With --start-timeout the job ends
    once that long has passed without any rank started, exit 2, not at --timeout, and the agent,
    started outside mpiexec's process group, is ended too."""
    marker = f"planaria-agent-{uuid.uuid4().hex[:8]}"
    agent = tmp_path / "agent.sh"
    agent.write_text(f"#!/bin/bash\nexec -a {marker} sleep 300\n")
    agent.chmod(0o755)
    t = time.time()
    res = run(tmp_path, "-n", "1", "--hosts", "pl-no-such-host:1", "--start-timeout", "2", "--timeout", "50",
              "--mpiexec-arg=--prtemca", "--mpiexec-arg=plm_ssh_agent", f"--mpiexec-arg={agent}",
              "--", "python", str(SCRIPTS / "hello.py"), timeout=45)
    took = time.time() - t
    assert res.returncode == 2, res.stderr
    assert "no rank had started 2 s after the launch" in res.stderr, res.stderr
    assert took < 20, took          # the bound (2 s) and mpiexec's grace for SIGTERM (3 s), not --timeout
    time.sleep(0.5)
    assert alive(marker) == []
    job = only_job(tmp_path)
    assert json.loads((job / "manifest.json").read_text())["status"] == "not-started"
    diag = subprocess.run([sys.executable, "-m", "planaria.cli.main", "diagnose", str(job)], env=env_for(tmp_path),
                          capture_output=True, text=True, timeout=30)
    assert diag.stdout.splitlines()[1].startswith("no rank started: the MPI launcher started none"), diag.stdout


@pytest.mark.timeout(60)
def test_killed_job_leaves_no_shared_memory_files(tmp_path):
    """mpiexec and its ranks SIGKILLed (a node's runtime lost, an mpiexec deaf to SIGTERM) unlink none
    of Open MPI's /dev/shm files; the launcher deletes them once the job has ended."""
    from planaria.launch import shmfiles
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(planaria(tmp_path, "-n", "2", "--timeout", "30", "--", "python",
                                     str(SCRIPTS / "sleeper.py"), "100", marker),
                            env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def job() -> list[int]:        # mpiexec (prterun) and the ranks, not the launcher (same marker)
            return [int(ln.split()[0]) for ln in alive(marker) if "planaria.cli.main" not in ln]
        def mapped() -> set[Path]:     # this job's segments (other tests' jobs may run meanwhile)
            return {Path(ln.split()[-1]) for pid in job() for ln in _maps(pid)
                    if ln.split()[-1].startswith(f"{shmfiles.SHM_DIR}/sm_segment.")}
        deadline = time.time() + 25
        while len(job()) < 3 or len(mapped()) < 2:
            assert time.time() < deadline, "the ranks did not start"
            time.sleep(0.2)
        time.sleep(shmfiles.GRACE_S + 0.5)      # the files are older than the grace period when the job ends
        ours = mapped()
        for pid in job():
            os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=25)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert len(ours) == 2
    assert sorted(p for p in ours if p.exists()) == []


def _maps(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/maps").read_text(errors="replace").splitlines()
    except OSError:
        return []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signals_tear_down(tmp_path, sig, status):
    """Ctrl-C, and what a batch system (scancel, a time limit) or a closed terminal sends, end the job."""
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(planaria(tmp_path, "-n", "2", "--", "python", str(SCRIPTS / "sleeper.py"), "100", marker),
                            env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait until both ranks run
        deadline = time.time() + 30
        while time.time() < deadline and len([x for x in alive(marker) if "sleeper.py" in x]) < 4:
            time.sleep(0.2)
        job = only_job(tmp_path)
        deadline = time.time() + 30
        while time.time() < deadline and "rank 1 sleeping" not in (job / "output.log").read_text():
            time.sleep(0.2)
        t = time.time()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err
    assert time.time() - t < 8
    time.sleep(0.5)
    assert alive(marker) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["runtime", "plain"])
def test_every_rank_has_the_grace_to_act_on_sigterm(tmp_path, mode):
    """When the launcher ends a job, every rank gets SIGTERM and time to act on it, even after a
    quicker rank has ended: mpiexec alone SIGKILLs the rest as soon as the first has exited. Rank 1
    needs 1.5 s to save its state, rank 0 none; both save it and die by the SIGTERM. The processes
    the ranks started end with them."""
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(planaria(tmp_path, "-n", "2", "--", "python", str(SCRIPTS / "slow_term.py"),
                                     str(tmp_path), "1.5", mode, marker),
                            env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = wait_file("*/output.log", tmp_path, 30)
        deadline = time.time() + 30       # both ranks have their handler
        while time.time() < deadline and len(re.findall(r"rank \d waiting", log.read_text())) < 2:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)          # as a batch system's time limit ends the job
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert sorted(p.name for p in tmp_path.glob("saved-*")) == ["saved-0", "saved-1"], err
    fates = only_job(tmp_path) / "fates" / "1"
    assert [json.loads((fates / f"{r}.json").read_text()).get("signal") for r in (0, 1)] == [15, 15]
    time.sleep(0.5)
    assert alive(marker) == []


@pytest.mark.timeout(60)
def test_a_closed_output_pipe_does_not_leave_the_job_running(tmp_path):
    """``planaria run ... 2>&1 | head -1``: the launcher's console is gone, yet at the timeout it
    still ends mpiexec and the ranks and writes the summary."""
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(planaria(tmp_path, "-n", "2", "--timeout", "4", "--", "python",
                                     str(SCRIPTS / "sleeper.py"), "100", marker),
                            env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout.readline()          # the job has started printing
        proc.stdout.close()                    # as `| head -1` does
        proc.wait(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)
    assert alive(marker) == []
    summary = json.loads((only_job(tmp_path) / "summary.json").read_text())
    assert summary["outcome"] == "timeout"


def started_job(home: Path) -> tuple[Path, str, str]:
    """The job directory, control URI and secret of the one job under ``home`` once it listens."""
    uri_file = wait_file("*/control.uri", home)
    job = uri_file.parent
    return job, uri_file.read_text().strip(), (job / "secret").read_text().strip()


@pytest.mark.timeout(60)
def test_wrong_secret_is_refused(tmp_path):
    marker = f"planaria-marker-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(planaria(tmp_path, "-n", "1", "--timeout", "30", "--", "python",
                                     str(SCRIPTS / "sleeper.py"), "100", marker),
                            env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ctx = zmq.Context()
    try:
        job, uri, secret = started_job(tmp_path)
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(uri)
        sock.send(msgpack.packb({"type": "hello", "rank": 7, "pid": 1, "tok": "wrong", "id": "x1"}))
        assert not sock.poll(1000), "a message with a wrong token was answered"
        sock.send(msgpack.packb({"type": "ps", "tok": secret}))
        assert sock.poll(5000), "the right token got no answer"
        reply = msgpack.unpackb(sock.recv(), raw=False)
        assert reply["type"] == "ps" and 7 not in [r["rank"] for r in reply["ranks"]]
        events = [json.loads(x) for x in (job / "events.jsonl").read_text().splitlines()]
        refused = [e for e in events if e["type"] == "refused"]
        assert refused and refused[0]["why"] == "bad token" and refused[0]["msg_type"] == "hello"
        sock.close()
    finally:
        ctx.term()
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130
    assert alive(marker) == []


@pytest.mark.timeout(30)
def test_usage_errors_exit_2_before_launch(tmp_path):
    res = run(tmp_path, "-n", "2", "--inject", "bogus:zz", "--", "python", str(SCRIPTS / "hello.py"))
    assert res.returncode == 2
    assert res.stderr.startswith("planaria run: ") and "bogus" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = run(tmp_path, "-n", "2", "--", "no-such-command-xyz")
    assert res.returncode == 2 and "command not found" in res.stderr
    res = run(tmp_path, "-n", "2", "--backend", "mpich", "--", "python", str(SCRIPTS / "hello.py"))
    assert res.returncode == 2
    assert not (tmp_path / "jobs").exists()  # nothing was created or launched


@pytest.mark.timeout(30)
@pytest.mark.parametrize("args, message", [
    (["--timeout", "nan"], "--timeout must be a positive, finite number of seconds (got nan)"),
    (["--timeout", "inf"], "--timeout must be a positive, finite number of seconds (got inf)"),
    (["--start-timeout", "-1"], "--start-timeout must be a finite number of seconds >= 0 (got -1.0)"),
    (["--start-timeout", "nan"], "--start-timeout must be a finite number of seconds >= 0 (got nan)"),
    (["--hosts", ""], "--hosts is empty"),
    (["--netns", ""], "--netns is empty"),
    (["--hosts", "localhost:\u0663"], "bad --hosts entry 'localhost:\u0663'"),
    (["--control", "tcp://127.0.0.1:99999"], "bad --control 'tcp://127.0.0.1:99999': port 99999 is out of range"),
    (["--control", "tcp://127.0.0.1:0"], "bad --control 'tcp://127.0.0.1:0': port 0 is out of range"),
    (["--control", "127.0.0.1:5555"], "bad --control '127.0.0.1:5555': expected tcp://HOST:PORT"),
    (["--inject", "kill:rank=\u0663,iter=1"], "bad inject spec 'kill:rank=\u0663,iter=1': bad value '\u0663' for rank"),
    (["--inject", "kill:rank=1,time=1_0"], "bad inject spec 'kill:rank=1,time=1_0': bad value '1_0' for time"),
    (["--bogus", "3"], "no such option: --bogus"),
])
def test_bad_options_exit_2_with_one_line(tmp_path, args, message):
    res = run(tmp_path, "-n", "2", *args, "--", "python", str(SCRIPTS / "hello.py"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith(f"planaria run: {message}"), res.stderr
    assert not (tmp_path / "jobs").exists()  # nothing was created or launched


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_forged_clients_on_the_tcp_control_socket_are_refused_and_the_job_finishes(tmp_path):
    """Over TCP the control plane speaks CurveZMQ: a client without the job's key (a plain
    ZeroMQ client, a wrong key, garbage bytes, a frame announcing 2 GiB) is refused before any
    message and logged; the ranks (over TCP too) and a tool with the key go on, the job ends 0."""
    import socket
    import struct

    from planaria.events import curve

    port = _free_port()
    proc = subprocess.Popen(planaria(tmp_path, "-n", "2", "--backend", "sim", "--control", f"tcp://127.0.0.1:{port}",
                                     "--timeout", "90", "--", "python", str(SCRIPTS / "steady_loop.py"), "150"),
                            env=env_for(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ctx = zmq.Context()
    try:
        job, uri, secret = started_job(tmp_path)
        assert uri.startswith("tcp://")
        forged = []
        plain = ctx.socket(zmq.DEALER)                 # no CURVE at all, even with the right token
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(uri)
        plain.send(msgpack.packb({"type": "ps", "tok": secret}))
        wrong = ctx.socket(zmq.DEALER)                 # CURVE with another job's keys
        wrong.setsockopt(zmq.LINGER, 0)
        curve.client(wrong, "not the secret", uri)
        wrong.connect(uri)
        wrong.send(msgpack.packb({"type": "ps", "tok": secret}))
        forged += [plain, wrong]
        # a plain client whose greeting (mechanism NULL) the server reads before the client can hang
        # up on the server's CURVE greeting: the DEALER above may close first (the server then sees
        # only a broken pipe), this one stays and waits
        null = socket.create_connection(("127.0.0.1", port))
        null.sendall(b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + bytes(32))
        raw = socket.create_connection(("127.0.0.1", port))
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 4)
        huge = socket.create_connection(("127.0.0.1", port))
        greeting = b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"CURVE".ljust(20, b"\0") + bytes(32)
        huge.sendall(greeting + b"\x06" + struct.pack(">Q", 2 << 30) + b"x" * 64)
        assert not plain.poll(1500) and not wrong.poll(100), "a client without the key was answered"
        tool = subprocess.run([sys.executable, "-m", "planaria.cli.main", "ps", job.name, "--json"],
                              env=env_for(tmp_path), capture_output=True, text=True, timeout=30)
        assert tool.returncode == 0, tool.stderr
        assert sorted(r["rank"] for r in json.loads(tool.stdout)["ranks"]) == [0, 1]
        raw.close()
        huge.close()
        null.close()
        out, err = proc.communicate(timeout=90)
    finally:
        for sk in forged:
            sk.close(0)
        ctx.term()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.count("done") == 2
    events = [json.loads(x) for x in (job / "events.jsonl").read_text().splitlines()]
    why = {e["why"] for e in events if e["type"] == "refused"}
    assert "handshake failed: protocol error ZMTP_MECHANISM_MISMATCH" in why, why
    assert "handshake failed: protocol error ZMTP_CRYPTOGRAPHIC" in why, why
    assert any(w.startswith("closed before completing a handshake") for w in why), why
    assert secret not in (job / "events.jsonl").read_text()


@pytest.mark.timeout(30)
def test_controller_and_agent_in_process_over_tcp(tmp_path):
    from planaria.launch.controller import Controller
    from planaria.launch.jobdir import JobDir
    from planaria.runtime.agent import Agent

    jd = JobDir.create(tmp_path)
    ctl = Controller(jd, "tcp://127.0.0.1:*")
    uri = ctl.start()
    assert uri.startswith("tcp://127.0.0.1:") and jd.control_uri() == uri
    agent = Agent(uri, jd.secret(), rank=4, size=5, role="spare", backend="sim", heartbeat=0.1)
    try:
        agent.step = 9
        assert agent.report("inject", wait=True, timeout=5, kind="kill", detail="iter=9")
        deadline = time.time() + 5
        while time.time() < deadline and ctl.table().get(4, {}).get("step") != 9:
            time.sleep(0.05)
        info = ctl.table()[4]
        assert info["state"] == "running" and info["role"] == "spare" and info["pid"] == os.getpid()
        assert info["injected"]["kind"] == "kill"
        assert agent.report("bye", wait=True, timeout=5, code=0)
        assert ctl.table()[4]["state"] == "finished"
    finally:
        agent.close()
        ctl.stop()
    assert agent.report("event", x=1) is False  # closed: nothing further is sent


ORPHAN = """
import time
from planaria.runtime.agent import Agent
a = Agent({uri!r}, "tok", rank=0, size=1, orphan_timeout=1.0)
t = time.time()
print("acked" if a.report("fail", wait=True, timeout=0.3, reason="x") else "not acked", flush=True)
time.sleep(30)
print("still alive", flush=True)
"""


@pytest.mark.timeout(30)
def test_agent_orphan_guard_kills_rank(tmp_path):
    uri = f"ipc://{tmp_path}/nobody.sock"
    t = time.time()
    res = subprocess.run([sys.executable, "-c", ORPHAN.format(uri=uri)], capture_output=True,
                         text=True, timeout=20)
    assert res.returncode == -signal.SIGKILL, res
    assert res.stdout.splitlines() == ["not acked"]
    assert time.time() - t < 10


@pytest.mark.timeout(10)
def test_agent_from_env_outside_planaria(monkeypatch):
    from planaria.runtime.agent import Agent

    monkeypatch.delenv("PLANARIA_CONTROL_URI", raising=False)
    assert Agent.from_env(0, 1, "worker", "ulfm") is None


_READ_STDIN = ("import sys, json; from mpi4py import MPI; "
               "print('STDIN', MPI.COMM_WORLD.Get_rank(), json.dumps(sys.stdin.read()), flush=True)")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("choice, reader", [(None, 0), ("2", 2), ("none", None)])
def test_standard_input_reaches_one_rank(tmp_path, choice, reader):
    """As with mpiexec: the launcher's standard input goes to rank 0 (or --stdin R); the others read EOF."""
    args = ["-n", "3"] + ([] if choice is None else ["--stdin", choice]) + ["--", sys.executable, "-c", _READ_STDIN]
    res = subprocess.run(planaria(tmp_path, *args), env=env_for(tmp_path), capture_output=True, text=True,
                         timeout=50, input="1000000\nsecond line\n")
    assert res.returncode == 0, res.stderr[-2000:]
    got = {int(line.split()[2]): json.loads(line.split(" ", 3)[3])
           for line in res.stdout.splitlines() if " STDIN " in line}
    assert sorted(got) == [0, 1, 2], res.stdout
    assert got == {r: ("1000000\nsecond line\n" if r == reader else "") for r in range(3)}


@pytest.mark.timeout(30)
def test_stdin_rank_out_of_range_is_a_usage_error(tmp_path):
    res = run(tmp_path, "-n", "2", "--stdin", "2", "--", "python", str(SCRIPTS / "hello.py"))
    assert res.returncode == 2 and res.stderr.strip() == "planaria run: --stdin '2': expected a rank in 0..1 or 'none'"


@pytest.mark.timeout(60)
def test_planned_faults_that_never_fired_are_listed(tmp_path):
    """A kill planned after the end of the job: the summary (text and JSON) says it never fired."""
    res = run(tmp_path, "-n", "2", "--inject", "kill:rank=1,iter=100000", "--json", "--",
              "python", str(SCRIPTS / "hello.py"))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["unfired"] == ["kill:rank=1,iter=100000 on rank 1"]
    assert "planned fault(s) that never fired (the job ended first): kill:rank=1,iter=100000 on rank 1" in res.stderr


FAST_DETECT = ["--detect-timeouts", "p2p=1,coll=1,probe=1"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_on_hang_abort_stops_a_deadlock_at_once_with_a_diagnosis(tmp_path, backend):
    t = time.monotonic()
    res = run(tmp_path, "-n", "3", "--backend", backend, "--timeout", "60", "--on-hang", "abort", *FAST_DETECT,
              "--json", "--", "python", str(SCRIPTS / "deadlock_pair.py"), timeout=85)
    assert res.returncode == 124, res.stderr[-3000:]
    assert time.monotonic() - t < 40
    job = only_job(tmp_path).name
    assert re.search(rf"incident \(deadlock, found by rank \d\): deadlock on world tag 7: ranks 0 → 1 → 0 "
                     rf"wait for each other; full report: planaria diagnose {job}", res.stderr), res.stderr[-3000:]
    assert "verdict: deadlock" in res.stderr and "hang detected (--on-hang abort): stopping the job" in res.stderr
    summary = json.loads(res.stdout)
    assert summary["outcome"] == "hung"
    assert {r["how"] for r in summary["ranks"]} == {"ended by the launcher after a detected hang (--on-hang abort)"}
    _assert_deadlock_picture(tmp_path, only_job(tmp_path), backend)


def _assert_deadlock_picture(tmp_path: Path, job: Path, backend: str) -> None:
    """``planaria diagnose --svg`` of the deadlock, from the launcher's state file and after the job
    (post-mortem): ranks 0 and 1 wait on each other (root causes, highlighted), rank 2 in the barrier."""
    if shutil.which("dot") is None:
        pytest.skip("Graphviz dot not installed")
    from tests.unit.test_diagnose_picture import ROOT_FILL, svg_nodes
    site = "deadlock_pair.py:9 in <module>"
    for args in (["--offline", str(job / "diag-1.state")], [str(job)]):
        svg = tmp_path / "deadlock.svg"
        res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "diagnose", *args, "--svg", str(svg)],
                             env=env_for(tmp_path), capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr[-3000:]
        nodes = svg_nodes(svg.read_bytes())
        for r in (0, 1):
            texts, fills = nodes[f"w_r{r}"]
            assert texts[:2] == ["ROOT CAUSE: deadlock", f"rank {r}"] and ROOT_FILL in fills, (args, texts)
            assert f"waits in Recv from rank {1 - r} (tag 7) at" in texts[2] and texts[3] == site, texts
        texts, fills = nodes["w_r2"]
        assert texts[:2] == ["rank 2", "waits in Barrier #1 on world at"] and ROOT_FILL not in fills, texts
        assert nodes["w_g0"][0] == ["Barrier #1 on world", "1 of 3 members in it"]
        tree = {" ".join(t): fills for k, (t, fills) in nodes.items() if k.startswith("t")}
        # the frame of the root cause's site is highlighted in the call tree, and no other (under sim a
        # rank polls in Recv, and when its stack changed between samples it is not in the tree of the
        # stable threads)
        root = "<module> deadlock_pair.py:9"
        want = [root] if backend == "ulfm" or root in tree else []
        assert [k for k, fills in tree.items() if ROOT_FILL in fills] == want, tree
        svg.unlink()


@pytest.mark.timeout(90)
def test_on_hang_report_announces_and_runs_on(tmp_path):
    res = run(tmp_path, "-n", "2", "--timeout", "12", *FAST_DETECT, "--", "python", str(SCRIPTS / "deadlock_pair.py"),
              timeout=85)
    assert res.returncode == 124                       # ended by --timeout, not by the hang
    lines = [ln for ln in res.stderr.splitlines() if "incident (deadlock" in ln]
    assert len(lines) >= 1 and lines[0].index("incident") < res.stderr.index("timeout after 12 s")


def test_on_hang_bad_value_is_a_usage_error(tmp_path):
    res = run(tmp_path, "-n", "2", "--on-hang", "stop", "--", "python", str(SCRIPTS / "hello.py"))
    assert res.returncode == 2
    assert res.stderr.strip() == "planaria run: --on-hang must be one of report, diagnose, abort (got 'stop')"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", ["ulfm", "sim"])
@pytest.mark.parametrize("mode", ["tag", "source"])
def test_an_unmatched_message_is_named_as_the_mismatch(tmp_path, backend, mode):
    """Run time and the diagnosis both name the mismatch, not a lost message or the network."""
    script = SCRIPTS / "mismatch.py"
    res = run(tmp_path, "-n", "3", "--backend", backend, "--timeout", "60", "--on-hang", "abort", *FAST_DETECT,
              "--", "python", str(script), mode, timeout=85)
    assert res.returncode == 124, res.stderr[-3000:]
    line = next((ln for ln in res.stderr.splitlines() if "incident (" in ln), "")
    recv = f"{script}:{_line_of(script, 'comm.Recv(')} in <module>"
    if mode == "tag":
        assert "incident (tag-mismatch, found by rank" in line, res.stderr[-3000:]
        assert f"unmatched tag: rank 0 sent tag 8, rank 1 waits for tag 7 from rank 0 at {recv}" in line
        first = "unmatched tag: rank 0 sent tag 8, rank 1 waits for tag 7 from rank 0 at mismatch.py:"
    else:
        assert "incident (source-mismatch, found by rank" in line, res.stderr[-3000:]
        assert (f"unmatched source: rank 0 sent to rank 1 (tag 7), rank 1 waits for a message from rank 2 "
                f"at {recv}") in line
        first = "unmatched source: rank 0 sent to rank 1 (tag 7), rank 1 waits for a message from rank 2 at mismatch.py:"
    diag = (only_job(tmp_path) / "diag-1.txt").read_text().splitlines()
    assert diag[0] == "messages that do not match their receive (they explain the waits below):"
    assert diag[1].strip().startswith(first), diag[:3]
    report = json.loads((only_job(tmp_path) / "diag-1.json").read_text())
    assert report["verdict"] == f"{mode}-mismatch" and report["root_causes"][0]["kind"] == f"{mode}-mismatch"
    # afterwards, the post-mortem starts from that diagnosis, not from the ranks the launcher ended
    post = subprocess.run([sys.executable, "-m", "planaria.cli.main", "diagnose", str(only_job(tmp_path)), "--json"],
                          env=env_for(tmp_path), capture_output=True, text=True, timeout=60)
    pm = json.loads(post.stdout)
    assert pm["verdict"] == f"{mode}-mismatch" and pm["root_causes"][0]["kind"] == f"{mode}-mismatch", pm["text"]


def _line_of(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.strip().startswith(text))
