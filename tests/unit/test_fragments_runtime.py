"""The fragment program model and the single-process executor: results, hangs, errors, traces."""
from __future__ import annotations

import json
import time

import pytest

import planaria.fragments as fr
from planaria.trace.writer import read_traces
from tests.streams import wait_for_line


@fr.atomic
def put(x: fr.Name, v: int):
    x.set(v)


@fr.atomic
def add(out: fr.Name, a: int, b: int):
    out.set(a + b)


SINK: list = []


@fr.atomic
def collect(v: list):
    SINK.append(v)          # CF arguments are values (copies), so results leave through the rank's memory


@fr.sub
def fib_main(n: int):
    f = fr.df("f")
    put(f[0], 0)
    put(f[1], 1)
    for i in range(2, n + 1):
        add(f[i], f[i - 1], f[i - 2])
    collect([f[i] for i in range(n + 1)])


def test_fibonacci_runs_out_of_order_and_finishes(tmp_path):
    SINK.clear()
    res = fr.run(fib_main, 12, comm=None, threads=3, trace_dir=str(tmp_path))
    assert res.status == "finished" and res.unfinished == 0 and res.errors == 0
    assert SINK == [[0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144]]
    recs = read_traces(tmp_path)
    kinds = {r["k"] for r in recs}
    assert {"run", "cf", "df", "start", "end", "set", "exit"} <= kinds
    cf_ids = [r["id"] for r in recs if r["k"] == "cf"]
    assert len(cf_ids) == len(set(cf_ids)) == res.cfs_done == 1 + 2 + 11 + 1
    # every set names its writer and the DF's type fixed at that assignment
    sets = [r for r in recs if r["k"] == "set"]
    assert all(r["type"] == "int" and r["cf"] in cf_ids for r in sets)


SEEN: list = []


@fr.atomic
def look(path: str):
    SEEN.append(open(path).read())


@fr.sub
def look_main(path: str):
    look(path)


def test_the_run_record_is_on_disk_while_the_run_goes_on(tmp_path):
    """The trace's first record reaches the file when the run starts, not at the first flush: a
    rank SIGKILLed before that flush is still known to have run (``ranks_without_exit``)."""
    from planaria.trace.writer import trace_path
    SEEN.clear()
    res = fr.run(look_main, str(trace_path(tmp_path, 0)), comm=None, trace_dir=str(tmp_path))
    assert res.status == "finished"
    (seen,) = SEEN
    assert [json.loads(ln)["k"] for ln in seen.splitlines()] == ["run"]


@fr.atomic
def slow_put(x: fr.Name, v: int, delay: float):
    time.sleep(delay)
    x.set(v)


@fr.sub
def parallel_main(k: int, delay: float):
    xs = fr.df("xs")
    for i in range(k):
        slow_put(xs[i], i, delay)


def test_several_cfs_run_at_once_on_one_rank(tmp_path):
    t = time.perf_counter()
    res = fr.run(parallel_main, 8, 0.1, comm=None, threads=4, trace_dir=str(tmp_path))
    wall = time.perf_counter() - t
    assert res.status == "finished"
    assert wall < 0.8 * 8 * 0.1           # serial would be 0.8 s; four threads take ~0.2 s
    ends = [r for r in read_traces(tmp_path) if r["k"] == "end" and r.get("out")]
    overlapping = sum(1 for a in ends for b in ends if a is not b and a["t0"] < b["t"] and b["t0"] < a["t"])
    assert overlapping > 0


@fr.sub
def never_main():
    a = fr.df("a")
    put(fr.df("b"), 1)
    add(fr.df("c"), a, 1)


def test_hang_is_detected_not_waited_for(tmp_path):
    t = time.perf_counter()
    res = fr.run(never_main, comm=None, trace_dir=str(tmp_path), report=False)
    assert time.perf_counter() - t < 5
    assert res.status == "hung" and res.unfinished == 1
    dumped = [r for r in read_traces(tmp_path) if r["k"] == "unfinished"]
    assert len(dumped) == 1 and dumped[0]["awaits"] and dumped[0]["awaits"][0].endswith(":a#0")


@fr.atomic
def boom(v: int):
    raise ValueError(f"bad value {v}")


@fr.sub
def boom_main():
    x = fr.df("x")
    put(x, 7)
    boom(x)


def test_exception_in_a_cf_is_recorded_with_its_line(tmp_path):
    res = fr.run(boom_main, comm=None, trace_dir=str(tmp_path), report=False)
    assert res.status == "failed" and res.errors == 1
    err = [r for r in read_traces(tmp_path) if r["k"] == "error"][0]
    assert err["kind"] == "exception" and err["exc"] == "ValueError" and "bad value 7" in err["message"]
    assert err["file"].endswith("test_fragments_runtime.py") and err["line"] > 0


