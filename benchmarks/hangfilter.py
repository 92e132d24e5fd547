"""Grouping speed of the stack-sampling hang filter ([Gao 2024], section 3.4, Fig. 9 and 10).

For each (threads n, classes M): synthetic samples are built the way collection delivers them, one int32
stack-id array per sampling round (``layout="rounds"``; "F"/"C" give a 2-D array in that order). Hung
threads keep one of M stack ids in every round (spread over an intern table of M + ``pool`` stacks); the
others take a different id each round. Threads belong to ranks in blocks of ``threads_per_rank`` (65 = one
SW26010-Pro core group: a management core and 64 compute cores). Generation is not timed.

Timed: one call of ``planaria.diagnose.hangfilter.group(samples, thread_rank)`` (stable-thread mask,
classes, per-class rank sets), after ``warmup`` untimed calls; median and min over ``repeat`` calls.
``stable_s_min`` is the mask alone (``stable_threads``), for the breakdown. Each result is checked against
the generated truth. The paper processes 12,779,520 threads with M = 128 in 0.7 s; the goal here is 0.35 s.
"""
from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import typer

from benchmarks import _launch
from benchmarks._launch import command_line, loadavg, median
from planaria.diagnose.hangfilter import group, samples_needed, stable_threads

PAPER_S = 0.7
GOAL_S = 0.35
GOAL_THREADS = 12_779_520
GOAL_CLASSES = 128
LAYOUTS = ("rounds", "F", "C")


def parse_counts(spec: str | int | Sequence[int], what: str, minimum: int = 1) -> list[int]:
    """``"399360,1597440"`` (or an int, or a list) -> [399360, 1597440]; every entry >= minimum."""
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        vals = [int(spec)]
    elif isinstance(spec, str):
        try:
            vals = [int(x) for x in spec.replace(" ", "").split(",") if x]
        except ValueError:
            raise ValueError(f"bad {what} list {spec!r} (expected integers, e.g. 399360,12779520)") from None
    else:
        vals = [int(x) for x in spec]
    if not vals:
        raise ValueError(f"empty {what} list")
    for v in vals:
        if v < minimum:
            raise ValueError(f"bad {what} {v}: must be >= {minimum}")
    return vals


def synth(threads: int, samples: int, classes: int, hung_fraction: float = 1.0, threads_per_rank: int = 65,
          pool: int = 1024, seed: int = 0, layout: str = "rounds") -> tuple[Any, np.ndarray, dict[str, Any]]:
    """Synthetic samples, thread ranks, and the truth (hung thread indices, their class, the class stack ids)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    if not 0 < hung_fraction <= 1:
        raise ValueError(f"hung fraction must be in (0, 1], got {hung_fraction}")
    if pool < 2:
        raise ValueError(f"pool must be >= 2 (running threads change stack every round), got {pool}")
    rng = np.random.default_rng(seed)
    n, m = threads, classes
    hung_idx = None if hung_fraction == 1 else np.flatnonzero(rng.random(n) < hung_fraction)
    n_hung = n if hung_idx is None else int(hung_idx.size)
    if n_hung < m:
        raise ValueError(f"{n_hung} hung threads cannot fill {m} classes (raise --threads or the hung fraction)")
    table = m + pool
    hung_ids = np.sort(rng.choice(table, m, replace=False)).astype(np.int32)
    run_ids = np.setdiff1d(np.arange(table, dtype=np.int32), hung_ids)
    cls = rng.integers(0, m, n_hung).astype(np.int32)
    cls[:m] = np.arange(m, dtype=np.int32)       # every class is present
    rng.shuffle(cls)
    hung_col = hung_ids[cls]
    if hung_idx is not None:
        run_idx = np.setdiff1d(np.arange(n), hung_idx)
        offset = rng.integers(0, pool, run_idx.size)
    if layout == "rounds":
        cols = [np.empty(n, dtype=np.int32) for _ in range(samples)]
        data: Any = cols
    else:
        data = np.empty((n, samples), dtype=np.int32, order=layout)
        cols = [data[:, j] for j in range(samples)]
    for j, col in enumerate(cols):
        if hung_idx is None:
            col[:] = hung_col
        else:
            col[hung_idx] = hung_col
            col[run_idx] = run_ids[(offset + j) % pool]
    thread_rank = (np.arange(n, dtype=np.int64) // threads_per_rank).astype(np.int32)
    truth = {"hung_idx": hung_idx, "cls": cls, "hung_ids": hung_ids, "n_hung": n_hung}
    return data, thread_rank, truth


def check_grouping(out: list[Any], thread_rank: np.ndarray, truth: dict[str, Any]) -> None:
    """Raise AssertionError unless ``group()``'s classes ``out`` (smallest first) of the threads that ``synth``
    made (``thread_rank``, ``truth``) are exactly the generated classes, with the right counts, and the
    smallest class has the right ranks. The benchmark checks every timed call's answer with it."""
    ids, cls = truth["hung_ids"], truth["cls"]
    want = np.bincount(cls, minlength=ids.size)
    got = {c.stack_id: c.count for c in out}
    if got != {int(ids[i]): int(want[i]) for i in range(ids.size)}:
        raise AssertionError("hangfilter benchmark: group() did not recover the generated classes")
    first = out[0]
    k = int(np.searchsorted(ids, first.stack_id))
    members = np.flatnonzero(cls == k)
    hung_idx = truth["hung_idx"]
    ranks = np.unique(thread_rank[members if hung_idx is None else hung_idx[members]])
    if not np.array_equal(first.ranks, ranks):
        raise AssertionError("hangfilter benchmark: group() returned wrong ranks for a class")


