"""Offline diagnosis scaling ([Gao 2024] §3.3, Fig. 7): read a state file of a job hung by one faulty node and name it.

For each job size a synthetic state (``benchmarks.synth``: one host's ranks without state, everyone
else waiting in the world Allreduce or in Recv chains toward it) is written to a temporary file (not timed);
then ``read_state`` + ``diagnose`` are timed together, ``repeat`` times, and the report must name exactly the
faulty host's ranks as the first root cause -- a wrong answer fails the benchmark (exit 1).
"""
from __future__ import annotations

import gc
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import typer

from benchmarks import _launch
from benchmarks._launch import BenchError

GOAL_S = 2.0           # read + analysis at 196,608 processes (32,768 nodes x 6), paper: seconds
DEFAULT_HOSTS = [171, 683, 2731, 10923, 32768]   # ~1k, 4k, 16k, 64k, 196k processes at 6 per host


def parse_hosts(spec: str) -> list[int]:
    """``"171,683"`` -> [171, 683]; every entry >= 2."""
    return _launch.parse_counts(spec, "host", "171,683,2731")


def answer_error(report: Any, truth: dict[str, Any]) -> str | None:
    """What is wrong with a diagnosis ``report`` of a synthetic state whose truth is ``truth`` (its
    ``state["synth"]``: the root-cause ranks, the faulty host, the root cause's site); None when its
    first root cause is exactly the planted one. The benchmark counts a non-None answer as an error."""
    if not report.root_causes:
        return f"no root cause named (verdict {report.verdict})"
    rc = report.root_causes[0]
    if sorted(rc.ranks) != truth["root_ranks"]:
        return f"first root cause is ranks {rc.to_dict()['ranks']} ({rc.kind}), expected {truth['root_ranks']}"
    if truth["scenario"] in ("collective", "p2p-chain") and (rc.kind != "no-state" or rc.host != truth["faulty_host"]):
        return f"first root cause is {rc.kind} on {rc.host}, expected no-state on {truth['faulty_host']}"
    if truth["root_site"] and rc.site != truth["root_site"]:
        return f"root cause site {rc.site!r}, expected {truth['root_site']!r}"
    return None


