"""``planaria bench abft``: the cost and the detection power of N-ABFT terrain analysis (paper 002).

Three parts, each optional (``--parts``):

* ``overhead``: the runtime :mod:`planaria.abft.runtime` on N workers + 2 masters (plain
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
* ``faults``: :mod:`planaria.bench.abft_faults` in one job of N+1 ranks: ``trials`` trials,
  a third clean, a third with one bit flip in a covered row, a third in an uncovered row.
* ``throughput``: slope (and cut depth) kernel in this process on a float32 GeoTIFF, kernel
  only and end to end (read + compute + write GeoTIFF), against ``gdaldem slope`` on the
  same file (end to end: it is one process).
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from planaria.bench import _launch
from planaria.bench._launch import BenchError, command_line, job_env, loadavg, median, mpiexec_path

MODES = ("plain", "abft", "duplicate")
ORDERS = list(itertools.permutations(MODES))
SETTLE_S = 1.0
PARTS = ("overhead", "faults", "throughput")
GOAL_PCT = 2.0
CHUNK_ROWS = 500
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def run_once(dem: Path, kernel: str, mode: str, workers: int, scratch: Path, timeout: float,
             backend: str = "ulfm") -> dict[str, Any]:
    """One launch of the runtime in ``mode``; its report plus the output's digest (the output is then removed)."""
    out = scratch / f"out-{kernel}-{mode}.npy"
    report = scratch / f"report-{kernel}-{mode}.json"
    for p in (out, report):
        p.unlink(missing_ok=True)
    cmd = [mpiexec_path()]
    if backend == "ulfm":
        cmd += ["--with-ft", "ulfm"]
    cmd += ["--oversubscribe", "-n", str(workers + 2), sys.executable, "-m", "planaria.abft.runtime",
            "--kernel", kernel, "--dem", str(dem), "--out", str(out), "--mode", mode, "--bench",
            "--report", str(report), "--backend", backend]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=job_env(THREAD_ENV), start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        raise BenchError(f"abft {kernel} {mode} timed out after {timeout:.0f} s") from None
    launch_s = time.perf_counter() - t0
    if proc.returncode != 0 or not report.is_file():
        raise BenchError(f"abft {kernel} {mode} failed (exit {proc.returncode}): {' '.join(cmd)}\n{stderr[-3000:]}")
    rep = json.loads(report.read_text())
    if not rep.get("ok") or rep.get("errors"):
        raise BenchError(f"abft {kernel} {mode}: a clean run reported errors: {rep.get('errors')}")
    digest = _file_digest(out)
    out.unlink()
    wt = rep.get("worker_times", [])
    tm = rep["timings"]
    cpu = tm.get("cpu") or {}

    def worst(key: str) -> float:
        return max((w.get(key, 0.0) for w in wt), default=0.0)
    return {"kernel": kernel, "mode": mode, "wall_s": tm["wall"], "launch_s": launch_s, "digest": digest,
            "read_s_max": worst("read"), "compute_s_max": worst("compute"), "part_write_s_max": worst("write"),
            "digest_s_max": worst("digest"), "compute_s_sum": sum(w.get("compute", 0.0) for w in wt),
            "verification_s": tm.get("verification", 0.0), "edge_rows_s": tm.get("edge_rows", 0.0),
            "write_output_s": tm.get("write_output", 0.0), "cross_check_s": tm.get("cross_check", 0.0),
            "cpu_total_s": cpu.get("total"), "cpu_workers_max_s": cpu.get("workers_max"),
            "cpu_masters_s": cpu.get("masters"), "cpu_per_rank_s": cpu.get("per_rank"),
            "tasks": rep["overhead"]["tasks"], "cmd": " ".join(cmd)}


def _settle() -> None:
    """Before a timed launch: write back what earlier runs left dirty, then let the machine go idle."""
    os.sync()
    time.sleep(SETTLE_S)


def _median_known(xs: list[float | None]) -> float | None:
    """Median of the values present; None when there is none (a run whose CPU figure is incomplete)."""
    known = [x for x in xs if x is not None]
    return median(known) if known else None


