"""The rank recorder (planaria.launch.rankfate) around real child processes."""
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

from planaria.launch import rankfate

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=["python", "c"])
def recorder(request) -> list[str]:
    """Each recorder's command prefix: the Python one, and the C one (built on first use)."""
    if request.param == "python":
        return rankfate.shim_argv()
    exe = rankfate.recorder_binary()
    if exe is None:
        pytest.skip("no C compiler: the C recorder cannot be built here")
    return [exe]


def shim(prefix: list[str], tmp: Path | None, *cmd: str, rank: int = 2, env: dict[str, str] | None = None,
         **kw) -> subprocess.Popen[str]:
    run_env = {k: v for k, v in os.environ.items()
               if k not in (rankfate.FATES_ENV, rankfate.STDIN_ENV, "OMPI_COMM_WORLD_RANK", "PMIX_RANK")}
    if tmp is not None:
        run_env[rankfate.FATES_ENV] = str(tmp)
        run_env["OMPI_COMM_WORLD_RANK"] = str(rank)
    run_env.update(env or {})
    return subprocess.Popen(prefix + list(cmd), env=run_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def wait_record(tmp: Path, rank: int, key: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = rankfate.read_one(tmp, rank)
        if rec is not None and key in rec:
            return rec
        time.sleep(0.02)
    raise AssertionError(f"no record of rank {rank} with {key!r} in {timeout} s")


def test_exit_code_is_recorded_and_passed_on(recorder, tmp_path):
    p = shim(recorder, tmp_path, "sh", "-c", "exit 3")
    p.communicate(timeout=20)
    assert p.returncode == 3
    rec = json.loads((tmp_path / "2.json").read_text())
    assert rec["rank"] == 2 and rec["exit_code"] == 3 and "signal" not in rec
    assert rec["shim"] == p.pid and rec["pid"] != p.pid
    assert rec["end"] >= rec["start"]
    assert rankfate.describe(rec) == "exit 3"


def test_signal_is_recorded_and_the_recorder_ends_by_it(recorder, tmp_path):
    p = shim(recorder, tmp_path, "sh", "-c", "kill -KILL $$")
    p.communicate(timeout=20)
    assert p.returncode == -signal.SIGKILL      # mpiexec sees what it would see without the recorder
    rec = rankfate.read_one(tmp_path, 2)
    assert rec["signal"] == signal.SIGKILL and "exit_code" not in rec
    assert rankfate.describe(rec) == "killed by signal 9 (SIGKILL)"


COUNT_TERMS = """
import signal, sys, time
n = 0
def note(s, f):
    global n
    n += 1
signal.signal(signal.SIGTERM, note)
print("ready", flush=True)
while n == 0:
    time.sleep(0.01)
time.sleep(0.5)
sys.exit(10 + n)
"""


def test_a_group_signal_reaches_the_command_once(recorder, tmp_path):
    # the MPI runtime signals the process group: the recorder must not pass it on a second time
    p = shim(recorder, tmp_path, sys.executable, "-c", COUNT_TERMS, start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    start = wait_record(tmp_path, 2, "pid")
    assert "end" not in start and rankfate.describe(start).startswith("ended, how")
    os.killpg(p.pid, signal.SIGTERM)
    p.communicate(timeout=20)
    assert p.returncode == 11
    assert rankfate.read_one(tmp_path, 2)["exit_code"] == 11


def test_a_signal_from_another_process_is_passed_on(recorder, tmp_path):
    p = shim(recorder, tmp_path, sys.executable, "-c", COUNT_TERMS, start_new_session=True)
    assert p.stdout.readline().strip() == "ready"
    subprocess.run(["kill", "-TERM", str(p.pid)], check=True, timeout=10)   # to the recorder alone
    p.communicate(timeout=20)
    assert p.returncode == 11


def test_a_command_killed_by_a_passed_on_signal_is_recorded_so(recorder, tmp_path):
    p = shim(recorder, tmp_path, "sleep", "30")
    start = wait_record(tmp_path, 2, "pid")
    subprocess.run(["kill", "-TERM", str(p.pid)], check=True, timeout=10)
    p.communicate(timeout=20)
    assert p.returncode == -signal.SIGTERM
    rec = rankfate.read_one(tmp_path, 2)
    assert rec["signal"] == signal.SIGTERM and rec["pid"] == start["pid"]


def test_without_a_records_directory_the_command_replaces_the_recorder(recorder):
    p = shim(recorder, None, "sh", "-c", "echo $$")
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 0 and int(out) == p.pid


def test_missing_command_is_one_line_and_127(recorder, tmp_path):
    p = shim(recorder, tmp_path, "no-such-command-xyz")
    _, err = p.communicate(timeout=20)
    assert p.returncode == 127
    assert err.strip().splitlines() == ["planaria: cannot run no-such-command-xyz: No such file or directory"]
    assert rankfate.read_one(tmp_path, 2)["exit_code"] == 127


def test_kill_leftovers_ends_only_commands_still_under_their_recorder(recorder, tmp_path):
    p = shim(recorder, tmp_path, "sleep", "30", rank=0)
    other = subprocess.Popen(["sleep", "30"])          # this test's child, not the recorder's
    try:
        wait_record(tmp_path, 0, "pid")
        fates = rankfate.read_fates(tmp_path)
        fates[5] = {"rank": 5, "pid": other.pid, "shim": p.pid, "start": 0.0}   # not a recorder's child
        assert rankfate.kill_leftovers(fates) == [0]
        p.communicate(timeout=20)
        assert p.returncode == -signal.SIGKILL
        assert rankfate.read_one(tmp_path, 0)["signal"] == signal.SIGKILL
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_settle_returns_at_once_when_every_record_has_its_end(tmp_path):
    (tmp_path / "0.json").write_text(json.dumps({"rank": 0, "pid": 1, "shim": 1, "start": 0, "end": 1, "exit_code": 0}))
    (tmp_path / "junk.json").write_text("{not json")
    t = time.monotonic()
    assert list(rankfate.settle(tmp_path, wait=5.0)) == [0]
    assert time.monotonic() - t < 1.0
    (tmp_path / "1.json").write_text(json.dumps({"rank": 1, "pid": 1, "shim": 1, "start": 0}))
    t = time.monotonic()
    assert sorted(rankfate.settle(tmp_path, wait=0.3)) == [0, 1]
    assert 0.3 <= time.monotonic() - t < 2.0


def test_host_names_are_written_as_valid_json(tmp_path):
    rankfate._write(str(tmp_path / "3.json"), {"rank": 3, "host": 'a"b\\c', "start": 1.5})
    rec = json.loads((tmp_path / "3.json").read_text())
    assert rec == {"rank": 3, "host": "a?b?c", "start": 1.5}


@pytest.mark.parametrize("fates, status", [
    ({}, None),
    ({0: {"end": 1, "exit_code": 0}, 1: {"end": 1, "exit_code": 0}}, 0),
    ({0: {"end": 1, "exit_code": 0}, 1: {"end": 1, "signal": 9}}, 137),
    ({0: {"end": 1, "exit_code": 4}, 1: {"end": 1, "signal": 9}}, 4),      # the lowest rank decides
    ({0: {"start": 0}, 1: {"end": 1, "exit_code": 5}}, 5),                  # rank 0 outlived mpiexec
    ({0: {"start": 0}, 1: {"end": 1, "exit_code": 0}}, None),               # nothing bad known
])
def test_status_as_mpiexec_without_ulfm_would_give_it(fates, status):
    assert rankfate.status_of(fates) == status


def test_recorder_imports_only_what_it_needs():
    # it starts once per rank, before the rank itself: its start-up is on every job's path
    argv = rankfate.shim_argv()
    out = subprocess.run(argv[:1] + ["-X", "importtime"] + argv[1:] + ["true"], capture_output=True,
                         text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    loaded = {ln.rsplit("|", 1)[-1].strip() for ln in out.stderr.splitlines() if ln.startswith("import time:")}
    assert "encodings" in loaded                # the listing works
    assert loaded.isdisjoint({"json", "typing", "pathlib", "enum", "ctypes", "subprocess"})


def test_status_and_rows_of_a_program_without_the_runtime():
    from planaria.launch.attempt import exit_status
    from planaria.launch.runner import fate_table

    fates = {0: {"rank": 0, "host": "h", "pid": 5, "start": 0.0, "end": 2.0, "exit_code": 0},
             1: {"rank": 1, "host": "h", "pid": 6, "start": 0.0, "end": 1.5, "signal": 11},
             2: {"rank": 2, "host": "h", "pid": 7, "start": 0.0, "left_running": True}}
    assert exit_status({}, 0, fates) == 128 + 11        # with ULFM mpiexec said 0
    assert exit_status({}, -9, {}) == 137 and exit_status({}, 0, None) == 0   # no records: mpiexec's
    rows = fate_table(fates)
    assert rows[0]["state"] == "finished" and rows[0]["exit_code"] == 0 and rows[0]["end_time"] == 2.0
    assert rows[1]["state"] == "lost" and rows[1]["reason"] == "killed by signal 11 (SIGSEGV)"
    assert rows[1]["fail_time"] == 1.5 and rows[1]["host"] == "h"
    assert rows[2]["reason"] == "still running after mpiexec exited (killed by the launcher)"
    # ranks that talked to the controller: their table decides, as before
    assert exit_status({0: {"state": "finished", "exit_code": 0}}, 0, fates) == 0


def test_failure_watch_waits_out_its_grace_and_a_runtime_in_use(tmp_path):
    w = rankfate.FailureWatch(tmp_path, interval=0.5, grace=1.0)
    no_runtime = lambda: False   # noqa: E731
    assert w.check(0.0, no_runtime) is None                  # nothing recorded yet
    (tmp_path / "0.json").write_text(json.dumps({"rank": 0, "start": 0.0, "end": 1.0, "exit_code": 0}))
    assert w.check(0.6, no_runtime) is None                  # exit 0 is no failure
    (tmp_path / "1.json").write_text(json.dumps({"rank": 1, "start": 0.0, "end": 1.0, "signal": 9}))
    assert w.check(0.8, no_runtime) is None                  # before its interval
    assert w.check(1.2, no_runtime) is None                  # first seen: the grace starts
    assert w.check(1.8, no_runtime) is None
    rank, rec = w.check(2.3, no_runtime)
    assert rank == 1 and rec["signal"] == 9
    w = rankfate.FailureWatch(tmp_path, interval=0.5, grace=1.0)
    assert w.check(0.0, lambda: True) is None and w.check(5.0, lambda: True) is None   # ranks said hello


def test_the_controller_shows_recorded_ranks_that_never_said_hello(tmp_path):
    from planaria.launch.controller import Controller
    from planaria.launch.jobdir import JobDir

    ctl = Controller(JobDir.create(tmp_path / "jobs"))
    assert ctl.view() == {}
    ctl.fates_dir = tmp_path / "fates"
    ctl.fates_dir.mkdir()
    recs = {0: {"rank": 0, "host": "n1", "pid": 11, "shim": 10, "start": 1.0},
            1: {"rank": 1, "host": "n1", "pid": 13, "shim": 12, "start": 1.0, "end": 2.0, "signal": 9},
            2: {"rank": 2, "host": "n1", "pid": 15, "shim": 14, "start": 1.0, "end": 2.0, "exit_code": 0}}
    for r, rec in recs.items():
        (ctl.fates_dir / f"{r}.json").write_text(json.dumps(rec))
    view = ctl.view()                       # long after the start no rank said hello: a plain program
    assert list(view) == [0, 1, 2]
    assert (view[0]["state"], view[0]["pid"], view[0]["runtime"]) == ("running", 11, False)
    assert (view[1]["state"], view[1]["reason"]) == ("failed", "killed by signal 9 (SIGKILL)")
    assert view[2]["state"] == "finished"
    ctl._update_table({"type": "hello", "rank": 2, "pid": 15, "host": "n1", "role": "initial"}, 1.5)
    view = ctl.view()                       # a rank said hello: the others are still starting
    assert (view[0]["state"], view[0]["runtime"]) == ("starting", None)
    assert view[2]["role"] == "initial" and "runtime" not in view[2]     # the rank table's own row
    assert set(ctl.table()) == {2}
    recs[3] = {"rank": 3, "host": "n1", "pid": 17, "shim": 16, "start": time.time()}
    (ctl.fates_dir / "3.json").write_text(json.dumps(recs[3]))
    ctl2 = Controller(ctl.jobdir)
    ctl2.fates_dir = ctl.fates_dir
    assert (ctl2.view()[3]["state"], ctl2.view()[3]["runtime"]) == ("starting", None)   # just started


def test_mpiexec_outliving_every_rank_is_noticed_after_its_grace():
    from planaria.launch.supervise import MpiexecOutlived

    records = {0: {"start": 0.0, "end": 10.0}, 1: {"start": 0.0}}
    watch = MpiexecOutlived(2, grace=5.0)
    assert not watch.check(11.0, lambda: records)               # rank 1 still runs
    records[1]["end"] = 12.0
    assert not watch.check(11.5, lambda: records)               # read at most once a second
    assert not watch.check(16.0, lambda: records)               # 4 s after the last end
    assert watch.check(17.5, lambda: records)
    assert not MpiexecOutlived(3).check(100.0, lambda: records)  # a rank without a record yet


def test_stdin_pipe_open_is_bounded(tmp_path) -> None:
    """A launcher that never opens its end of the stdin pipe costs rank R a bounded wait, not its run."""
    import threading

    fifo = tmp_path / "stdin.fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    assert rankfate._open_bounded(str(fifo), 0.3) is None
    assert 0.25 < time.monotonic() - t0 < 5
    wfd: list[int] = []
    writer = threading.Thread(target=lambda: wfd.append(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()           # the launcher's end, opened late (the abandoned opener above pairs with it)
    fd = rankfate._open_bounded(str(fifo), 5.0)
    writer.join(5)
    assert fd is not None and wfd
    os.write(wfd[0], b"x")
    assert os.read(fd, 1) == b"x"
    os.close(fd), os.close(wfd[0])


def test_a_finished_or_running_rank_holds_up_its_peers_a_failed_one_does_not(tmp_path):
    """--on-hang acts on a rank found unreachable when its peers get no error: it runs, or it finished."""
    import os

    from planaria.launch.controller import Controller
    from planaria.launch.jobdir import JobDir

    ctl = Controller(JobDir.create(tmp_path / "jobs"))
    for r in range(4):
        ctl._update_table({"type": "hello", "rank": r, "pid": os.getpid(), "host": ctl.host, "role": "initial"}, 1.0)
        ctl._update_table({"type": "hb", "rank": r}, 1.1)
    ctl._update_table({"type": "bye", "rank": 1, "code": 0}, 2.0)
    ctl._update_table({"type": "fail", "rank": 2, "reason": "killed"}, 2.0)
    assert ctl.holds_up([0]) and ctl.holds_up([1]) and ctl.holds_up([0, 1])
    assert not ctl.holds_up([2]) and not ctl.holds_up([1, 2]) and not ctl.holds_up([]) and not ctl.holds_up([7])
    ctl._update_table({"type": "bye", "rank": 3, "code": 0, "site": "a.py:9 in <module>"}, 2.0)
    assert ctl.finished_note([0, 1]) == "rank 1 has finished (exit 0)"
    assert ctl.finished_note([3]) == "rank 3 has finished (exit 0 at a.py:9 in <module>)"
    assert ctl.finished_note([0, 2]) is None


def test_a_rank_without_goodbye_or_recorded_end_is_never_counted_finished(tmp_path):
    """mpiexec exited 0 (a node cut off under Slurm does that): a rank that said hello, no bye, and
    whose end no recorder wrote is lost; one whose recorder wrote an exit code has finished."""
    from planaria.launch.controller import UNSETTLED_REASON, Controller
    from planaria.launch.jobdir import JobDir

    ctl = Controller(JobDir.create(tmp_path / "jobs"))
    ctl.pid_check = False
    ctl.fates_dir = tmp_path / "fates"
    ctl.fates_dir.mkdir()
    for r in range(3):
        ctl._update_table({"type": "hello", "rank": r, "pid": 1000 + r, "host": "n2", "role": "initial"}, time.time())
    fates = {1: {"rank": 1, "start": 1.0, "end": 2.0, "exit_code": 0},
             2: {"rank": 2, "start": 1.0}}            # started, its end never recorded (host unreachable)
    ctl.sweep(final=True, final_ok=True, fates=fates)
    t = ctl.table()
    assert (t[0]["state"], t[0]["reason"]) == ("lost", UNSETTLED_REASON)
    assert t[1]["state"] == "finished"
    assert (t[2]["state"], t[2]["reason"]) == ("lost", UNSETTLED_REASON)
    # without recorders (--no-rank-fates) mpiexec's 0 is all there is
    ctl2 = Controller(ctl.jobdir)
    ctl2.pid_check = False
    ctl2._update_table({"type": "hello", "rank": 0, "pid": 1000, "host": "n2", "role": "initial"}, time.time())
    ctl2.sweep(final=True, final_ok=True)
    assert ctl2.table()[0]["state"] == "finished"


@pytest.mark.timeout(60)
def test_recorder_starts_from_its_cached_bytecode():
    # compiling the recorder's source would cost every rank 3 ms of CPU: it is imported, not run as a script
    argv = rankfate.shim_argv()
    for _ in range(2):      # the first run writes the bytecode if nothing had yet
        out = subprocess.run(argv[:1] + ["-v"] + argv[1:] + ["true"], capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr
    assert re.search(r"code object from '.*__pycache__.rankfate\.[^']*\.pyc'", out.stderr), out.stderr[-2000:]


def test_the_stdin_pipe_becomes_the_named_ranks_standard_input(recorder, tmp_path):
    fifo = tmp_path / "stdin.fifo"
    os.mkfifo(fifo)
    spec = {rankfate.STDIN_ENV: f"2:{os.uname().nodename}:{fifo}"}
    other = shim(recorder, tmp_path, "cat", rank=3, env=spec, stdin=subprocess.DEVNULL)   # not rank 2: its own
    assert other.communicate(timeout=20)[0] == "" and other.returncode == 0
    p = shim(recorder, tmp_path, "cat", env=spec)
    with open(fifo, "w") as fh:             # the launcher's end: blocks until the recorder opens its own
        fh.write("to rank 2\n")
    out, _ = p.communicate(timeout=20)
    assert (out, p.returncode) == ("to rank 2\n", 0)


@pytest.mark.timeout(60)
def test_the_c_recorders_wait_for_the_stdin_pipe_is_bounded(tmp_path):
    exe = rankfate.recorder_binary()
    if exe is None:
        pytest.skip("no C compiler: the C recorder cannot be built here")
    fifo = tmp_path / "stdin.fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    p = shim([exe], tmp_path, "cat", env={rankfate.STDIN_ENV: f"2:{os.uname().nodename}:{fifo}"},
             stdin=subprocess.DEVNULL)
    _, err = p.communicate(timeout=40)      # the launcher never opens its end
    assert p.returncode == 0 and 9 < time.monotonic() - t0 < 30
    assert f"planaria: rank 2: no standard input: the launcher did not open {fifo} within 10 s" in err


def test_without_a_compiler_ranks_run_under_the_python_recorder(tmp_path):
    # a fresh cache and no cc on the path: nothing is built, nothing noted as failed (a compiler
    # installed later is used), and the launcher takes the Python recorder
    code = ("from planaria.launch import rankfate\n"
            "print(rankfate.recorder_argv() == rankfate.shim_argv(), rankfate.recorder_binary())")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "None"], out.stderr
    assert not list(tmp_path.rglob("*.failed"))


def test_the_c_recorder_is_built_once_and_only_for_ranks_on_this_machine(tmp_path):
    if rankfate.recorder_binary() is None:
        pytest.skip("no C compiler: the C recorder cannot be built here")
    code = ("from planaria.launch import rankfate\n"
            "print(rankfate.recorder_argv()[0], rankfate.recorder_argv(local=False) == rankfate.shim_argv())")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    exe, python_elsewhere = first.stdout.split()
    assert exe.startswith(str(tmp_path / "planaria" / "rankfate-")) and python_elsewhere == "True", first.stderr
    built = os.stat(exe).st_mtime_ns
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert again.stdout.split()[0] == exe and os.stat(exe).st_mtime_ns == built
