"""``python -m benchmarks abft``: the cost and the detection power of N-ABFT terrain analysis ([Song 2013]).

Three parts, each optional (``--parts``):

* ``overhead``: the runtime :mod:`planaria.abft.masterworker` on N workers + 2 masters (plain
  ``mpiexec --with-ft ulfm``, one launch per run) on a synthetic float32 ``.npy`` DEM, in
  its three modes: ``plain`` (no check rows, no verification), ``abft`` (redundant rows +
  verification) and ``duplicate`` (every block computed by two workers, digests compared).
  The figure per run is the runtime's ``timings.wall`` (``--bench``): from a barrier after
  start-up (mpiexec, interpreter, imports and communicator are excluded) until the output
  file is written and fsynced, the replica has acknowledged and the workers are told to
  stop. Modes alternate within each repetition, in each of the 6 orders in turn (so every mode
  follows every other equally often over 6 repetitions), with a ``sync`` and a pause between
  launches so one run's writeback does not fall into the next; medians over the
  repetitions, and the median of the per-repetition ratios. Every run's output must be
  bit-identical across modes (checked on the files, outside the timed region). Alongside the
  wall time, the runtime's ``timings.cpu``: process CPU seconds of every rank over the same
  region (waits sleep-poll, so it counts work, not waiting, and time-sharing the cores does
  not add to it as it does to the wall time); medians of the total, of the busiest worker and
  of the masters per mode, and the per-repetition ratios of the total to plain's.
* ``faults``: :mod:`benchmarks.abft_faults` in one job of N+1 ranks: ``trials`` trials,
  a third clean, a third with one bit flip in a covered row, a third in an uncovered row.
* ``throughput``: the kernel and end-to-end parts of ``python -m benchmarks terrain``
  (:mod:`benchmarks.terrain`): slope and cut depth kernels against a memory floor and their
  goals, and ``planaria terrain slope`` against ``gdaldem slope`` end to end.
* ``pairs`` (not in the default ``--parts``): :mod:`benchmarks.abft_pairs`, ``trials``
  trials of two silent faults each over every pair of workers (adjacent ones included, N from
  2 to 8), verified and recovered by the runtime's rules, counting undetected faults; then the
  real runtime for every pair of 4 workers, both kernels.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer

from benchmarks import _launch
from benchmarks._launch import BenchError, command_line, loadavg, median
from benchmarks.abft_series import file_digest

MODES = ("plain", "abft", "duplicate")
ORDERS = list(itertools.permutations(MODES))
SETTLE_S = 1.0
PARTS = ("overhead", "faults", "throughput", "pairs")
GOAL_PCT = 2.0
BOOTSTRAP = 10_000
TMPFS_ROOT = "/dev/shm"
# --keep-heap: glibc's malloc takes every block from the heap (no mmap) and never gives the top of
# the heap back, so a process reuses the pages it already touched instead of faulting in new ones
HEAP_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
CHUNK_ROWS = 500
# PMIx's hash store instead of its shared-memory one (gds/shmem2): on this Open MPI 5.0.11 a rank
# of these jobs (numba and LLVM loaded) now and then fails MPI_Init with PMIX_ERR_FILE_OPEN_FAILURE
# in gds_shmem2.c (openpmix/openpmix#3839), which ends the whole series; the store only serves
# start-up lookups, before any timed part
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "PMIX_MCA_gds": "hash"}


def synthetic_dem(path: Path, rows: int, cols: int, seed: int = 0) -> Path:
    """A deterministic float32 DEM (smooth relief + noise, NaN holes as NoData), written in row
    chunks (``.npy``) or as a GeoTIFF with nodata -9999 (``.tif``), never whole in memory for ``.npy``."""
    from planaria.terrain import write_dem_rows

    def chunks():  # type: ignore[no-untyped-def]
        x = np.arange(cols, dtype=np.float64)
        for r0 in range(0, rows, CHUNK_ROWS):
            r1 = min(rows, r0 + CHUNK_ROWS)
            y = np.arange(r0, r1, dtype=np.float64)[:, None]
            rng = np.random.default_rng([seed, r0])
            z = (800.0 + 300.0 * np.sin(y / 700.0) * np.cos(x / 900.0) + 40.0 * np.sin(y / 37.0 + x / 53.0)
                 + rng.normal(0.0, 1.5, (r1 - r0, cols)))
            holes = rng.random((r1 - r0, cols)) < 1e-4
            z[holes] = np.nan if path.suffix == ".npy" else -9999.0
            yield r0, z.astype(np.float32)
    nodata = None if path.suffix == ".npy" else -9999.0
    return write_dem_rows(path, (rows, cols), np.float32, chunks(), nodata=nodata, cell_size=(30.0, 30.0))


def _record(rep: dict[str, Any], kernel: str, mode: str, digest: str, launch_s: float | None,
            cmd: str) -> dict[str, Any]:
    """The figures of one run from the runtime's report (``--bench``)."""
    if not rep.get("ok") or rep.get("errors"):
        raise BenchError(f"abft {kernel} {mode}: a clean run reported errors: {rep.get('errors')}")
    wt = rep.get("worker_times", [])
    tm = rep["timings"]
    cpu = tm.get("cpu") or {}

    def worst(key: str) -> float:
        return max((w.get(key, 0.0) for w in wt), default=0.0)
    return {"kernel": kernel, "mode": mode, "wall_s": tm["wall"], "launch_s": launch_s, "digest": digest,
            "read_s_max": worst("read"), "compute_s_max": worst("compute"), "part_write_s_max": worst("write"),
            "digest_s_max": worst("digest"), "compute_s_sum": sum(w.get("compute", 0.0) for w in wt),
            "verification_s": tm.get("verification", 0.0), "edge_rows_s": tm.get("referee_rows", tm.get("edge_rows", 0.0)),
            "write_output_s": tm.get("write_output", 0.0), "cross_check_s": tm.get("cross_check", 0.0),
            "cpu_total_s": cpu.get("total"), "cpu_workers_max_s": cpu.get("workers_max"),
            "cpu_masters_s": cpu.get("masters"), "cpu_per_rank_s": cpu.get("per_rank"),
            "tasks": rep["overhead"]["tasks"], "cmd": cmd}