def test_spawning_outside_a_sub_is_an_error():
    with pytest.raises(fr.FragmentError):
        put(None, 1)
    with pytest.raises(fr.FragmentError):
        fr.run(put, comm=None)


def test_trace_flushes_at_threshold_before_exit(tmp_path):
    from planaria.trace.writer import TraceWriter
    tw = TraceWriter(tmp_path, 3, flush_bytes=200)
    for i in range(10):
        tw.write({"k": "x", "i": i, "pad": "y" * 30})
    # flushed chunks are on disk while the writer is still open (what a kill would leave)
    on_disk = [json.loads(ln) for ln in (tmp_path / "trace-r3.jsonl").read_text().splitlines()]
    assert tw.flushes >= 2 and 0 < len(on_disk) < 10 and [r["i"] for r in on_disk] == list(range(len(on_disk)))
    with open(tmp_path / "trace-r3.jsonl", "a") as fh:
        fh.write('{"k": "torn')                       # a writer killed mid-line
    problems: list[str] = []
    assert [r["i"] for r in read_traces(tmp_path, problems)] == list(range(len(on_disk)))
    assert problems == []                             # a torn last line is expected, not a problem


def test_lines_that_are_not_records_are_named_and_no_records_is_an_error(tmp_path):
    (tmp_path / "trace-r0.jsonl").write_text('{"k": "run"}\nnot json\n[1, 2]\n{"k": "exit"}\n')
    problems: list[str] = []
    assert [r["k"] for r in read_traces(tmp_path, problems)] == ["run", "exit"]
    assert problems == ["trace-r0.jsonl: 2 line(s) are not trace records (line 2 and 1 more), skipped"]
    (tmp_path / "trace-r0.jsonl").write_text("garbage\n")
    with pytest.raises(ValueError, match="no trace records in 1 file.s. .1 line.s. are not trace records"):
        read_traces(tmp_path)


@fr.atomic
def fill(vec: fr.Name, n: int):
    for i in range(n):
        vec[i].set(i * i)


@fr.atomic
def total(vals: list, out: fr.Name):
    out.set(sum(vals))


@fr.sub
def fill_main(n: int):
    v, t = fr.dfs("v t")
    fill(v, n)                      # one CF sets a whole indexed DF element by element
    total([v[i] for i in range(n)], t)
    collect([t])


def test_one_cf_may_set_elements_of_an_indexed_output(tmp_path):
    SINK.clear()
    res = fr.run(fill_main, 5, comm=None, trace_dir=str(tmp_path))
    assert res.status == "finished" and SINK == [[0 + 1 + 4 + 9 + 16]]
    assert not [r for r in read_traces(tmp_path) if r["k"] == "error"]


@fr.atomic
def stuck(out: fr.Name, seconds: float):
    time.sleep(seconds)
    out.set(1)


@fr.sub
def stuck_main():
    s = fr.df("s")
    stuck(s, 30.0)
    put(fr.df("u"), s)      # awaits s


def test_a_cf_that_never_returns_ends_the_run_at_its_timeout(tmp_path):
    t = time.perf_counter()
    res = fr.run(stuck_main, comm=None, trace_dir=str(tmp_path), timeout=0.5, report=False)
    assert time.perf_counter() - t < 3 and res.status == "timeout" and res.unfinished == 2
    from planaria.trace.analyze import analyze_dir
    rep = analyze_dir(tmp_path, all_hung=True)
    assert rep["status"] == "timeout"
    assert {h["expr"]: h["state"] for h in rep["all_hung"]} == {"stuck(s, 30.0)": "running", "put(fr.df(\"u\"), s)": "waiting"}
    assert [h["expr"] for h in rep["root_causes"]] == ["stuck(s, 30.0)"]


_SPIN_PROGRAM = """
import sys, time
import planaria.fragments as fr

@fr.atomic
def put(x: fr.Name, v: int):
    x.set(v)

@fr.atomic
def spin(out: fr.Name, v: int):
    print("SPINNING", flush=True)
    while True:
        time.sleep(0.02)

@fr.sub
def main(k: int):
    z, s = fr.dfs("z s")
    put(z[0], 1)
    spin(s[0], z[0])
    for i in range(k):
        put(z[i + 1], s[0])          # all wait for s[0]

fr.run(main, 3, comm=None, trace_dir=sys.argv[1], timeout=60, report=False)
print("RETURNED", flush=True)
"""


