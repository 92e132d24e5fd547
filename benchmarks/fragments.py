"""Fragmented programs at scale: speedup and efficiency against the ideal makespan, balancer on/off, Dask.

Two graphs. *irregular*: layers of tasks with skewed (log-normal) durations, each task after two
random tasks of the layer before, all CFs created on worker 0; durations are real ``time.sleep``
calls, so on a 2-core machine shared by 9 processes the figure measures scheduling, not
arithmetic. *matmul*: block matrix multiplication with real numpy work (one BLAS thread per rank).
Modes: ``balancer`` (all CFs created on worker 0, the §6 balancer on one extra rank moves them),
``balancer-donor`` (the same with ``receiver_cap="donor"``),
``static`` (round-robin placement ``.at(i % P)``, no balancer), ``dask`` (Dask distributed
LocalCluster, P single-threaded worker processes, the same graph and durations submitted from one
client). Ideal makespan = max(total work / P, critical path): from the given durations for the
irregular graph; for matmul from each kind of block task timed alone in one process with one BLAS
thread before the runs (the product is checked against ``A @ B`` after the clock stops). Also:
tracing overhead in time and peak memory (trace on vs off, same job otherwise).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np
import typer

import planaria.fragments as fr
from benchmarks import _launch

MODULE = "benchmarks.fragments"
PRIORITIES = ("none", "descendants")
RESULTS: list[Any] = []


# ------------------------------------------------------------------------------------- graphs (pure)
def irregular_graph(tasks: int = 96, layers: int = 4, mean_s: float = 0.04, sigma: float = 1.0,
                    seed: int = 1) -> dict[str, Any]:
    """Layered DAG: ``tasks`` tasks in ``layers`` layers, log-normal durations with mean ``mean_s``."""
    rng = np.random.default_rng(seed)
    dur = rng.lognormal(0.0, sigma, tasks)
    dur = dur / dur.mean() * mean_s
    per = max(1, tasks // layers)
    deps: list[list[int]] = []
    for i in range(tasks):
        layer = min(i // per, layers - 1)
        if layer == 0:
            deps.append([])
        else:
            lo, hi = (layer - 1) * per, min(layer * per, tasks)
            deps.append(sorted({int(x) for x in rng.integers(lo, hi, 2)}))
    return {"dur": [round(float(d), 6) for d in dur], "deps": deps}


def critical_path(dur: list[float], deps: list[list[int]]) -> float:
    """Longest dependency chain (deps point to lower indices)."""
    finish: list[float] = []
    for i, d in enumerate(dur):
        finish.append(d + max((finish[j] for j in deps[i]), default=0.0))
    return max(finish) if finish else 0.0


def descendants(deps: list[list[int]]) -> list[int]:
    """Per task, how many tasks depend on it directly or not: a priority a program that builds the
    graph knows without knowing durations (tasks that unlock more work start first)."""
    n = len(deps)
    children: list[list[int]] = [[] for _ in range(n)]
    for i, ds in enumerate(deps):
        for j in ds:
            children[j].append(i)
    below: list[int] = [0] * n        # bitmask of the tasks below each one
    for i in range(n - 1, -1, -1):
        for c in children[i]:
            below[i] |= below[c] | (1 << c)
    return [b.bit_count() for b in below]


def ideal_makespan(dur: list[float], deps: list[list[int]], workers: int) -> float:
    """A lower bound on any schedule's makespan: max(total work / P, critical path)."""
    return max(sum(dur) / workers, critical_path(dur, deps))