def _mpiexec(workers: int, backend: str) -> list[str]:
    return _launch.mpiexec_prefix(workers + 2, ft=backend == "ulfm") + [sys.executable, "-m"]


def _run_job(cmd: list[str], env: dict[str, str], timeout: float, what: str) -> str:
    """Run one mpiexec job to its end (killed after ``timeout``); its stderr. BenchError when it fails."""
    code, _, stderr = _launch.run_bounded(cmd, env, timeout, what)
    if code != 0:
        raise BenchError(f"{what} failed (exit {code}): {' '.join(cmd)}\n{stderr[-3000:]}")
    return stderr


def run_once(dem: Path, kernel: str, mode: str, workers: int, scratch: Path, timeout: float,
             backend: str = "ulfm", env: dict[str, str] | None = None) -> dict[str, Any]:
    """One launch of the runtime in ``mode``; its report plus the output's digest (the output is then removed)."""
    out = scratch / f"out-{kernel}-{mode}.npy"
    report = scratch / f"report-{kernel}-{mode}.json"
    for p in (out, report):
        p.unlink(missing_ok=True)
    cmd = _mpiexec(workers, backend) + [
        "planaria.abft.masterworker", "--kernel", kernel, "--dem", str(dem), "--out", str(out), "--mode", mode, "--bench",
        "--report", str(report), "--backend", backend]
    t0 = time.perf_counter()
    stderr = _run_job(cmd, {**THREAD_ENV, **(env or {})}, timeout, f"abft {kernel} {mode}")
    launch_s = time.perf_counter() - t0
    if not report.is_file():
        raise BenchError(f"abft {kernel} {mode}: exit 0 and no report: {' '.join(cmd)}\n{stderr[-3000:]}")
    rep = json.loads(report.read_text())
    digest = file_digest(out)
    out.unlink()
    return _record(rep, kernel, mode, digest, launch_s, " ".join(cmd))


def run_series(dem: Path, kernels: list[str], modes: list[str], workers: int, reps: int, warmup: int,
               scratch: Path, timeout: float, backend: str = "ulfm", env: dict[str, str] | None = None,
               settle: float = SETTLE_S) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """One job of :mod:`benchmarks.abft_series`: ``warmup`` + ``reps`` repetitions in the same processes;
    (counted runs, warm-up runs, command)."""
    out = scratch / "series.json"
    out.unlink(missing_ok=True)
    cmd = _mpiexec(workers, backend) + [
        "benchmarks.abft_series", "--dem", str(dem), "--scratch", str(scratch), "--kernels", ",".join(kernels),
        "--modes", ",".join(modes), "--reps", str(reps), "--warmup", str(warmup), "--settle", str(settle),
        "--backend", backend, "--out", str(out)]
    nruns = (reps + warmup) * len(kernels) * len(modes)
    stderr = _run_job(cmd, {**THREAD_ENV, **(env or {})}, timeout * nruns, f"abft series of {nruns} runs")
    if not out.is_file():
        raise BenchError(f"abft series: exit 0 and no result: {' '.join(cmd)}\n{stderr[-3000:]}")
    res = json.loads(out.read_text())
    out.unlink()
    line = " ".join(cmd)

    def recs(xs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**_record(x["report"], x["kernel"], x["mode"], x["digest"], None, line), "repetition": x["repetition"]}
                for x in xs]
    return recs(res["runs"]), recs(res["warmup_runs"]), line