def run(hosts_list: list[int] | None = None, per_host: int = 6, repeat: int = 3, scenario: str = "collective",
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time read_state + diagnose per job size (median over ``repeat``); BenchError if any answer is wrong."""
    from benchmarks.synth import SCENARIOS, synthetic_state
    from planaria.diagnose.offline import diagnose
    from planaria.diagnose.state import read_state, write_state

    hosts_list = list(DEFAULT_HOSTS if hosts_list is None else hosts_list)
    if scenario not in SCENARIOS or scenario == "no-hang":
        raise ValueError(f"unknown scenario {scenario!r} (collective, p2p-chain, deadlock, spin)")
    if per_host < 1 or repeat < 1:
        raise ValueError("--per-host and --repeat must be >= 1")
    if scenario == "deadlock" and per_host < 2:
        raise ValueError("scenario deadlock needs --per-host >= 2")
    rows, wrong = [], []
    with tempfile.TemporaryDirectory(prefix="planaria-bench-diagnose-") as tmp:
        for hosts in hosts_list:
            procs = hosts * per_host
            if progress:
                progress(f"diagnose: {procs} processes ({hosts} hosts x {per_host}): writing the state file")
            state = synthetic_state(hosts, per_host, scenario=scenario, seed=hosts)
            truth = state["synth"]
            path = Path(tmp) / f"job-{procs}.state"
            t0 = time.perf_counter()
            write_state(path, state)
            write_s = time.perf_counter() - t0
            del state
            reads, analyses, totals, errors = [], [], [], []
            for _ in range(repeat):
                gc.collect()
                t0 = time.perf_counter()
                st = read_state(path)
                t1 = time.perf_counter()
                report = diagnose(st)
                t2 = time.perf_counter()
                reads.append(t1 - t0)
                analyses.append(t2 - t1)
                totals.append(t2 - t0)
                err = answer_error(report, truth)
                if err:
                    errors.append(err)
                del st
            med = statistics.median(totals)
            row = {"hosts": hosts, "processes": procs, "file_mb": round(path.stat().st_size / 1e6, 2),
                   "write_s": round(write_s, 4),
                   "read_s_median": round(statistics.median(reads), 4),
                   "analysis_s_median": round(statistics.median(analyses), 4),
                   "total_s_median": round(med, 4), "total_s_max": round(max(totals), 4),
                   "us_per_process": round(med / procs * 1e6, 3),
                   "root_cause": report.root_causes[0].to_dict()["ranks"] if report.root_causes else None,
                   "root_host": report.root_causes[0].host if report.root_causes else None,
                   "verdict": report.verdict, "correct": not errors, "error": errors[0] if errors else None}
            rows.append(row)
            if errors:
                wrong.append(f"{procs} processes: {errors[0]}")
            if progress:
                progress(f"diagnose: {procs} processes: read {row['read_s_median']:.3f} s + analysis "
                         f"{row['analysis_s_median']:.3f} s = {med:.3f} s ({row['us_per_process']:.2f} us/process)"
                         f"{'' if not errors else '  WRONG: ' + errors[0]}")
            os.unlink(path)
    big = max(rows, key=lambda r: r["processes"])
    result = {"benchmark": "diagnose", "scenario": scenario, "per_host": per_host, "repeat": repeat,
              "cores": os.cpu_count(), "loadavg": _launch.loadavg(), "command": _launch.command_line(),
              "rows": rows,
              "goal": {"limit_s": GOAL_S, "processes": big["processes"], "total_s": big["total_s_median"],
                       "met": big["total_s_median"] <= GOAL_S}}
    if wrong:
        raise BenchError("wrong diagnosis: " + "; ".join(wrong))
    return result


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    t = Table(title=f"Offline diagnosis ({result['scenario']}, one faulty host, {result['per_host']} processes/host): "
                    f"read_state + diagnose, median of {result['repeat']}, {result['cores']} cores")
    for col in ("processes", "hosts", "file MB", "read s", "analysis s", "total s", "us/process", "root cause",
                "correct"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        t.add_row(str(r["processes"]), str(r["hosts"]), f"{r['file_mb']:.1f}", f"{r['read_s_median']:.3f}",
                  f"{r['analysis_s_median']:.3f}", f"{r['total_s_median']:.3f}", f"{r['us_per_process']:.2f}",
                  f"{r['root_cause']} on {r['root_host']}", "yes" if r["correct"] else "NO")
    g = result["goal"]
    t.caption = (f"goal: <= {g['limit_s']:.0f} s at {g['processes']} processes: {g['total_s']:.3f} s, "
                 f"{'met' if g['met'] else 'MISSED'}; load average {result['loadavg']}")
    return t


def show(result: dict[str, Any], as_json: bool) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=120)


def command(
    hosts: str = typer.Option("171,683,2731,10923,32768", "--hosts",
                              help="Host counts, comma-separated (x --per-host processes each; one host is faulty)."),
    per_host: int = typer.Option(6, "--per-host", help="Processes per host."),
    repeat: int = typer.Option(3, "--repeat", help="Timed runs per size; the median is reported."),
    scenario: str = typer.Option("collective", "--scenario",
                                 help="collective (faulty host's ranks dead, everyone in Allreduce), p2p-chain, "
                                      "deadlock or spin."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Offline diagnosis time (read the state file + analyse) per job size, and whether it names the faulty host.

    No MPI job: synthetic state files of hung jobs are written to a temporary directory (not timed).
    Exit status 1 if any report names the wrong ranks.

    Example: python -m benchmarks diagnose --hosts 171,2731,32768 --repeat 3
    """

    def compute() -> dict[str, Any]:
        return run(parse_hosts(hosts), per_host, repeat, scenario, progress=_launch.progress_printer(json_out))
    raise typer.Exit(_launch.run_and_show("diagnose", compute, show, json_out))