def matmul_graph(nb: int) -> dict[str, Any]:
    """The block product's tasks in the programs' creation order: each one's kind and dependencies."""
    kinds: list[str] = []
    deps: list[list[int]] = []
    idx: dict[tuple[Any, ...], int] = {}

    def add(key: tuple[Any, ...], kind: str, after: list[tuple[Any, ...]]) -> None:
        idx[key] = len(kinds)
        kinds.append(kind)
        deps.append([idx[d] for d in after])
    for i in range(nb):
        for k in range(nb):
            add(("A", i, k), "make", [])
            add(("B", i, k), "make", [])
    for i in range(nb):
        for j in range(nb):
            for k in range(nb):
                add(("P", i, j, k), "mul", [("A", i, k), ("B", k, j)])
            add(("C", i, j), "sum", [("P", i, j, k) for k in range(nb)])
    add(("collect",), "collect", [("C", i, j) for i in range(nb) for j in range(nb)])
    return {"kinds": kinds, "deps": deps}


def seeded_block(seed: int, bs: int) -> np.ndarray:
    """The ``bs`` x ``bs`` block of standard normal numbers that ``seed`` makes (the matmul graph's A and B blocks:
    A[i][k] from seed ``1000 + i * nb + k``, B[k][j] from ``2000 + k * nb + j``), in every mode alike."""
    return np.random.default_rng(seed).standard_normal((bs, bs))


def _block_sum(parts: list[np.ndarray]) -> np.ndarray:
    return np.sum(parts, axis=0)


def matmul_error(blocks: list[np.ndarray], nb: int, bs: int) -> float:
    """Largest difference between the blocks of C and ``A @ B`` built from the same seeds."""
    a = np.block([[seeded_block(1000 + i * nb + k, bs) for k in range(nb)] for i in range(nb)])
    b = np.block([[seeded_block(2000 + k * nb + j, bs) for j in range(nb)] for k in range(nb)])
    c = np.block([[blocks[i * nb + j] for j in range(nb)] for i in range(nb)])
    return float(np.max(np.abs(c - a @ b)))


def calibrate_matmul(nb: int, bs: int, reps: int = 7) -> dict[str, float]:
    """Seconds each kind of block task takes alone in this process (median of ``reps``)."""
    def timed(f: Callable[[], Any]) -> float:
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))
    a, b = seeded_block(1, bs), seeded_block(2, bs)
    parts = [a @ b for _ in range(nb)]
    out: list[Any] = []
    return {"make": timed(lambda: seeded_block(3, bs)), "mul": timed(lambda: a @ b),
            "sum": timed(lambda: _block_sum(parts)), "collect": timed(lambda: out.append(parts))}


def list_schedule(dur: list[float], deps: list[list[int]], workers: int, priority: str = "fifo") -> float:
    """Makespan of a zero-overhead greedy list schedule (a free worker takes a ready task at once).

    ``fifo``: tasks in the order they became ready (what a runtime that knows no durations can do);
    ``critical``: the ready task with the longest path to the end first (an oracle knowing durations);
    ``descendants``: the ready task with the most tasks depending on it first (``descendants``), ties in
    the order they became ready (what the runtime does with ``--priority descendants``).
    """
    import heapq
    n = len(dur)
    children: list[list[int]] = [[] for _ in range(n)]
    for i, ds in enumerate(deps):
        for j in ds:
            children[j].append(i)
    bottom = [0.0] * n
    for i in range(n - 1, -1, -1):
        bottom[i] = dur[i] + max((bottom[c] for c in children[i]), default=0.0)
    below = descendants(deps) if priority == "descendants" else []
    waiting = [len(set(ds)) for ds in deps]
    ready: list[tuple[Any, int]] = []
    seq = 0

    def push(i: int) -> None:
        nonlocal seq
        key = (-bottom[i], i) if priority == "critical" else (-below[i], seq) if priority == "descendants" else (seq, i)
        heapq.heappush(ready, (key, i))
        seq += 1
    for i in range(n):
        if waiting[i] == 0:
            push(i)
    running: list[tuple[float, int]] = []
    now, free = 0.0, workers
    while ready or running:
        while ready and free:
            _k, i = heapq.heappop(ready)
            heapq.heappush(running, (now + dur[i], i))
            free -= 1
        now, i = heapq.heappop(running)
        free += 1
        for c in children[i]:
            waiting[c] -= 1
            if waiting[c] == 0:
                push(c)
    return now