def _settle(pause: float = SETTLE_S) -> None:
    """Before a timed launch: write back what earlier runs left dirty, then let the machine go idle (0: neither)."""
    if pause > 0:
        os.sync()
        time.sleep(pause)


def _median_known(xs: list[float | None]) -> float | None:
    """Median of the values present; None when there is none (a run whose CPU figure is incomplete)."""
    known = [x for x in xs if x is not None]
    return median(known) if known else None


def bootstrap_median_ci(ratios: list[float], resamples: int = BOOTSTRAP, level: float = 0.95,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of ``ratios`` (resampled with replacement, fixed seed)."""
    x = np.asarray(ratios, dtype=np.float64)
    if x.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    a = (1.0 - level) / 2.0
    return float(np.quantile(meds, a)), float(np.quantile(meds, 1.0 - a))


def verdict(ci: tuple[float, float] | None, goal_pct: float = GOAL_PCT) -> str:
    """``met`` when the interval's upper end is within the goal, ``missed`` when its lower end is above it,
    else ``not shown`` (the interval straddles the goal)."""
    if ci is None or not np.isfinite(ci[1]):
        return "not shown"
    if ci[1] <= 1.0 + goal_pct / 100.0:
        return "met"
    if ci[0] > 1.0 + goal_pct / 100.0:
        return "missed"
    return "not shown"


def pairs(runs: list[dict[str, Any]], mode: str, key: str) -> list[float]:
    """Per-repetition ratios ``mode`` / ``plain`` of ``key`` (runs of one kernel; a repetition is a
    ``(source, repetition)`` pair, so combined results never pair runs of different commands)."""
    def rid(r: dict[str, Any]) -> tuple[Any, int]:
        return (r.get("source", 0), r["repetition"])
    base = {rid(r): r[key] for r in runs if r["mode"] == "plain"}
    return [r[key] / base[rid(r)] for r in runs
            if r["mode"] == mode and r[key] is not None and base.get(rid(r))]


def _ratio_stats(ratios: list[float]) -> dict[str, Any]:
    if not ratios:
        return {"paired_pct": None, "range": None, "ci": None, "n": 0}
    return {"paired_pct": (median(ratios) - 1) * 100, "range": [min(ratios), max(ratios)],
            "ci": list(bootstrap_median_ci(ratios)), "n": len(ratios)}


def summarize(runs: list[dict[str, Any]], kernels: list[str], modes: list[str]) -> list[dict[str, Any]]:
    """Per kernel: medians per mode, paired ratios to plain (median, range, bootstrap 95 % interval) and verdicts."""
    rows = []
    for k in kernels:
        mine = [r for r in runs if r["kernel"] == k]
        digests = {r["digest"] for r in mine}
        if len(digests) != 1:
            raise BenchError(f"{k}: the modes wrote different rasters ({len(digests)} distinct outputs)")
        by = {m: [r for r in mine if r["mode"] == m] for m in modes}
        med = {m: {key: median([r[key] for r in by[m]]) for key in
                   ("wall_s", "read_s_max", "compute_s_max", "part_write_s_max", "digest_s_max", "compute_s_sum",
                    "verification_s", "edge_rows_s", "write_output_s", "cross_check_s")} for m in modes}
        for m in modes:
            for key in ("cpu_total_s", "cpu_workers_max_s", "cpu_masters_s"):
                med[m][key] = _median_known([r[key] for r in by[m]])
        row: dict[str, Any] = {"kernel": k, "medians": med, "goal_pct": GOAL_PCT, "bit_identical": True}
        for m in ("abft", "duplicate"):
            if m not in modes:
                continue
            w = _ratio_stats(pairs(mine, m, "wall_s"))
            c = _ratio_stats(pairs(mine, m, "cpu_total_s"))
            cw = _ratio_stats(pairs(mine, m, "cpu_workers_max_s"))
            row.update({
                f"{m}_overhead_pct": (med[m]["wall_s"] / med["plain"]["wall_s"] - 1) * 100,
                f"{m}_paired_pct": w["paired_pct"], f"{m}_ratio_range": w["range"], f"{m}_ci": w["ci"],
                f"{m}_pairs": w["n"],
                f"{m}_compute_overhead_pct": (med[m]["compute_s_sum"] / med["plain"]["compute_s_sum"] - 1) * 100,
                f"{m}_cpu_paired_pct": c["paired_pct"], f"{m}_cpu_ratio_range": c["range"], f"{m}_cpu_ci": c["ci"],
                f"{m}_cpu_workers_max_paired_pct": cw["paired_pct"], f"{m}_cpu_workers_max_ci": cw["ci"]})
        if "abft" in modes:
            row["verdict_wall"] = verdict(row["abft_ci"])
            row["verdict_cpu"] = verdict(row["abft_cpu_ci"])
            row["goal_met"] = row["verdict_wall"] == "met" and row["verdict_cpu"] == "met"
        rows.append(row)
    return rows


def overhead(dem: Path, kernels: list[str], workers: int, repeat: int, scratch: Path, timeout: float,
             progress: Any = None, backend: str = "ulfm", modes: list[str] | None = None, per_job: int = 0,
             env: dict[str, str] | None = None, settle: float = SETTLE_S) -> dict[str, Any]:
    """Every kernel x mode ``repeat`` times; medians and paired ratios.

    A repetition runs the modes in one of their orders, taking them in turn: a plain rotation
    would always run ``plain`` right after ``duplicate`` (the heaviest run) and ``abft`` after
    ``plain``, so whatever one run leaves behind (dirty pages, a busy disk, a warm or cold cache)
    would load one mode more than another. Over a multiple of len(modes)! repetitions every mode
    follows every other one equally often. Between runs the file system is synced and the
    machine left idle a moment.

    ``per_job`` 0: one ``mpiexec`` per run (cold processes). ``per_job`` K >= 1: jobs of K
    repetitions each in the same processes (:mod:`benchmarks.abft_series`), after one
    warm-up repetition per job that is reported but not counted.
    """
    modes = list(modes or MODES)
    runs: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    cmd = ""

    def note(r: dict[str, Any], rep: int) -> None:
        if progress:
            cpu = "?" if r["cpu_total_s"] is None else f"{r['cpu_total_s']:.3f}"
            progress(f"abft overhead: {r['kernel']} {r['mode']} repetition {rep + 1}/{repeat}: {r['wall_s']:.3f} s "
                     f"timed (compute max {r['compute_s_max']:.3f} s), CPU {cpu} s")
    if per_job <= 0:
        orders = list(itertools.permutations(modes))
        for rep in range(repeat):
            for k in kernels:
                for mode in orders[rep % len(orders)]:
                    _settle(settle)
                    r = run_once(dem, k, mode, workers, scratch, timeout, backend, env)
                    r["repetition"] = rep
                    runs.append(r)
                    cmd = r["cmd"]
                    note(r, rep)
    else:
        done = 0
        while done < repeat:
            k_reps = min(per_job, repeat - done)
            got, w, cmd = run_series(dem, kernels, modes, workers, k_reps, 1, scratch, timeout, backend, env, settle)
            for r in got:
                r["repetition"] += done
                note(r, r["repetition"])
            for r in w:
                r["repetition"] = done - 1  # the warm-up before repetition ``done``
            runs += got
            warm += w
            done += k_reps
    return {"rows": summarize(runs, kernels, modes), "runs": runs, "warmup_runs": warm, "modes": modes,
            "per_job": per_job, "settle_s": settle, "mpiexec": cmd}


def faults(trials: int, workers: int, seed: int, timeout: float, backend: str = "ulfm") -> dict[str, Any]:
    """The detection campaign in one job of ``workers + 1`` ranks (records dropped, summary kept)."""
    got = _launch_faults(trials, workers, seed, timeout, backend)
    got.pop("records", None)
    return got


def _launch_faults(trials: int, workers: int, seed: int, timeout: float, backend: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="planaria-abft-faults-") as tmp:
        out = Path(tmp) / "faults.json"
        cmd = _launch.mpiexec_prefix(workers + 1, ft=backend == "ulfm") + [
            sys.executable, "-m", "benchmarks.abft_faults",
            "--trials", str(trials), "--seed", str(seed), "--backend", backend, "--out", str(out)]
        stderr = _run_job(cmd, THREAD_ENV, timeout, "fault campaign")
        if not out.is_file():
            raise BenchError(f"fault campaign wrote no result: {' '.join(cmd)}\n{stderr[-3000:]}")
        res = json.loads(out.read_text())
        res["cmd"] = " ".join(cmd)
        return res


def throughput(rows: int, cols: int, repeat: int, scratch: Path, seed: int = 0) -> dict[str, Any]:
    """The kernels against the floor and the end-to-end path against ``gdaldem slope``: the kernel and
    end-to-end parts of :mod:`benchmarks.terrain` (``python -m benchmarks terrain``), without N-ABFT."""
    from benchmarks import terrain
    return terrain.run(rows, cols, repeat, workers="", seed=seed, workdir=str(scratch))


def fs_type(path: Path) -> str:
    """The file-system type (``/proc/mounts``) that holds ``path``: tmpfs, ext4, ... or ``unknown``."""
    target = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as fh:
            for line in fh:
                f = line.split()
                if len(f) >= 3:
                    mnt = f[1].replace("\\040", " ")
                    if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                        best, kind = mnt, f[2]
    except OSError:
        pass
    return kind


def _space_needed(rows: int, cols: int, modes: list[str], dem_present: bool) -> int:
    """Bytes a run needs in the work directory: the float32 DEM, the float64 output and the part files
    (two copies of every block in duplicate mode), plus a tenth for headers and slack."""
    cells = rows * cols
    parts = 8 * cells * (2 if "duplicate" in modes else 1)
    return int(1.1 * ((0 if dem_present else 4 * cells) + 8 * cells + parts))


def run(rows: int = 2000, cols: int = 1890, workers: int = 4, repeat: int = 6, kernels: str = "slope,cutdepth",
        parts: str = "overhead,faults,throughput", trials: int = 3000, seed: int = 0, timeout: float = 600.0,
        workdir: str | None = None, progress: Any = None, backend: str = "ulfm", modes: str = ",".join(MODES),
        per_job: int = 0, tmpfs: bool = False, keep_heap: bool = False, settle: float = SETTLE_S) -> dict[str, Any]:
    """The benchmark; ValueError for bad options, BenchError when a job fails or the modes disagree."""
    ks, ps, ms = _checked(rows, cols, workers, repeat, kernels, parts, trials, timeout, workdir, backend, modes,
                          per_job, tmpfs, keep_heap, settle)
    own = workdir is None
    scratch = Path(tempfile.mkdtemp(prefix="planaria-abft-bench-", dir=TMPFS_ROOT if tmpfs else None)) if own \
        else Path(workdir)
    result: dict[str, Any] = {"benchmark": "abft", "rows": rows, "cols": cols, "workers": workers, "repeat": repeat,
                              "kernels": ks, "modes": ms, "parts": ps, "backend": backend, "cores": os.cpu_count(),
                              "per_job": per_job, "keep_heap": keep_heap, "settle_s": settle, "workdir": str(scratch),
                              "date": time.strftime("%Y-%m-%d %H:%M"), "loadavg_before": loadavg(),
                              "command": command_line()}
    t_start = time.perf_counter()
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        result["workdir_fs"] = fs_type(scratch)
        if "overhead" in ps:
            dem = _dem(scratch, result["workdir_fs"], rows, cols, seed, ms, progress)
            result["overhead"] = overhead(dem, ks, workers, repeat, scratch, timeout, progress, backend, ms, per_job,
                                          HEAP_ENV if keep_heap else None, settle)
        if "faults" in ps:
            if progress:
                progress(f"abft faults: {trials} trials on {workers} workers")
            result["faults"] = faults(trials, workers, seed, timeout, backend)
        if "pairs" in ps:
            from benchmarks import abft_pairs
            if progress:
                progress(f"abft pairs: {trials} trials of two faults each, then the runtime on every pair of 4 workers")
            result["pairs"] = abft_pairs.run(trials, seed, scratch, timeout, backend, progress)
        if "throughput" in ps:
            if progress:
                progress(f"abft throughput: {rows} x {cols}, {repeat} runs each")
            result["throughput"] = throughput(rows, cols, repeat, scratch, seed)
    finally:
        if own:
            shutil.rmtree(scratch, ignore_errors=True)
    result["total_s"] = time.perf_counter() - t_start
    result["loadavg_after"] = loadavg()
    return result


def _checked(rows: int, cols: int, workers: int, repeat: int, kernels: str, parts: str, trials: int, timeout: float,
             workdir: str | None, backend: str, modes: str, per_job: int, tmpfs: bool, keep_heap: bool,
             settle: float) -> tuple[list[str], list[str], list[str]]:
    """``run``'s options checked (ValueError naming the wrong one): the kernels, parts and modes as lists."""
    from planaria.terrain import kernels as registry
    ks = [k for k in kernels.replace(" ", "").split(",") if k]
    ps = [p for p in parts.replace(" ", "").split(",") if p]
    ms = [m for m in modes.replace(" ", "").split(",") if m]
    if not ks or any(k not in registry for k in ks):
        raise ValueError(f"bad kernel list {kernels!r} (expected slope, cutdepth)")
    if not ps or any(p not in PARTS for p in ps):
        raise ValueError(f"bad part list {parts!r} (expected {', '.join(PARTS)})")
    if "plain" not in ms or len(ms) < 2 or any(m not in MODES for m in ms) or len(set(ms)) != len(ms):
        raise ValueError(f"bad mode list {modes!r} (plain and at least one of abft, duplicate)")
    if rows < 2 * workers + 12 or cols < 12:
        raise ValueError(f"a {rows} x {cols} DEM is too small for {workers} workers (need >= {2 * workers + 12} x 12)")
    if workers < 2:
        raise ValueError(f"--workers must be >= 2 (got {workers})")
    if repeat < 1 or trials < 3 or timeout <= 0 or per_job < 0 or settle < 0:
        raise ValueError("--repeat must be >= 1, --trials >= 3, --timeout > 0, --per-job >= 0 and --settle >= 0")
    if backend not in ("ulfm", "sim"):
        raise ValueError(f"backend must be ulfm or sim, not {backend!r}")
    if tmpfs and workdir is not None:
        raise ValueError("--tmpfs and --workdir exclude each other (give --workdir a directory on a tmpfs instead)")
    if tmpfs and fs_type(Path(TMPFS_ROOT)) != "tmpfs":
        raise ValueError(f"--tmpfs: {TMPFS_ROOT} is not a tmpfs here")
    if keep_heap and per_job < 1:
        raise ValueError("--keep-heap needs --per-job >= 1 (a heap is kept across the runs of one job)")
    return ks, ps, ms


def _dem(scratch: Path, fs: str, rows: int, cols: int, seed: int, ms: list[str], progress: Any) -> Path:
    """The overhead part's DEM in ``scratch`` (written unless there); ValueError when the space for a run is missing."""
    dem = scratch / f"dem-{rows}x{cols}-seed{seed}.npy"
    free = shutil.disk_usage(scratch).free
    need = _space_needed(rows, cols, ms, dem.is_file())
    if need > free:
        raise ValueError(f"{scratch} ({fs}) has {free / 1e9:.1f} GB free, a run needs "
                         f"{need / 1e9:.1f} GB")
    if not dem.is_file():
        t0 = time.perf_counter()
        synthetic_dem(dem, rows, cols, seed)
        if progress:
            progress(f"abft: wrote a {rows} x {cols} float32 DEM in {time.perf_counter() - t0:.1f} s")
    return dem


COMBINE_SAME = ("rows", "cols", "workers", "backend", "modes", "workdir_fs", "keep_heap", "settle_s")


def combine(paths: list[str]) -> dict[str, Any]:
    """Pool the overhead runs of several ``--json`` results of the same setup (size, workers, modes, work
    directory's file system, heap, cold or in-job runs) into one summary. Runs are paired only within
    their own result; the outputs of a kernel must be bit-identical across all of them."""
    if len(paths) < 1:
        raise ValueError("--combine needs at least one result file")
    results = []
    for p in paths:
        try:
            r = json.loads(Path(p).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{p}: cannot read a benchmark result: {' '.join(str(exc).split())}") from None
        if not isinstance(r, dict) or r.get("benchmark") != "abft" or "overhead" not in r:
            raise ValueError(f"{p}: not a 'python -m benchmarks abft --json' result with the overhead part")
        results.append(r)
    first = results[0]
    for p, r in zip(paths, results, strict=False):
        for key in COMBINE_SAME:
            if r.get(key) != first.get(key):
                raise ValueError(f"{p}: {key} is {r.get(key)!r}, {paths[0]} has {first.get(key)!r}")
        if (r.get("per_job", 0) > 0) != (first.get("per_job", 0) > 0):
            raise ValueError(f"{p}: mixes one launch per run with runs inside a job ({paths[0]})")
    runs, kernels = [], []
    for i, r in enumerate(results):
        for run_ in r["overhead"]["runs"]:
            runs.append({**run_, "source": i})
            if run_["kernel"] not in kernels:
                kernels.append(run_["kernel"])
    modes = first["modes"]
    out = {k: first.get(k) for k in ("benchmark", "rows", "cols", "workers", "backend", "cores", "modes",
                                      "workdir_fs", "keep_heap", "settle_s", "per_job")}
    out.update(kernels=kernels, parts=["overhead"], repeat=None, combined=True,
               sources=[{"file": p, "command": r.get("command"), "date": r.get("date"), "kernels": r.get("kernels"),
                         "repeat": r.get("repeat"), "per_job": r.get("per_job"),
                         "loadavg_before": r.get("loadavg_before"), "loadavg_after": r.get("loadavg_after"),
                         "total_s": r.get("total_s")} for p, r in zip(paths, results, strict=False)],
               loadavg_before=first.get("loadavg_before"), loadavg_after=results[-1].get("loadavg_after"),
               command=command_line(), date=time.strftime("%Y-%m-%d %H:%M"))
    out["overhead"] = {"rows": summarize(runs, kernels, modes), "runs": runs, "modes": modes,
                       "per_job": first.get("per_job", 0), "mpiexec": first["overhead"].get("mpiexec", "")}
    return out


def table(result: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table
    out = []
    if "overhead" in result:
        out += _overhead_tables(result)
    if "faults" in result:
        s = result["faults"]["summary"]
        t = Table(title=f"Silent faults (one bit flip per faulty trial), {result['faults']['trials']} trials on "
                        f"{result['faults']['workers']} workers")
        for c in ("trials", "injected", "detected", "located", "exact", "wrong outputs undetected",
                  "mismatching / comparisons", "runs flagged"):
            t.add_column(c, justify="right")
        for kind in ("covered", "uncovered"):
            r = s[kind]
            t.add_row(f"{kind} rows", str(r["injected"]), str(r["detected"]), str(r["located"]), str(r["exact"]),
                      str(r["undetected_wrong_outputs"]), f"{r['mismatching_comparisons']}/{r['comparisons']}", "")
        c = s["clean"]
        t.add_row("clean", "0", "", "", "", str(c["wrong_outputs"]),
                  f"{c['mismatching_comparisons']}/{c['comparisons']}", str(c["runs_flagged"]))
        out.append(t)
    if "pairs" in result:
        out.append(_pairs_table(result["pairs"]))
    if "throughput" in result:
        from benchmarks import terrain
        out += terrain.tables(result["throughput"])
    return Group(*out)


def _pairs_table(res: dict[str, Any]) -> Any:
    """Two faults per trial: located, recovered, undetected, per way; the paper's V alone for comparison."""
    from rich.table import Table
    c = res["campaign"]
    t = Table(title=f"Two silent faults per trial, every pair of workers (N in 2..8): {c['trials']} trials, "
                    f"{c['faults']} faults, seed {c['seed']}, {c['total_s']:.0f} s")
    for col in ("faults of", "trials", "faults", "located (round 1)", "recovered", "undetected", "undecidable",
                "with conflict", "innocent flagged", "paper's V: located / trials missed"):
        t.add_column(col, justify="right")
    for key, r in c["summary"].items():
        if not isinstance(r, dict) or "trials" not in r:
            continue
        t.add_row(key, str(r["trials"]), str(r["faults"]), str(r["faults_located_first_round"]), str(r["recovered"]),
                  str(r["undetected"]), str(r["undecidable"]), str(r["trials_with_conflict"]),
                  str(r["trials_innocent_flagged"]), f"{r['paper_faults_located']} / {r['paper_trials_missed']}")
    if "e2e" in res:
        e = res["e2e"]
        t.caption = (f"runtime (planaria abft, {e['workers']} workers, every pair, both kernels): {len(e['runs'])} runs, "
                     f"{e['faults']} faults, {e['undetected']} undetected, {e['not_ok']} not ok")
    return t


def _pct(p: float | None) -> str:
    return "?" if p is None else f"{p:+.1f} %"


def _interval(ci: list[float] | None) -> str:
    return "?" if ci is None else f"{(ci[0] - 1) * 100:+.1f}..{(ci[1] - 1) * 100:+.1f} %"


def _setup(result: dict[str, Any]) -> str:
    ov = result["overhead"]
    runs = "one launch per run" if not ov.get("per_job") else f"{ov['per_job']} repetitions per job after a warm-up"
    heap = (", heap kept" if result.get("keep_heap") else "") + f", {result.get('settle_s', SETTLE_S):g} s pause"
    comb = f", combined from {len(result['sources'])} results" if result.get("combined") else ""
    return f"{runs}{heap}, work dir on {result.get('workdir_fs', '?')}{comb}"


def _overhead_tables(result: dict[str, Any]) -> list[Any]:
    """Medians per mode, and the paired ratios to plain with their bootstrap 95 % intervals and verdicts."""
    from rich.table import Table
    modes = result["overhead"].get("modes", list(MODES))
    load = result.get("loadavg_before") or [float("nan")]
    load2 = result.get("loadavg_after") or [float("nan")]
    t = Table(title=f"N-ABFT overhead, {result['rows']} x {result['cols']} float32 DEM, {result['workers']} workers "
                    f"+ 2 masters ({result['cores']} cores; load {load[0]:.1f}->{load2[0]:.1f}; {_setup(result)})")
    for c in ("kernel", "pairs", *(f"{m} wall / CPU" for m in modes), "compute max " + "/".join(modes)):
        t.add_column(c, justify="right")
    for r in result["overhead"]["rows"]:
        m = r["medians"]
        n = r.get("abft_pairs", r.get("duplicate_pairs", 0))
        cpu = ["?" if m[x]["cpu_total_s"] is None else f"{m[x]['cpu_total_s']:.3f}" for x in modes]
        t.add_row(r["kernel"], str(n), *(f"{m[x]['wall_s']:.3f} / {c} s" for x, c in zip(modes, cpu, strict=False)),
                  "/".join(f"{m[x]['compute_s_max']:.2f}" for x in modes) + " s")
    t.caption = ("medians; timed: barrier after start-up -> output written + fsynced, replica agreed, workers "
                 "stopped (start-up excluded); CPU: process CPU of all ranks over that region; outputs bit-identical")
    out = [t]
    t = Table(title=f"Paired ratios to plain: median over repetitions (bootstrap 95 % interval of the median); "
                    f"goal ABFT <= {GOAL_PCT:g} %, met only when the interval's upper end is within it")
    for c in ("kernel", "mode", "wall", "verdict", "CPU all ranks", "verdict", "CPU busiest worker"):
        t.add_column(c, justify="right")
    for r in result["overhead"]["rows"]:
        for x in ("abft", "duplicate"):
            if x not in modes:
                continue
            ab = x == "abft"
            t.add_row(r["kernel"], x, f"{_pct(r[f'{x}_paired_pct'])} ({_interval(r[f'{x}_ci'])})",
                      r["verdict_wall"] if ab else "",
                      f"{_pct(r[f'{x}_cpu_paired_pct'])} ({_interval(r[f'{x}_cpu_ci'])})", r["verdict_cpu"] if ab else "",
                      f"{_pct(r[f'{x}_cpu_workers_max_paired_pct'])} ({_interval(r[f'{x}_cpu_workers_max_ci'])})")
    out.append(t)
    return out


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """Print the result as JSON or as tables."""
    _launch.show(result, as_json, table, min_width=160)


def command(
    rows: int = typer.Option(2000, "--rows", help="DEM rows (the paper: 16000)."),
    cols: int = typer.Option(1890, "--cols", help="DEM columns (the paper: 15120)."),
    workers: int = typer.Option(4, "--workers", help="Workers N (N+2 ranks per run)."),
    repeat: int = typer.Option(6, "--repeat", help="Repetitions, each one run per kernel and mode; medians and paired "
                               "ratios reported. Each repetition runs the modes in the next of their orders: a "
                               "multiple of the number of orders (2 for two modes, 6 for three) balances them."),
    kernels: str = typer.Option("slope,cutdepth", "--kernels", help="Kernels, comma-separated."),
    modes: str = typer.Option("plain,abft,duplicate", "--modes",
                              help="Modes, comma-separated: plain and at least one of abft, duplicate."),
    parts: str = typer.Option("overhead,faults,throughput", "--parts",
                              help="What to measure, comma-separated: overhead, faults, throughput."),
    trials: int = typer.Option(3000, "--trials", help="Fault-campaign trials (a third clean, covered, uncovered)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic DEMs and faults."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds allowed per run."),
    workdir: str = typer.Option(None, "--workdir", help="Keep the synthetic DEM here (reused when present)."),
    tmpfs: bool = typer.Option(False, "--tmpfs", help="Work directory (DEM, part files, output) in /dev/shm: no disk "
                               "writeback in either mode (nor in the baseline)."),
    per_job: int = typer.Option(0, "--per-job", help="0: one mpiexec per run (cold processes). K: jobs of K "
                                "repetitions in the same processes, each after a warm-up repetition not counted."),
    keep_heap: bool = typer.Option(False, "--keep-heap", help="With --per-job: malloc keeps freed memory, so later "
                                   "runs reuse pages already touched instead of faulting in fresh ones."),
    settle: float = typer.Option(1.0, "--settle", help="Pause between runs, after a sync (s): lets writeback "
                                 "finish; 0 on a tmpfs keeps memory freed by one run warm for the next."),
    combine: list[str] = typer.Option([], "--combine", help="Pool the overhead runs of earlier --json results of the "
                                      "same setup (repeatable); runs nothing."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (every run) as JSON."),
) -> None:
    """N-ABFT terrain analysis: wall and CPU time of plain / ABFT / duplicate runs with paired ratios and bootstrap
    intervals, detection of silent faults, kernel speed vs gdaldem.

    Example: python -m benchmarks abft --rows 2000 --cols 1890 --repeat 6
    (the paper's size: --rows 16000 --cols 15120; start-up of each job is not timed)
    """

    def compute() -> dict[str, Any]:
        if combine:
            return combine(combine)
        return run(rows, cols, workers, repeat, kernels, parts, trials, seed, timeout, workdir,
                      progress=_launch.progress_printer(json_out), modes=modes, per_job=per_job, tmpfs=tmpfs, keep_heap=keep_heap,
                      settle=settle)
    raise typer.Exit(_launch.run_and_show("abft", compute, show, json_out))
