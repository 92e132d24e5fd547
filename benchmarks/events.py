"""``python -m benchmarks events``: notify -> handler latency and event throughput.

Three figures from one ``planaria run`` job of N ranks on this machine (detection off):
- in process: rank 0 notifies a ``proc_local`` event and waits for its own handler (the chain
  runs on the events thread); latency = perf_counter at the handler minus at ``notify``;
- through the controller: rank 0 notifies a job-range event every ``pace`` ms (after its own
  handler ran); each rank's handler (run by its agent thread) records wall-clock time minus the
  notify time (one host, one clock); reported over all (event, rank) pairs and as the time until
  the last rank had it. Ranks wait in ``threading.Event.wait``, never in an MPI call, meanwhile;
- throughput: rank 0 notifies ``burst`` job-range events back to back; events per second =
  burst / (time the slowest rank ran its last handler - time of the first notify).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import typer

from benchmarks import _launch
from benchmarks._launch import BenchError, command_line, emit, loadavg
from planaria.util.env import PLANARIA_HOME, PREFIX

GOAL_P50_MS = 1.0


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    ys = sorted(xs)
    k = min(len(ys) - 1, max(0, int(round(q / 100.0 * (len(ys) - 1)))))
    return ys[k]


def _stats(xs_s: list[float]) -> dict[str, float]:
    ms = [x * 1e3 for x in xs_s]
    return {"n": len(ms), "p50_ms": _pct(ms, 50), "p99_ms": _pct(ms, 99), "max_ms": max(ms) if ms else float("nan")}


# --------------------------------------------------------------------------- rank program
def rank_main(args: argparse.Namespace) -> None:
    import planaria as pl
    import planaria.events as ev
    comm = pl.world()
    rank = comm.rank
    U1, U2, U3 = ev.user_code(1), ev.user_code(2), ev.user_code(3)
    # 1. in process (rank 0)
    local: list[float] = []
    got_local = threading.Event()

    def on_local(e: Any, r: Any) -> Any:
        local.append(time.perf_counter() - e.info["p0"])
        got_local.set()
        return ev.COMPLETE
    ev.register(U3, on_local, name="bench-local")
    if rank == 0:
        for _ in range(args.local):
            got_local.clear()
            ev.notify(U3, range="proc_local", info={"p0": time.perf_counter()}, cache=False)
            if not got_local.wait(5):
                break
    # 2. through the controller, paced
    lat: dict[int, float] = {}
    mine = threading.Event()
    all_paced = threading.Event()

    def on_paced(e: Any, r: Any) -> Any:
        lat[int(e.info["seq"])] = time.time() - e.t
        if e.source == rank:
            mine.set()
        if len(lat) == args.count:
            all_paced.set()
        return ev.COMPLETE
    ev.register(U1, on_paced, name="bench-paced")
    # 3. burst
    count = [0]
    t_last = [0.0]
    done = threading.Event()

    def on_burst(e: Any, r: Any) -> Any:
        count[0] += 1
        if count[0] == args.burst:
            t_last[0] = time.time()
            done.set()
        return ev.COMPLETE
    ev.register(U2, on_burst, name="bench-burst")
    comm.barrier()
    time.sleep(0.3)
    if rank == 0:
        for i in range(args.count):
            mine.clear()
            ev.notify(U1, info={"seq": i}, cache=False)
            mine.wait(5)
            time.sleep(args.pace / 1e3)
    # wait asleep, not in an MPI call: Open MPI busy-polls, and spinning ranks would take the
    # cores the agents need (the figure would measure that, not the relay)
    all_paced.wait(max(10.0, args.count * (args.pace + 20.0) / 1e3))
    time.sleep(0.2)
    comm.barrier()
    t_first = time.time()
    if rank == 0:
        for _ in range(args.burst):
            ev.notify(U2, cache=False)
        t_sent = time.time()
    done.wait(60)
    rows = comm.gather({"rank": rank, "lat": lat, "count": count[0], "t_last": t_last[0]}, root=0)
    t_first = comm.bcast(t_first if rank == 0 else None, root=0)
    if rank != 0:
        return
    pairs = [v for row in rows for v in row["lat"].values()]
    per_event = [max(row["lat"].get(i, float("inf")) for row in rows) for i in range(args.count)]
    missing = sum(1 for x in per_event if x == float("inf"))
    complete = all(row["count"] == args.burst for row in rows)
    span = max(row["t_last"] for row in rows) - t_first if complete else float("nan")
    emit({"ranks": comm.size, "local": _stats(local), "controller": _stats(pairs),
          "controller_all_ranks": _stats([x for x in per_event if x != float("inf")]),
          "missing_events": missing, "burst": args.burst, "burst_complete": complete,
          "burst_span_s": span, "events_per_s": args.burst / span if complete and span > 0 else None,
          "handler_calls_per_s": args.burst * comm.size / span if complete and span > 0 else None,
          "notify_per_s": args.burst / (t_sent - t_first) if t_sent > t_first else None}, args.out)


# --------------------------------------------------------------------------- driver
def run(ranks: int = 8, count: int = 500, pace: float = 2.0, burst: int = 2000, local: int = 1000,
        repeat: int = 1, timeout: float = 120.0, progress: Any = None) -> dict[str, Any]:
    """Launch ``repeat`` jobs under ``planaria run`` and collect their figures."""
    if ranks < 1 or count < 1 or burst < 1 or local < 0 or repeat < 1 or pace < 0:
        raise ValueError("ranks, count, burst and repeat must be >= 1; local and pace >= 0")
    jobs = []
    cmd: list[str] = []
    load0 = loadavg()
    for i in range(repeat):
        if progress:
            progress(f"events: {ranks} ranks, job {i + 1}/{repeat}")
        with tempfile.TemporaryDirectory(prefix="planaria-bench-events-") as tmp:
            out = Path(tmp) / "result.json"
            cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(ranks), "--no-detect",
                   "--timeout", f"{timeout:g}", "--", sys.executable, "-m", "benchmarks.events", "--rank",
                   "--count", str(count), "--pace", f"{pace:g}", "--burst", str(burst), "--local", str(local),
                   "--out", str(out)]
            env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
            env[PLANARIA_HOME] = tmp
            if os.geteuid() == 0:
                env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30, env=env)
            except subprocess.TimeoutExpired:
                raise BenchError(f"events job timed out after {timeout + 30:g} s") from None
            if not out.exists():
                raise BenchError(f"events job gave no result (exit {res.returncode}):\n{res.stderr[-3000:]}")
            jobs.append(json.loads(out.read_text()))
    best = jobs[0] if repeat == 1 else sorted(jobs, key=lambda j: j["controller"]["p50_ms"])[len(jobs) // 2]
    return {"benchmark": "events", "ranks": ranks, "count": count, "pace_ms": pace, "burst": burst,
            "local": local, "repeat": repeat, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
            "loadavg_before": load0, "loadavg_after": loadavg(), "command": command_line(),
            "job_command": " ".join(cmd[:-2] + ["..."]), "result": best, "jobs": jobs,
            "goal": {"controller_p50_ms": best["controller"]["p50_ms"], "limit_ms": GOAL_P50_MS,
                     "met": best["controller"]["p50_ms"] <= GOAL_P50_MS}}


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    r = result["result"]
    t = Table(title=f"Events: notify -> handler, {result['ranks']} ranks, one host ({result['cores']} cores)")
    for col in ("path", "events", "p50", "p99", "max"):
        t.add_column(col, justify="right" if col != "path" else "left")
    for label, key in (("in process (proc_local)", "local"), ("through the controller, per rank", "controller"),
                       ("through the controller, last rank", "controller_all_ranks")):
        s = r[key]
        t.add_row(label, str(s["n"]), f"{s['p50_ms']:.3f} ms", f"{s['p99_ms']:.3f} ms", f"{s['max_ms']:.3f} ms")
    eps = r.get("events_per_s")
    g = result["goal"]
    t.caption = (f"burst of {r['burst']}: {eps:.0f} events/s to all {result['ranks']} ranks "
                 f"({r['handler_calls_per_s']:.0f} handler calls/s); " if eps else "burst incomplete; ") + \
        f"goal p50 <= {GOAL_P50_MS:g} ms through the controller: {'met' if g['met'] else 'MISSED'}"
    return t


def show(result: dict[str, Any], as_json: bool) -> None:
    from benchmarks._launch import show as _show
    _show(result, as_json, table)


def command(
    ranks: int = typer.Option(8, "--ranks", help="Ranks in the job."),
    count: int = typer.Option(500, "--count", help="Paced job-range events through the controller."),
    pace: float = typer.Option(2.0, "--pace", help="Milliseconds between paced events."),
    burst: int = typer.Option(2000, "--burst", help="Events sent back to back for the throughput."),
    local: int = typer.Option(1000, "--local", help="In-process (proc_local) events."),
    repeat: int = typer.Option(1, "--repeat", help="Separate launches; the job with the median p50 is shown."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """notify -> handler latency (p50, p99) in process and through the controller, and events per second.

    Example: python -m benchmarks events --ranks 8 --count 500 --burst 2000
    """

    def compute() -> dict[str, Any]:
        return run(ranks, count, pace, burst, local, repeat, timeout, progress=_launch.progress_printer(json_out))
    raise typer.Exit(_launch.run_and_show("events", compute, show, json_out))


def rank_entry(argv: list[str] | None = None) -> int:
    """One rank of the job (``python -m benchmarks.events --rank ...``, started by the driver under planaria run)."""
    p = _launch.rank_parser("benchmarks.events")
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--pace", type=float, default=2.0)
    p.add_argument("--burst", type=int, default=2000)
    p.add_argument("--local", type=int, default=1000)
    rank_main(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(rank_entry())