# ---------------------------------------------------------------------------- the fragment programs
@fr.atomic
def task(out: fr.Name, seconds: float, deps: list):
    time.sleep(seconds)
    out.set(seconds)


@fr.atomic
def gather(vals: list):
    RESULTS.append(float(sum(vals)))


@fr.sub
def graph_main(dur: list, deps: list, workers: int, static: bool, prios: list | None = None):
    r = fr.df("r")
    for i, d in enumerate(dur):
        cf = task(r[i], d, [r[j] for j in deps[i]])
        if static:
            cf.at(i % workers)
        if prios:
            cf.priority(prios[i])
    gather([r[i] for i in range(len(dur))]).at(0)


@fr.atomic
def make_block(out: fr.Name, seed: int, bs: int):
    out.set(seeded_block(seed, bs))


@fr.atomic
def block_mul(out: fr.Name, a: np.ndarray, b: np.ndarray):
    out.set(a @ b)


@fr.atomic
def block_sum(out: fr.Name, parts: list):
    out.set(_block_sum(parts))


@fr.atomic
def collect_matmul(blocks: list):
    RESULTS.append(blocks)             # checked against A @ B after the clock stops


@fr.sub
def matmul_main(nb: int, bs: int, workers: int, static: bool):
    A, B, P, C = fr.dfs("A B P C")

    def at(cf: Any, i: int) -> None:
        if static:
            cf.at(i % workers)
    for i in range(nb):
        for k in range(nb):
            at(make_block(A[i][k], 1000 + i * nb + k, bs), i * nb + k)
            at(make_block(B[i][k], 2000 + i * nb + k, bs), i * nb + k + 1)
    for i in range(nb):
        for j in range(nb):
            for k in range(nb):
                at(block_mul(P[i][j][k], A[i][k], B[k][j]), i * nb + j)
            at(block_sum(C[i][j], [P[i][j][k] for k in range(nb)]), i * nb + j)
    collect_matmul([C[i][j] for i in range(nb) for j in range(nb)]).at(0)


# ------------------------------------------------------------------------------------------ rank side
def _peak_rss_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def local_main(args: argparse.Namespace) -> None:
    """One process, no MPI: the irregular graph on ``threads`` pool threads (the tracing cost per CF without MPI noise)."""
    g = irregular_graph(args.tasks, args.layers, args.mean_ms / 1000.0, args.sigma, args.seed)
    trace_dir = os.path.join(args.scratch, "trace") if args.trace else None
    prios = descendants(g["deps"]) if args.priority == "descendants" else None
    t0 = time.perf_counter()
    res = fr.run(graph_main, g["dur"], g["deps"], 1, False, prios, comm=None, threads=args.threads, trace_dir=trace_dir,
                 trace=args.trace, timeout=args.timeout * 0.8, report=False)
    wall = time.perf_counter() - t0
    tb = sum(os.path.getsize(os.path.join(trace_dir, f)) for f in os.listdir(trace_dir)) if trace_dir else 0
    _launch.emit({"wall_s": wall, "status": res.status, "cfs": res.cfs_done, "peak_rss_mb": [_peak_rss_mb()],
                  "check": list(RESULTS), "trace_bytes": tb}, args.out)