def overhead(dem: Path, kernels: list[str], workers: int, repeat: int, scratch: Path, timeout: float,
             progress: Any = None, backend: str = "ulfm") -> dict[str, Any]:
    """Every kernel x mode ``repeat`` times; medians and ratios.

    A repetition runs the modes in one of the 6 orders, taking them in turn: a plain rotation
    would always run ``plain`` right after ``duplicate`` (the heaviest run) and ``abft`` after
    ``plain``, so whatever one run leaves behind (dirty pages, a busy disk, a warm or cold cache)
    would load one mode more than another. Over 6 repetitions every mode follows every other
    one twice. Between launches the file system is synced and the machine left idle a moment.
    """
    runs: list[dict[str, Any]] = []
    for rep in range(repeat):
        for k in kernels:
            for mode in ORDERS[rep % len(ORDERS)]:
                _settle()
                r = run_once(dem, k, mode, workers, scratch, timeout, backend)
                r["repetition"] = rep
                runs.append(r)
                if progress:
                    cpu = "?" if r["cpu_total_s"] is None else f"{r['cpu_total_s']:.3f}"
                    progress(f"abft overhead: {k} {mode} repetition {rep + 1}/{repeat}: {r['wall_s']:.3f} s timed "
                             f"(compute max {r['compute_s_max']:.3f} s), CPU {cpu} s, {r['launch_s']:.1f} s launch")
    rows = []
    for k in kernels:
        mine = [r for r in runs if r["kernel"] == k]
        digests = {r["digest"] for r in mine}
        if len(digests) != 1:
            raise BenchError(f"{k}: the modes wrote different rasters ({len(digests)} distinct outputs)")
        by = {m: [r for r in mine if r["mode"] == m] for m in MODES}
        med = {m: {key: median([r[key] for r in by[m]]) for key in
                   ("wall_s", "read_s_max", "compute_s_max", "part_write_s_max", "digest_s_max", "compute_s_sum",
                    "verification_s", "edge_rows_s", "write_output_s", "cross_check_s")} for m in MODES}
        for m in MODES:
            for key in ("cpu_total_s", "cpu_workers_max_s", "cpu_masters_s"):
                med[m][key] = _median_known([r[key] for r in by[m]])

        def paired(m: str) -> list[float]:
            base = {r["repetition"]: r["wall_s"] for r in by["plain"]}
            return [r["wall_s"] / base[r["repetition"]] for r in by[m]]

        def paired_cpu(m: str) -> list[float]:
            base = {r["repetition"]: r["cpu_total_s"] for r in by["plain"]}
            return [r["cpu_total_s"] / base[r["repetition"]] for r in by[m]
                    if r["cpu_total_s"] is not None and base.get(r["repetition"])]
        abft_r, dup_r = paired("abft"), paired("duplicate")
        abft_c, dup_c = paired_cpu("abft"), paired_cpu("duplicate")
        ov_abft = (med["abft"]["wall_s"] / med["plain"]["wall_s"] - 1) * 100
        rows.append({"kernel": k, "medians": med,
                     "abft_overhead_pct": ov_abft,
                     "duplicate_overhead_pct": (med["duplicate"]["wall_s"] / med["plain"]["wall_s"] - 1) * 100,
                     "abft_paired_pct": (median(abft_r) - 1) * 100, "duplicate_paired_pct": (median(dup_r) - 1) * 100,
                     "abft_ratio_range": [min(abft_r), max(abft_r)], "duplicate_ratio_range": [min(dup_r), max(dup_r)],
                     "abft_compute_overhead_pct": (med["abft"]["compute_s_sum"] / med["plain"]["compute_s_sum"] - 1) * 100,
                     "duplicate_compute_overhead_pct":
                         (med["duplicate"]["compute_s_sum"] / med["plain"]["compute_s_sum"] - 1) * 100,
                     "abft_cpu_paired_pct": (median(abft_c) - 1) * 100 if abft_c else None,
                     "duplicate_cpu_paired_pct": (median(dup_c) - 1) * 100 if dup_c else None,
                     "abft_cpu_ratio_range": [min(abft_c), max(abft_c)] if abft_c else None,
                     "duplicate_cpu_ratio_range": [min(dup_c), max(dup_c)] if dup_c else None,
                     "goal_pct": GOAL_PCT, "goal_met": ov_abft <= GOAL_PCT, "bit_identical": True})
    return {"rows": rows, "runs": runs, "mpiexec": runs[0]["cmd"] if runs else ""}