def run(threads: int | Sequence[int] = GOAL_THREADS, samples: int = 4, classes: int | Sequence[int] = GOAL_CLASSES,
        repeat: int = 5, hung_fraction: float = 1.0, threads_per_rank: int = 65, layout: str = "rounds",
        warmup: int = 1, seed: int = 0, progress: Any = None) -> dict[str, Any]:
    """Time ``group()`` for every (threads, classes) pair; median and min over ``repeat`` calls, in seconds."""
    thread_list = parse_counts(threads, "threads")
    class_list = parse_counts(classes, "classes")
    for name, v, lo in (("samples", samples, 1), ("repeat", repeat, 1), ("threads per rank", threads_per_rank, 1),
                        ("warmup", warmup, 0)):
        if v < lo:
            raise ValueError(f"{name} must be >= {lo}, got {v}")
    load0 = loadavg()
    rows = []
    for n in thread_list:
        for m in class_list:
            if progress:
                progress(f"hangfilter: {n} threads, {m} classes, {samples} samples: generating")
            t0 = time.perf_counter()
            data, thread_rank, truth = synth(n, samples, m, hung_fraction, threads_per_rank, seed=seed,
                                             layout=layout)
            gen_s = time.perf_counter() - t0
            for _ in range(warmup):
                group(data, thread_rank)
            times, mask_times = [], []
            for _ in range(repeat):
                t0 = time.perf_counter()
                out = group(data, thread_rank)
                times.append(time.perf_counter() - t0)
                check_grouping(out, thread_rank, truth)
                del out
                t0 = time.perf_counter()
                stable_threads(data)
                mask_times.append(time.perf_counter() - t0)
            row: dict[str, Any] = {
                "threads": n, "ranks": -(-n // threads_per_rank), "classes": m, "samples": samples,
                "samples_needed": samples_needed(n), "hung": truth["n_hung"], "layout": layout,
                "group_s_median": median(times), "group_s_min": min(times), "group_s": times,
                "stable_s_min": min(mask_times), "generate_s": gen_s,
            }
            if n >= GOAL_THREADS and m >= GOAL_CLASSES:
                row["goal_s"] = GOAL_S
                row["goal_met"] = row["group_s_median"] <= GOAL_S
            rows.append(row)
            if progress:
                progress(f"hangfilter: {n} threads, {m} classes: median {row['group_s_median']:.3f} s")
            del data, thread_rank, truth
    return {"benchmark": "hangfilter", "samples": samples, "repeat": repeat, "warmup": warmup,
            "hung_fraction": hung_fraction, "threads_per_rank": threads_per_rank, "layout": layout,
            "paper_s": PAPER_S, "goal_s": GOAL_S, "numpy": np.__version__, "python": platform.python_version(),
            "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "loadavg_before": load0,
            "loadavg_after": loadavg(), "command": command_line(), "rows": rows}


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    t = Table(title=f"Hang filter grouping ({result['samples']} samples, layout {result['layout']}, "
                    f"hung fraction {result['hung_fraction']}, median/min of {result['repeat']}; "
                    f"{result['cores']} cores; load {result['loadavg_before'][0]:.1f}->"
                    f"{result['loadavg_after'][0]:.1f})")
    for col in ("threads", "ranks", "M", "s needed", "stable", "group med", "group min", "mask min", "goal"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        goal = ""
        if "goal_met" in r:
            goal = f"{'met' if r['goal_met'] else 'MISSED'} (<= {r['goal_s'] * 1e3:.0f} ms)"
        t.add_row(f"{r['threads']:,}", f"{r['ranks']:,}", str(r["classes"]), str(r["samples_needed"]),
                  f"{r['hung']:,}", _ms(r["group_s_median"]), _ms(r["group_s_min"]), _ms(r["stable_s_min"]), goal)
    t.caption = (f"group = stable mask + classes + per-class rank sets (data generation not timed); "
                 f"s needed = samples for < 1 expected false positive with 250-instruction loops; "
                 f"paper: 12,779,520 threads, M = 128 in {result['paper_s']} s")
    return t


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def show(result: dict[str, Any], as_json: bool) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=120)


def command(
    threads: str = typer.Option("12779520", "--threads",
                                help="Thread counts, comma-separated (e.g. 399360,1597440,6389760,12779520)."),
    classes: str = typer.Option("128", "--classes", help="Numbers of hang classes M, comma-separated (e.g. 2,8,32,128)."),
    samples: int = typer.Option(4, "--samples", help="Sampling rounds s per thread."),
    repeat: int = typer.Option(5, "--repeat", help="Timed group() calls per row (median and min reported)."),
    warmup: int = typer.Option(1, "--warmup", help="Untimed group() calls per row before timing."),
    hung_fraction: float = typer.Option(1.0, "--hung-fraction", help="Fraction of threads hung in one of M classes; "
                                        "the rest change stack every round."),
    layout: str = typer.Option("rounds", "--layout", help="Samples layout: rounds (one array per round), F or C (2-D)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Time of the stack-sampling hang filter's grouping (stable threads -> classes) on synthetic samples.

    Runs in this process, no MPI. Example: python -m benchmarks hangfilter --threads 399360,12779520 --classes 2,128
    """

    def compute() -> dict[str, Any]:
        return run(threads, samples, classes, repeat, hung_fraction, layout=layout, warmup=warmup,
                      progress=_launch.progress_printer(json_out))
    raise typer.Exit(_launch.run_and_show("hangfilter", compute, show, json_out))