def rank_main(args: argparse.Namespace) -> None:
    import planaria as pl
    comm = pl.world()
    balancer = args.mode.startswith("balancer")
    workers = comm.size - 1 if balancer else comm.size
    static = args.mode == "static"
    trace_dir = os.path.join(args.scratch, "trace") if args.trace else None
    bconf = fr.BalancerConfig(args.jobs_left, args.ratio, "donor" if args.mode == "balancer-donor" else "mean") \
        if balancer else None
    if args.graph == "irregular":
        # the graph is the benchmark's input, as for Dask: built before the clock starts, not by fr.run
        g = irregular_graph(args.tasks, args.layers, args.mean_ms / 1000.0, args.sigma, args.seed)
        prios = descendants(g["deps"]) if args.priority == "descendants" else None
    comm.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    if args.graph == "irregular":
        res = fr.run(graph_main, g["dur"], g["deps"], workers, static, prios, comm=comm, threads=1, trace_dir=trace_dir,
                     trace=args.trace, balancer=bconf, timeout=args.timeout * 0.8, report=False)
    else:
        res = fr.run(matmul_main, args.nb, args.bs, workers, static, comm=comm, threads=1, trace_dir=trace_dir,
                     trace=args.trace, balancer=bconf, timeout=args.timeout * 0.8, report=False)
    wall = time.perf_counter() - t0
    cpu = comm.allgather(time.process_time() - c0)     # every thread of the rank, during fr.run
    if args.graph == "matmul":
        RESULTS[:] = [matmul_error(blocks, args.nb, args.bs) for blocks in RESULTS]
    rss = comm.allgather(_peak_rss_mb())
    checks = comm.allgather(list(RESULTS))
    trace_bytes = 0
    if trace_dir and comm.rank == 0:
        trace_bytes = sum(os.path.getsize(os.path.join(trace_dir, f)) for f in os.listdir(trace_dir))
    if comm.rank == 0:
        _launch.emit({"wall_s": wall, "status": res.status, "cfs": res.cfs_done, "moves": res.balancer_moves,
                      "cpu_s": cpu, "peak_rss_mb": rss, "check": [c for cs in checks for c in cs], "trace_bytes": trace_bytes},
                     args.out)


# ---------------------------------------------------------------------------------------- driver side
_ONE_BLAS_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _one_process(args: list[str], env: dict[str, str] | None, timeout: float, what: str) -> dict[str, Any]:
    """Run this module in one process without MPI and return its ``RESULT`` (bounded by ``timeout``)."""
    import subprocess
    res = subprocess.run([sys.executable, "-m", MODULE, *args], capture_output=True, text=True, timeout=timeout,
                         env=_launch.job_env(env))
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith(_launch.RESULT_PREFIX)), None)
    if line is None:
        raise _launch.BenchError(f"{what} gave no result: {res.stderr[-2000:]}")
    return json.loads(line[len(_launch.RESULT_PREFIX):])


def _calibration(nb: int, bs: int, timeout: float) -> dict[str, float]:
    """Each kind of block task timed alone, in a fresh process with one BLAS thread as the ranks have."""
    return _one_process(["--calibrate", "--nb", str(nb), "--bs", str(bs)], _ONE_BLAS_THREAD, timeout,
                        "matmul calibration")


def _job(workers: int, mode: str, graph: str, opts: dict[str, Any], trace: bool, timeout: float) -> dict[str, Any]:
    nprocs = workers + (1 if mode.startswith("balancer") else 0)
    argv = ["--graph", graph, "--mode", mode, "--timeout", str(timeout)] + (["--trace"] if trace else [])
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    la = _launch.launch(nprocs, MODULE, argv, ft=True, timeout=timeout, env=_ONE_BLAS_THREAD)
    r = dict(la.result)
    if r.get("status") != "finished":
        raise _launch.BenchError(f"{graph}/{mode}/{workers}: run ended {r.get('status')}")
    return r


def _dask_irregular(g: dict[str, Any], workers: int, priority: str = "none") -> float:
    """Makespan of the same DAG and sleeps on a Dask LocalCluster (P single-threaded worker processes),
    with the same priorities as the fragments (``submit(..., priority=)``) under ``--priority descendants``."""
    import logging

    from dask.distributed import Client, LocalCluster
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        client.run(lambda: None)              # every worker is up before the clock starts
        t0 = time.perf_counter()
        futs: list[Any] = []
        prios = descendants(g["deps"]) if priority == "descendants" else [0] * len(g["dur"])
        for i, d in enumerate(g["dur"]):
            futs.append(client.submit(_dask_task, d, *[futs[j] for j in g["deps"][i]], pure=False, key=f"t{i}",
                                      priority=prios[i]))
        total = client.submit(_dask_sum, futs, pure=False).result()
        wall = time.perf_counter() - t0
    if abs(total - sum(g["dur"])) > 1e-6:
        raise _launch.BenchError("dask run returned a wrong sum")
    return wall