def faults(trials: int, workers: int, seed: int, timeout: float, backend: str = "ulfm") -> dict[str, Any]:
    """The detection campaign in one job of ``workers + 1`` ranks (records dropped, summary kept)."""
    got = _launch_faults(trials, workers, seed, timeout, backend)
    got.pop("records", None)
    return got


def _launch_faults(trials: int, workers: int, seed: int, timeout: float, backend: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="planaria-abft-faults-") as tmp:
        out = Path(tmp) / "faults.json"
        cmd = [mpiexec_path()] + (["--with-ft", "ulfm"] if backend == "ulfm" else []) + [
            "--oversubscribe", "-n", str(workers + 1), sys.executable, "-m", "planaria.bench.abft_faults",
            "--trials", str(trials), "--seed", str(seed), "--backend", backend, "--out", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=job_env(THREAD_ENV), start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise BenchError(f"fault campaign timed out after {timeout:.0f} s") from None
        if proc.returncode != 0 or not out.is_file():
            raise BenchError(f"fault campaign failed (exit {proc.returncode}): {' '.join(cmd)}\n{stderr[-3000:]}")
        res = json.loads(out.read_text())
        res["cmd"] = " ".join(cmd)
        return res


def _best(fn: Any, repeat: int) -> list[float]:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def throughput(rows: int, cols: int, repeat: int, scratch: Path, seed: int = 0) -> dict[str, Any]:
    """Cells/s of our kernels (kernel only, and read + slope + write GeoTIFF) and of ``gdaldem slope``."""
    from planaria.terrain import Dem, cut_depth, read_dem, slope_degrees, write_dem
    tif = synthetic_dem(scratch / "dem.tif", rows, cols, seed)
    cells = rows * cols
    dem = read_dem(tif)
    res: dict[str, Any] = {"rows": rows, "cols": cols, "cells": cells, "repeat": repeat, "input": "float32 GeoTIFF"}
    k_slope = _best(lambda: slope_degrees(dem.data, dem.cell_size, dem.nodata), repeat)
    k_cut = _best(lambda: cut_depth(dem.data, dem.cell_size, dem.nodata), repeat)
    ours_out = scratch / "ours.tif"

    def e2e() -> None:
        d = read_dem(tif)
        write_dem(ours_out, Dem(slope_degrees(d.data, d.cell_size, d.nodata), d.nodata, d.cell_size, d.profile))
    t_e2e = _best(e2e, repeat)
    res["ours"] = {"slope_kernel_s": median(k_slope), "slope_kernel_cells_per_s": cells / median(k_slope),
                   "cutdepth_kernel_s": median(k_cut), "cutdepth_kernel_cells_per_s": cells / median(k_cut),
                   "slope_end_to_end_s": median(t_e2e), "slope_end_to_end_cells_per_s": cells / median(t_e2e),
                   "output": "float64 GeoTIFF"}
    gd = shutil.which("gdaldem")
    if gd is None:
        res["gdaldem"] = None
        return res
    gout = scratch / "gdaldem.tif"

    def gdal() -> None:
        gout.unlink(missing_ok=True)
        subprocess.run([gd, "slope", "-q", str(tif), str(gout)], check=True, timeout=3600)
    t_gd = _best(gdal, repeat)
    info = shutil.which("gdalinfo")
    ver = subprocess.run([info, "--version"], capture_output=True, text=True).stdout.strip() if info else "unknown"
    g = read_dem(gout).data.astype(np.float64)
    o = read_dem(ours_out).data
    both = np.isfinite(o) & (o != -9999.0) & (g != -9999.0)
    res["gdaldem"] = {"version": ver, "end_to_end_s": median(t_gd), "cells_per_s": cells / median(t_gd),
                      "output": "float32 GeoTIFF", "max_abs_diff_deg": float(np.max(np.abs(o[both] - g[both]))) if both.any() else None,
                      "fill_cells_agree": bool(np.array_equal(o == -9999.0, g == -9999.0))}
    res["kernel_vs_gdaldem"] = res["ours"]["slope_kernel_cells_per_s"] / res["gdaldem"]["cells_per_s"]
    res["end_to_end_vs_gdaldem"] = res["ours"]["slope_end_to_end_cells_per_s"] / res["gdaldem"]["cells_per_s"]
    return res


def run(rows: int = 2000, cols: int = 1890, workers: int = 4, repeat: int = 6, kernels: str = "slope,cutdepth",
        parts: str = "overhead,faults,throughput", trials: int = 3000, seed: int = 0, timeout: float = 600.0,
        workdir: str | None = None, progress: Any = None, backend: str = "ulfm") -> dict[str, Any]:
    """The benchmark; ValueError for bad options, BenchError when a job fails or the modes disagree."""
    from planaria.terrain import kernels as registry
    ks = [k for k in kernels.replace(" ", "").split(",") if k]
    ps = [p for p in parts.replace(" ", "").split(",") if p]
    if not ks or any(k not in registry for k in ks):
        raise ValueError(f"bad kernel list {kernels!r} (expected slope, cutdepth)")
    if not ps or any(p not in PARTS for p in ps):
        raise ValueError(f"bad part list {parts!r} (expected {', '.join(PARTS)})")
    if rows < 2 * workers + 12 or cols < 12:
        raise ValueError(f"a {rows} x {cols} DEM is too small for {workers} workers (need >= {2 * workers + 12} x 12)")
    if workers < 2:
        raise ValueError(f"--workers must be >= 2 (got {workers})")
    if repeat < 1 or trials < 3 or timeout <= 0:
        raise ValueError("--repeat must be >= 1, --trials >= 3 and --timeout > 0")
    if backend not in ("ulfm", "sim"):
        raise ValueError(f"backend must be ulfm or sim, not {backend!r}")
    result: dict[str, Any] = {"benchmark": "abft", "rows": rows, "cols": cols, "workers": workers, "repeat": repeat,
                              "kernels": ks, "parts": ps, "backend": backend, "cores": os.cpu_count(),
                              "date": time.strftime("%Y-%m-%d %H:%M"), "loadavg_before": loadavg(),
                              "command": command_line()}
    t_start = time.perf_counter()
    own = workdir is None
    scratch = Path(tempfile.mkdtemp(prefix="planaria-abft-bench-")) if own else Path(workdir)
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        if "overhead" in ps:
            dem = scratch / f"dem-{rows}x{cols}-seed{seed}.npy"
            if not dem.is_file():
                t0 = time.perf_counter()
                synthetic_dem(dem, rows, cols, seed)
                if progress:
                    progress(f"abft: wrote a {rows} x {cols} float32 DEM in {time.perf_counter() - t0:.1f} s")
            result["overhead"] = overhead(dem, ks, workers, repeat, scratch, timeout, progress, backend)
        if "faults" in ps:
            if progress:
                progress(f"abft faults: {trials} trials on {workers} workers")
            result["faults"] = faults(trials, workers, seed, timeout, backend)
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


def table(result: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table
    out = []
    if "overhead" in result:
        t = Table(title=f"N-ABFT overhead, {result['rows']} x {result['cols']} float32 DEM, {result['workers']} workers "
                        f"+ 2 masters, median of {result['repeat']} ({result['cores']} cores; load "
                        f"{result['loadavg_before'][0]:.1f}->{result['loadavg_after'][0]:.1f})")
        for c in ("kernel", "plain", "abft", "duplicate", "abft over plain", "(paired)", "duplicate over plain",
                  "(paired)", "compute max plain/abft/dup", "write output", "goal <= 2 %"):
            t.add_column(c, justify="right")
        for r in result["overhead"]["rows"]:
            m = r["medians"]
            t.add_row(r["kernel"], *(f"{m[x]['wall_s']:.3f} s" for x in MODES),
                      f"{r['abft_overhead_pct']:+.1f} %", f"{r['abft_paired_pct']:+.1f} %",
                      f"{r['duplicate_overhead_pct']:+.1f} %", f"{r['duplicate_paired_pct']:+.1f} %",
                      "/".join(f"{m[x]['compute_s_max']:.2f}" for x in MODES) + " s",
                      f"{m['abft']['write_output_s']:.2f} s", "met" if r["goal_met"] else "MISSED")
        t.caption = "timed: barrier after start-up -> output written + fsynced (mpiexec, imports excluded); outputs bit-identical"
        out.append(t)
        out.append(_cpu_table(result))
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
    if "throughput" in result:
        r = result["throughput"]
        t = Table(title=f"Kernel throughput, {r['rows']} x {r['cols']} float32 GeoTIFF, one process, median of {r['repeat']}")
        t.add_column("what")
        t.add_column("time", justify="right")
        t.add_column("Mcells/s", justify="right")
        o = r["ours"]
        t.add_row("slope kernel (planaria)", f"{o['slope_kernel_s']:.3f} s", f"{o['slope_kernel_cells_per_s'] / 1e6:.1f}")
        t.add_row("cut depth kernel (planaria)", f"{o['cutdepth_kernel_s']:.3f} s",
                  f"{o['cutdepth_kernel_cells_per_s'] / 1e6:.1f}")
        t.add_row("slope read+compute+write (planaria)", f"{o['slope_end_to_end_s']:.3f} s",
                  f"{o['slope_end_to_end_cells_per_s'] / 1e6:.1f}")
        if r.get("gdaldem"):
            g = r["gdaldem"]
            t.add_row("gdaldem slope (end to end)", f"{g['end_to_end_s']:.3f} s", f"{g['cells_per_s'] / 1e6:.1f}")
        out.append(t)
    return Group(*out)


def _cpu_table(result: dict[str, Any]) -> Any:
    """CPU seconds of the overhead runs: the work each mode costs (waits sleep-poll, so waiting is not counted)."""
    from rich.table import Table

    def s(x: float | None) -> str:
        return "?" if x is None else f"{x:.3f}"

    def pct(p: float | None) -> str:
        return "?" if p is None else f"{p:+.1f} %"

    def rng(r: list[float] | None) -> str:
        return "?" if r is None else f"{(r[0] - 1) * 100:+.1f}..{(r[1] - 1) * 100:+.1f} %"
    t = Table(title=f"N-ABFT CPU time (process CPU of all ranks over the timed region), median of {result['repeat']}")
    for c in ("kernel", "plain", "abft", "duplicate", "busiest worker s plain/abft/dup", "masters s plain/abft/dup",
              "abft over plain (paired)", "range", "duplicate over plain (paired)", "range"):
        t.add_column(c, justify="right")
    for r in result["overhead"]["rows"]:
        m = r["medians"]
        t.add_row(r["kernel"], *(f"{s(m[x]['cpu_total_s'])} s" for x in MODES),
                  "/".join(s(m[x]["cpu_workers_max_s"]) for x in MODES),
                  "/".join(s(m[x]["cpu_masters_s"]) for x in MODES),
                  pct(r["abft_cpu_paired_pct"]), rng(r["abft_cpu_ratio_range"]),
                  pct(r["duplicate_cpu_paired_pct"]), rng(r["duplicate_cpu_ratio_range"]))
    t.caption = ("CPU: time.process_time of each rank from the --bench barrier to the end of its work (a worker: "
                 "stop received); reads, kernel, writes, hashing, messages; not the sleeps of waits")
    return t


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """Print the result as JSON or as tables."""
    _launch.show(result, as_json, table, min_width=160)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python benchmarks/abft.py",
                                description="Cost and detection power of N-ABFT terrain analysis (same as planaria bench abft).")
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--cols", type=int, default=1890)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--repeat", type=int, default=6, help="runs per kernel and mode; a multiple of 6 balances the mode order")
    p.add_argument("--kernels", default="slope,cutdepth")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--trials", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--workdir", default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    def compute() -> dict[str, Any]:
        return run(args.rows, args.cols, args.workers, args.repeat, args.kernels, args.parts, args.trials, args.seed,
                   args.timeout, args.workdir, progress=_launch.progress_printer(args.json))
    return _launch.run_and_show("abft", compute, show, args.json)


if __name__ == "__main__":
    sys.exit(main())