def _start_spinning(tmp_path, sig):  # type: ignore[no-untyped-def]
    """Run a one-process program whose CF never returns, send ``sig`` once it spins; (returncode, stdout, stderr)."""
    import os
    import signal
    import subprocess
    import sys
    prog = tmp_path / "spin.py"
    prog.write_text(_SPIN_PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # SIGINT as in a terminal: a background job (CI, nohup) would hand the child SIGINT ignored
    proc = subprocess.Popen([sys.executable, str(prog), str(tmp_path / "trace")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert wait_for_line(proc.stdout, "SPINNING", 30), "the program never reached its spinning CF"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_leaves_the_unfinished_cfs_in_the_trace(tmp_path, signame):
    """Killed from outside while a CF spins: the buffered trace, the unfinished CFs and an exit record are written,
    then the signal takes its usual course (death by SIGTERM; KeyboardInterrupt for SIGINT)."""
    import signal
    from planaria.trace.analyze import analyze_dir
    sig = getattr(signal, signame)
    code, out, err = _start_spinning(tmp_path, sig)
    assert "RETURNED" not in out
    if sig == signal.SIGTERM:
        assert code == -signal.SIGTERM, err[-2000:]
    else:
        assert code != 0 and "KeyboardInterrupt" in err, err[-2000:]
    recs = read_traces(tmp_path / "trace")
    (ex,) = [r for r in recs if r["k"] == "exit"]
    assert ex["status"] == "killed" and ex["signal"] == signame
    unfinished = {r["cf"]: r for r in recs if r["k"] == "unfinished"}
    states = sorted(r["state"] for r in unfinished.values())
    assert states == ["running", "waiting", "waiting", "waiting"]
    rep = analyze_dir(tmp_path / "trace")
    assert rep["status"] == "killed" and rep["hung"] == 4
    assert [h["expr"] for h in rep["root_causes"]] == ["spin(s[0], z[0])"]
    assert rep["root_causes"][0]["state"] == "running"
    assert 0.0 < rep["root_causes"][0]["running_s"] < 30          # it was spinning when the signal came
    assert "[running for " in rep["text"]


ORDER: list = []


@fr.atomic
def note(x: fr.Name, v: int):
    ORDER.append(v)
    x.set(v)


@fr.sub
def prio_main(prios: list):
    x = fr.df("x")
    for i, p in enumerate(prios):
        note(x[i], i).priority(p)


def test_ready_cfs_start_in_priority_order_then_in_order_of_arrival():
    ORDER.clear()
    res = fr.run(prio_main, [0, 3, 1, 3, -2, 0], comm=None, threads=1)
    assert res.status == "finished"
    assert ORDER == [1, 3, 2, 0, 5, 4]


def test_a_priority_must_be_a_number(tmp_path):
    ORDER.clear()
    res = fr.run(prio_main, [float("nan")], comm=None, threads=1, timeout=20, trace_dir=str(tmp_path))
    assert res.status == "failed" and res.errors == 1 and ORDER == []
    errs = [r for r in read_traces(tmp_path) if "not a number" in json.dumps(r)]
    assert errs, "the failed CF's record names the bad priority"


@fr.atomic
def three(out: fr.Name, a: int, b: int = 2):
    out.set(a + b)


@fr.atomic
def keyword_only(out: fr.Name, *, a: int):
    out.set(a)


def test_arguments_bind_by_the_signature_rules():
    # a positional call that fills every parameter binds by position; anything else by inspect's rules
    assert three.bind((1, 2, 3), {}) == {"out": 1, "a": 2, "b": 3}
    assert three.bind((1, 2), {}) == {"out": 1, "a": 2}                  # the default applies at the call
    assert three.bind((1,), {"b": 5, "a": 4}) == {"out": 1, "a": 4, "b": 5}
    assert keyword_only.bind((1,), {"a": 2}) == {"out": 1, "a": 2}
    for args, kwargs in (((1, 2, 3, 4), {}), ((1,), {}), ((1, 2, 3), {"a": 1})):
        with pytest.raises(fr.FragmentError, match="three"):
            three.bind(args, kwargs)
    with pytest.raises(fr.FragmentError, match="keyword_only"):
        keyword_only.bind((1, 2), {})


@fr.sub
def sites_main():
    x = fr.df("x")
    for i in range(3):
        three(x[i], i).at(0)   # a loop: one call site
    three(x[3], 3, 4)


def test_each_cf_names_its_own_call_site(tmp_path):
    res = fr.run(sites_main, comm=None, threads=1, trace_dir=str(tmp_path))
    assert res.status == "finished"
    cfs = [r for r in read_traces(tmp_path) if r["k"] == "cf" and r["code"].endswith("three")]
    by_line = {}
    for r in cfs:
        by_line.setdefault(r["line"], []).append(r["expr"])
    (loop, n_loop), (last, n_last) = sorted((line, len(e)) for line, e in by_line.items())
    assert (n_loop, n_last, last) == (3, 1, loop + 1)
    assert by_line[loop] == ["three(x[i], i)"] * 3 and by_line[last] == ["three(x[3], 3, 4)"]