def _dask_matmul(nb: int, bs: int, workers: int) -> tuple[float, float]:
    """Makespan of the same block product on a Dask LocalCluster (P single-threaded worker processes,
    one BLAS thread each: Dask's default), and the product's largest error, checked after the clock."""
    import logging
    import operator

    from dask.distributed import Client, LocalCluster
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        client.run(lambda: None)              # every worker is up before the clock starts
        t0 = time.perf_counter()
        a, b = {}, {}
        for i in range(nb):
            for k in range(nb):
                a[i, k] = client.submit(seeded_block, 1000 + i * nb + k, bs, key=f"A-{i}-{k}")
                b[i, k] = client.submit(seeded_block, 2000 + i * nb + k, bs, key=f"B-{i}-{k}")
        c = []
        for i in range(nb):
            for j in range(nb):
                parts = [client.submit(operator.matmul, a[i, k], b[k, j], key=f"P-{i}-{j}-{k}") for k in range(nb)]
                c.append(client.submit(_block_sum, parts, key=f"C-{i}-{j}"))
        blocks = client.submit(_dask_collect, c, key="collect").result()
        wall = time.perf_counter() - t0
    err = matmul_error(blocks, nb, bs)
    if not err < 1e-6:
        raise _launch.BenchError(f"dask block product is wrong (max error {err:g})")
    return wall, err


def _dask_collect(blocks: list[np.ndarray]) -> list[np.ndarray]:
    return list(blocks)


def _dask_task(seconds: float, *deps: float) -> float:
    time.sleep(seconds)
    return seconds


def _dask_sum(vals: list[float]) -> float:
    return float(sum(vals))


def run(workers: list[int], graphs: list[str], modes: list[str], repeat: int = 2, tasks: int = 96, layers: int = 4,
        mean_ms: float = 40.0, sigma: float = 1.0, seed: int = 1, nb: int = 4, bs: int = 300,
        jobs_left: int = 2, ratio: float = 0.2, overhead_workers: int = 4, overhead_repeat: int = 3,
        timeout: float = 180.0, progress: Callable[[str], None] | None = None,
        priority: str = "none") -> dict[str, Any]:
    """Every (graph, mode, P) cell: median wall of ``repeat`` launches, speedup vs 1 worker, efficiency vs ideal.

    ``priority="descendants"``: every task of the irregular graph gets its number of descendants as
    its priority, in the fragments and in Dask alike."""
    say = progress or (lambda _m: None)
    _check(graphs, modes, priority, nb, bs)
    gopts = {"irregular": {"tasks": tasks, "layers": layers, "mean_ms": mean_ms, "sigma": sigma, "seed": seed,
                           "priority": priority},
             "matmul": {"nb": nb, "bs": bs}}
    ig = irregular_graph(tasks, layers, mean_ms / 1000.0, sigma, seed)
    mg: dict[str, Any] = {"nb": nb, "bs": bs}
    mdur: list[float] = []                     # matmul: each task's duration alone, and its dependencies
    mdeps: list[list[int]] = []
    if "matmul" in graphs:
        say(f"matmul: timing each kind of block task alone ({nb} x {nb} blocks of {bs} x {bs})")
        cal = _calibration(nb, bs, timeout)
        g = matmul_graph(nb)
        mdur, mdeps = [cal[k] for k in g["kinds"]], g["deps"]
        mg.update(task_s=cal, tasks=len(mdur), total_work_s=sum(mdur), critical_path_s=critical_path(mdur, mdeps))
    rows: list[dict[str, Any]] = []
    for graph in graphs:
        opts = {**gopts[graph], "jobs_left": jobs_left, "ratio": ratio}
        for mode in modes:
            for p in workers:
                row = _cell(graph, mode, p, repeat, opts, ig, nb, bs, priority, timeout, say)
                if graph == "irregular":
                    row["ideal_s"] = ideal_makespan(ig["dur"], ig["deps"], p)
                    row["efficiency"] = row["ideal_s"] / row["wall_s"]
                    row["greedy_fifo_s"] = list_schedule(ig["dur"], ig["deps"], p, "fifo")
                    row["greedy_critical_s"] = list_schedule(ig["dur"], ig["deps"], p, "critical")
                    row["greedy_descendants_s"] = list_schedule(ig["dur"], ig["deps"], p, "descendants")
                else:
                    row["ideal_s"] = ideal_makespan(mdur, mdeps, p)
                    row["efficiency"] = row["ideal_s"] / row["wall_s"]
                rows.append(row)
    for row in rows:   # speedup against the same graph and mode on 1 worker (static for the balancer)
        base = next((r for r in rows if r["graph"] == row["graph"] and r["workers"] == 1
                     and r["mode"] == row["mode"]), None)
        row["speedup"] = base["wall_s"] / row["wall_s"] if base else None
    overhead = None
    if overhead_repeat > 0 and "irregular" in graphs:
        overhead = tracing_overhead(overhead_workers, overhead_repeat, gopts["irregular"], jobs_left, ratio, timeout, say)
    return {"bench": "fragments", "command": _launch.command_line(), "loadavg": _launch.loadavg(),
            "cpus": os.cpu_count(), "graph_irregular": {"tasks": tasks, "layers": layers, "mean_ms": mean_ms,
                                                        "sigma": sigma, "seed": seed, "priority": priority,
                                                        "total_work_s": sum(ig["dur"]),
                                                        "critical_path_s": critical_path(ig["dur"], ig["deps"])},
            "graph_matmul": mg, "rows": rows, "tracing": overhead}


def _check(graphs: list[str], modes: list[str], priority: str, nb: int, bs: int) -> None:
    """ValueError naming a wrong mode, graph, priority or matmul size."""
    for m in modes:
        if m not in ("balancer", "balancer-donor", "static", "dask"):
            raise ValueError(f"unknown mode {m!r} (balancer, balancer-donor, static, dask)")
    for g in graphs:
        if g not in ("irregular", "matmul"):
            raise ValueError(f"unknown graph {g!r} (irregular, matmul)")
    if priority not in PRIORITIES:
        raise ValueError(f"unknown priority {priority!r} ({', '.join(PRIORITIES)})")
    if "matmul" in graphs and (nb < 1 or bs < 1):
        raise ValueError(f"matmul needs --nb >= 1 and --bs >= 1, not {nb} and {bs}")


def _cell(graph: str, mode: str, p: int, repeat: int, opts: dict[str, Any], ig: dict[str, Any], nb: int, bs: int,
          priority: str, timeout: float, say: Callable[[str], None]) -> dict[str, Any]:
    """One (graph, mode, P) cell's ``repeat`` runs: the median wall and what the runs report."""
    m = "static" if (mode.startswith("balancer") and p < 2) else mode
    walls, cpus, extra = [], [], {}
    for rep in range(repeat):
        say(f"{graph} {m} P={p} run {rep + 1}/{repeat}")
        if m == "dask" and graph == "matmul":
            wall, err = _dask_matmul(nb, bs, p)
            walls.append(wall)
            extra = {"check": [err]}
        elif m == "dask":
            walls.append(_dask_irregular(ig, p, priority))
        else:
            r = _job(p, m, graph, opts, False, timeout)
            walls.append(r["wall_s"])
            cpus.append(sum(r["cpu_s"]))
            extra = {"moves": r["moves"], "check": r["check"]}
    if cpus:   # CPU seconds of all ranks together during fr.run (work here is sleep: this is overhead)
        extra["cpu_s"] = _launch.median(cpus)
        extra["cpus_s"] = [round(c, 4) for c in cpus]
    return {"graph": graph, "mode": mode, "workers": p, "wall_s": _launch.median(walls),
            "walls": [round(w, 4) for w in walls], **extra}


def _local_job(opts: dict[str, Any], trace: bool, timeout: float) -> dict[str, Any]:
    """One process without MPI (``--local``): wall and peak RSS of the irregular graph."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="planaria-bench-") as tmp:
        args = ["--local", "--scratch", tmp, "--timeout", str(timeout)] + (["--trace"] if trace else [])
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        return _one_process(args, None, timeout, "local run")


def tracing_overhead(workers: int, repeat: int, gopt: dict[str, Any], jobs_left: int, ratio: float,
                     timeout: float, say: Callable[[str], None]) -> dict[str, Any]:
    """Trace on vs off, alternating launches: the sleep graph with the balancer on ranks, and a
    fine-grained graph (1000 tasks of 1 ms) in one process without MPI, where the per-CF cost shows."""
    out: dict[str, Any] = {}
    fine = {**gopt, "tasks": 1000, "layers": 10, "mean_ms": 1.0}
    for name, opts in (("irregular", gopt), ("fine-local", fine)):
        on, off, mem_on, mem_off, tb = [], [], [], [], 0
        for rep in range(repeat):
            for trace in (False, True):
                say(f"tracing overhead {name} trace={'on' if trace else 'off'} run {rep + 1}/{repeat}")
                if name == "fine-local":
                    r = _local_job(opts, trace, timeout)
                else:
                    r = _job(workers, "balancer", "irregular", {**opts, "jobs_left": jobs_left, "ratio": ratio},
                             trace, timeout)
                (on if trace else off).append(r["wall_s"])
                (mem_on if trace else mem_off).append(max(r["peak_rss_mb"]))
                tb = max(tb, r["trace_bytes"]) if trace else tb
        out[name] = {"tasks": opts["tasks"], "mean_ms": opts["mean_ms"], "workers": 1 if name == "fine-local" else workers,
                     "wall_off_s": _launch.median(off), "wall_on_s": _launch.median(on),
                     "time_overhead": _launch.median(on) / _launch.median(off) - 1,
                     "peak_rss_off_mb": _launch.median(mem_off), "peak_rss_on_mb": _launch.median(mem_on),
                     "memory_overhead": _launch.median(mem_on) / _launch.median(mem_off) - 1,
                     "trace_bytes": tb, "walls_on": on, "walls_off": off}
    return out


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    prio = result.get("graph_irregular", {}).get("priority", "none")
    t = Table(title=f"fragmented programs: median wall per (graph, mode, workers); task priorities: {prio}")
    for c in ("graph", "mode", "P", "wall s", "ideal s", "speedup", "efficiency", "moves", "CPU s"):
        t.add_column(c, justify="right")
    for r in result["rows"]:
        t.add_row(r["graph"], r["mode"], str(r["workers"]), f"{r['wall_s']:.3f}",
                  f"{r['ideal_s']:.3f}" if "ideal_s" in r else "-",
                  f"{r['speedup']:.2f}" if r.get("speedup") else "-",
                  f"{r['efficiency']:.2f}" if "efficiency" in r else "-", str(r.get("moves", "-")),
                  f"{r['cpu_s']:.2f}" if "cpu_s" in r else "-")
    return t


def show(result: dict[str, Any], as_json: bool) -> None:
    _launch.show(result, as_json, table)
    if not as_json and result.get("tracing"):
        for name, o in result["tracing"].items():
            print(f"tracing overhead ({name}: {o['tasks']} tasks, mean {o['mean_ms']} ms, P={o['workers']}): "
                  f"time {o['time_overhead'] * 100:+.1f}% ({o['wall_off_s']:.3f} -> {o['wall_on_s']:.3f} s), "
                  f"peak RSS {o['memory_overhead'] * 100:+.1f}% ({o['peak_rss_off_mb']:.1f} -> {o['peak_rss_on_mb']:.1f} MB), "
                  f"trace {o['trace_bytes'] / 1024:.0f} KiB")


def command(
    workers: str = typer.Option("1,2,4,8", "--workers", help="Worker-rank counts, comma-separated (the balancer adds one rank)."),
    graphs: str = typer.Option("irregular,matmul", "--graphs", help="irregular (sleep-based skewed DAG), matmul (numpy blocks)."),
    modes: str = typer.Option("balancer,balancer-donor,static,dask", "--modes", help="balancer (all CFs created on worker 0, the paper's rule), balancer-donor (our extension: a CF moves when it ends sooner at the receiver, one queued per receiver), static (round-robin .at), dask (LocalCluster)."),
    repeat: int = typer.Option(2, "--repeat", help="Launches per cell; the median is reported."),
    tasks: int = typer.Option(96, "--tasks", help="Tasks of the irregular graph."),
    mean_ms: float = typer.Option(40.0, "--mean-ms", help="Mean task duration (sleep) of the irregular graph, ms."),
    sigma: float = typer.Option(1.0, "--sigma", help="Log-normal sigma of the durations (skew)."),
    layers: int = typer.Option(4, "--layers", help="Layers of the irregular graph (each task depends on 2 tasks of the layer before)."),
    seed: int = typer.Option(1, "--seed", help="Seed of the irregular graph's durations and edges."),
    priority: str = typer.Option("none", "--priority", help="none, or descendants: every task's priority (.priority() in the program, priority= in Dask's submit) is the number of tasks that depend on it."),
    nb: int = typer.Option(4, "--nb", help="Blocks per matrix side (matmul)."),
    bs: int = typer.Option(300, "--bs", help="Block size (matmul)."),
    jobs_left: int = typer.Option(2, "--jobs-left-threshold", help="Balancer JOBS_LEFT_THRESHOLD."),
    ratio: float = typer.Option(0.2, "--jobs-difference-ratio", help="Balancer JOBS_DIFFERENCE_RATIO (0..1)."),
    overhead_repeat: int = typer.Option(3, "--overhead-repeat", help="Trace on/off launch pairs for the tracing overhead (0: skip)."),
    overhead_workers: int = typer.Option(4, "--overhead-workers", help="Worker ranks of the tracing-overhead jobs."),
    timeout: float = typer.Option(180.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result as JSON."),
) -> None:
    """Speedup and efficiency (ideal makespan = max(work/P, critical path)) of fragmented programs, balancer on/off, vs Dask.

    Example: python -m benchmarks fragments --workers 1,2,4,8 --repeat 2
    """

    def compute() -> dict[str, Any]:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"--jobs-difference-ratio must be in [0, 1], got {ratio}")
        return run(_launch.parse_counts(workers, "worker", "1,2,4,8", minimum=1), [g for g in graphs.split(",") if g],
                   [m for m in modes.split(",") if m], repeat, tasks, layers, mean_ms, sigma, seed, nb, bs, jobs_left,
                   ratio, overhead_workers, overhead_repeat, timeout, progress=_launch.progress_printer(json_out),
                   priority=priority)
    raise typer.Exit(_launch.run_and_show("fragments", compute, show, json_out))


def rank_entry(argv: list[str] | None = None) -> int:
    """The programs the driver starts: a rank of a job (``--rank``), one process without MPI (``--local``),
    or the matmul calibration (``--calibrate``)."""
    p = _launch.rank_parser("benchmarks.fragments", timeout=180.0)
    p.add_argument("--graph", default="irregular")
    p.add_argument("--mode", default="balancer")
    p.add_argument("--trace", action="store_true")
    p.add_argument("--local", action="store_true")
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tasks", type=int, default=96)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--mean-ms", type=float, default=40.0)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--priority", default="none", choices=PRIORITIES)
    p.add_argument("--nb", type=int, default=4)
    p.add_argument("--bs", type=int, default=300)
    p.add_argument("--jobs-left", type=int, default=2)
    p.add_argument("--ratio", type=float, default=0.2)
    args = p.parse_args(argv)
    if args.calibrate:
        _launch.emit(calibrate_matmul(args.nb, args.bs), None)
    elif args.local:
        local_main(args)
    else:
        rank_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(rank_entry())
