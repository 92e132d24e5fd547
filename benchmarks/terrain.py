"""``python -m benchmarks terrain``: the terrain kernels and the end-to-end path against their floors and goals.

One run, on a synthetic float32 GeoTIFF DEM (nodata -9999; the paper's size by default), in this
order:

* **floor**: a numpy pass that reads one float32 array of the DEM's size and writes another
  (``numpy.copy``, the output allocated and faulted in as a kernel's is): what moving a cell's
  bytes through memory costs on this machine now. Median of ``repeat``.
* **kernels**: :func:`~planaria.terrain.slope_degrees` and :func:`~planaria.terrain.cut_depth` on
  the DEM in memory, float32 out, in this one process (one core), median of ``repeat`` timed calls
  after a warm-up (the compiled loops loaded from numba's cache, or compiled, before timing). Next
  to each: the floor, the goal (150 and 100 M cells/s), the ratio to the goal, and what lies above
  the floor; per wall second and per second of this process's CPU time (the machine is shared: the
  wall time also counts the time other work held the core). Every call allocates its output, so a
  call that has to fault in fresh memory (the first one in a process, above all when the kernel
  compacts memory for numpy's huge pages) is slower; every call's times are in the JSON. The numpy
  reference kernels run once each and their output must be bit-identical.
* **end to end**: ``planaria terrain slope`` as a fresh process (interpreter, imports, reading the
  GeoTIFF, computing, writing the float32 GeoTIFF in windows, fsync, rename) against ``gdaldem slope``
  on the same file into the same directory, alternating, ``repeat`` each, with ``sync`` before
  every run; the ratio of the medians against the goal 0.8 (and the processes' CPU times). The parts of ours (start-up, read,
  compute, write) with their floors (the floor pass for read, compute and write each: every part
  moves the raster's cells once), so a missed goal shows where the time above the floor is.
* **N-ABFT**: ``planaria.abft.masterworker`` (mode ``abft``) on N workers + 2 masters for each N of
  ``workers``: its wall time (``--bench``: from the barrier after start-up to the output written)
  and the speed-up of the one-process kernel's time over it; its output must be bit-identical to
  the one-process kernel's.

The load average is recorded before and after every part: other work on the machine slows
every figure, and the floor is measured in the same run so that it is slowed alike.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import typer

from benchmarks import _launch
from benchmarks._launch import BenchError, command_line, loadavg, median

SLOPE_GOAL = 150e6      # cells/s per core
CUTDEPTH_GOAL = 100e6
E2E_GOAL = 0.8          # ours / gdaldem, end to end
PAPER = (16000, 15120)


def _times(fn: Any, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (this process) of ``repeat`` calls of ``fn``."""
    ts, cs = [], []
    for _ in range(repeat):
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        cs.append(time.process_time() - c0)
    return ts, cs


def _children_cpu() -> float:
    """CPU seconds of the finished child processes so far (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def kernels(z: np.ndarray, cell: tuple[float, float], nodata: float | None, repeat: int,
            reference: bool, progress: Any = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Floor and kernel timings on ``z`` in memory; (figures, the kernels' outputs)."""
    from planaria.terrain import compiled, cut_depth, slope_degrees
    from planaria.terrain.cutdepth import cut_depth_reference
    from planaria.terrain.slope import slope_degrees_reference
    cells = z.size
    t0 = time.perf_counter()
    compiled.warm_up(None, z.dtype, np.float32)
    warm = time.perf_counter() - t0
    res: dict[str, Any] = {"cells": cells, "warm_up_s": warm, "loadavg_before": loadavg()}
    ft, fc = _times(lambda: np.copy(z), repeat)
    floor = median(ft)
    res.update(floor_s=floor, floor_cpu_s=median(fc), floor_cells_per_s=cells / floor, floor_times_s=ft)
    outs: dict[str, np.ndarray] = {}
    for name, fn, ref, goal in (("slope", slope_degrees, slope_degrees_reference, SLOPE_GOAL),
                                ("cutdepth", cut_depth, cut_depth_reference, CUTDEPTH_GOAL)):
        if progress:
            progress(f"terrain: {name} kernel, {repeat} runs")
        holder: dict[str, np.ndarray] = {}

        def call(fn: Any = fn, holder: dict[str, np.ndarray] = holder) -> None:
            holder["out"] = fn(z, cell, nodata, dtype=np.float32)
        ts, cs = _times(call, repeat)
        t, c = median(ts), median(cs)
        row: dict[str, Any] = {"kernel_s": t, "cells_per_s": cells / t, "goal_cells_per_s": goal,
                               "ratio_to_goal": cells / t / goal, "floor_s": floor, "above_floor_s": t - floor,
                               "times_floor": t / floor, "goal_met": cells / t >= goal,
                               "cpu_s": c, "cells_per_cpu_s": cells / c, "ratio_to_goal_cpu": cells / c / goal,
                               "goal_met_cpu": cells / c >= goal, "times_s": ts, "cpu_times_s": cs}
        if reference:
            t0 = time.perf_counter()
            r = ref(z, cell, nodata, dtype=np.float32)
            row["reference_s"] = time.perf_counter() - t0
            row["reference_cells_per_s"] = cells / row["reference_s"]
            row["bit_identical_to_reference"] = _same_bits(holder["out"], r)
            del r
            if not row["bit_identical_to_reference"]:
                raise BenchError(f"{name}: the compiled kernel's output differs from the numpy reference's")
        outs[name] = holder["out"]
        res[name] = row
    res["loadavg_after"] = loadavg()
    return res, outs


def _settle() -> None:
    """Write back what earlier runs left dirty, so that it does not fall into the next run."""
    os.sync()
    time.sleep(0.5)


def end_to_end(tif: Path, scratch: Path, repeat: int, floor_s: float, timeout: float,
               progress: Any = None) -> dict[str, Any]:
    """``planaria terrain slope`` (a process) against ``gdaldem slope``, alternating; parts of ours against the floor."""
    gd = shutil.which("gdaldem")
    ours_out, gd_out = scratch / "ours-slope.tif", scratch / "gdaldem-slope.tif"
    cmd = [sys.executable, "-m", "planaria.cli.main", "terrain", "slope", "--dem", str(tif), "--out", str(ours_out),
           "--json"]
    res: dict[str, Any] = {"command": " ".join(cmd), "loadavg_before": loadavg(), "runs": []}
    gd_cmd = [gd, "slope", "-q", str(tif), str(gd_out)] if gd else None
    res["gdaldem_command"] = " ".join(gd_cmd) if gd_cmd else None
    for i in range(repeat):
        for who in ("ours", "gdaldem") if i % 2 == 0 else ("gdaldem", "ours"):
            if who == "gdaldem" and gd_cmd is None:
                continue
            out = ours_out if who == "ours" else gd_out
            out.unlink(missing_ok=True)
            _settle()
            c0 = _children_cpu()
            t0 = time.perf_counter()
            p = subprocess.run(cmd if who == "ours" else gd_cmd, capture_output=True, text=True, timeout=timeout)
            wall = time.perf_counter() - t0
            cpu = _children_cpu() - c0
            if p.returncode != 0:
                raise BenchError(f"{who} failed (exit {p.returncode}): {p.stderr.strip()[-2000:]}")
            run: dict[str, Any] = {"who": who, "repetition": i, "wall_s": wall, "cpu_s": cpu, "loadavg": loadavg()}
            if who == "ours":
                inner = json.loads(p.stdout)
                run.update({k: inner[k] for k in ("read_s", "compute_s", "write_s", "total_s", "dtype")})
                run["startup_s"] = wall - inner["total_s"]
            res["runs"].append(run)
            if progress:
                progress(f"terrain: end to end, {who} {i + 1}/{repeat}: {wall:.2f} s")
    ours = [r for r in res["runs"] if r["who"] == "ours"]
    res["ours_s"] = median([r["wall_s"] for r in ours])
    res["parts"] = {k: median([r[f"{k}_s"] for r in ours]) for k in ("startup", "read", "compute", "write")}
    # every part moves the raster's cells once (read: file -> array, compute: array -> array,
    # write: array -> file); the floor of each is the memory pass; start-up has none (0)
    res["part_floors"] = {"startup": 0.0, "read": floor_s, "compute": floor_s, "write": floor_s}
    if gd_cmd is not None:
        g = [r["wall_s"] for r in res["runs"] if r["who"] == "gdaldem"]
        res["gdaldem_s"] = median(g)
        res["ratio"] = res["ours_s"] / res["gdaldem_s"]
        res["ours_cpu_s"] = median([r["cpu_s"] for r in ours])
        res["gdaldem_cpu_s"] = median([r["cpu_s"] for r in res["runs"] if r["who"] == "gdaldem"])
        res["cpu_ratio"] = res["ours_cpu_s"] / res["gdaldem_cpu_s"]
        res["goal"] = E2E_GOAL
        res["goal_met"] = res["ratio"] <= E2E_GOAL
        res["gdaldem_version"] = _gdal_version()
        res["agreement"] = _agreement(ours_out, gd_out)
    res["loadavg_after"] = loadavg()
    for p_ in (ours_out, gd_out):
        p_.unlink(missing_ok=True)
    return res


def _gdal_version() -> str:
    info = shutil.which("gdalinfo")
    return subprocess.run([info, "--version"], capture_output=True, text=True).stdout.strip() if info else "unknown"


def _agreement(ours: Path, gd: Path) -> dict[str, Any]:
    """Largest difference (degrees) outside fill cells, and whether the fill cells are the same."""
    from planaria.terrain import read_dem
    o = read_dem(ours).data
    g = read_dem(gd).data
    fo, fg = o == -9999.0, g == -9999.0
    both = ~fo & ~fg
    diff = float(np.max(np.abs(o[both].astype(np.float64) - g[both]))) if both.any() else None
    return {"max_abs_diff_deg": diff, "fill_cells_agree": bool(np.array_equal(fo, fg)), "ours_dtype": o.dtype.name,
            "gdaldem_dtype": g.dtype.name}


def abft(tif: Path, scratch: Path, workers: list[int], kernel_s: dict[str, float], outs: dict[str, np.ndarray],
         timeout: float, backend: str, progress: Any = None) -> list[dict[str, Any]]:
    """N-ABFT runs (mode abft) per N and kernel: wall time, speed-up over the one-process kernel, output equality."""
    from benchmarks.abft import run_once
    from benchmarks.abft_series import file_digest
    from planaria.terrain import write_dem_rows
    want = {}
    for name, arr in outs.items():  # the one-process outputs, written as the runtime writes its .npy
        p = scratch / f"serial-{name}.npy"
        write_dem_rows(p, arr.shape, arr.dtype, [(0, arr)])
        want[name] = file_digest(p)
        p.unlink()
    rows = []
    for n in workers:
        for name in ("slope", "cutdepth"):
            _settle()
            la = loadavg()
            r = run_once(tif, name, "abft", n, scratch, timeout, backend)
            row = {"workers": n, "kernel": name, "wall_s": r["wall_s"], "launch_s": r["launch_s"],
                   "compute_s_max": r["compute_s_max"], "read_s_max": r["read_s_max"],
                   "write_output_s": r["write_output_s"], "one_process_kernel_s": kernel_s[name],
                   "speedup": kernel_s[name] / r["wall_s"], "bit_identical": r["digest"] == want[name],
                   "loadavg": la, "cmd": r["cmd"]}
            if not row["bit_identical"]:
                raise BenchError(f"N-ABFT {name} on {n} workers wrote another raster than the one-process kernel")
            rows.append(row)
            if progress:
                progress(f"terrain: N-ABFT {name} on {n} workers: {r['wall_s']:.2f} s, speed-up {row['speedup']:.2f}")
    return rows


def run(rows: int = PAPER[0], cols: int = PAPER[1], repeat: int = 3, workers: str = "1,2,4", seed: int = 0,
        timeout: float = 900.0, workdir: str | None = None, backend: str = "ulfm", reference: bool = True,
        e2e: bool = True, progress: Any = None) -> dict[str, Any]:
    """The benchmark; ValueError for bad options, BenchError when a run fails or an output differs."""
    from benchmarks.abft import synthetic_dem
    from planaria.terrain import read_dem
    ns = [int(x) for x in workers.replace(" ", "").split(",") if x] if workers.strip() else []
    if rows < 12 or cols < 12:
        raise ValueError(f"a {rows} x {cols} DEM is too small (need >= 12 x 12)")
    if any(n < 1 or n > rows for n in ns):
        raise ValueError(f"bad --workers {workers!r}: every N must be in 1..rows")
    if repeat < 1 or timeout <= 0:
        raise ValueError("--repeat must be >= 1 and --timeout > 0")
    if backend not in ("ulfm", "sim"):
        raise ValueError(f"backend must be ulfm or sim, not {backend!r}")
    own = workdir is None
    scratch = Path(tempfile.mkdtemp(prefix="planaria-terrain-bench-")) if own else Path(workdir)
    result: dict[str, Any] = {"benchmark": "terrain", "rows": rows, "cols": cols, "cells": rows * cols,
                              "repeat": repeat, "workers": ns, "cores": os.cpu_count(), "seed": seed,
                              "date": time.strftime("%Y-%m-%d %H:%M %Z"), "command": command_line(),
                              "workdir": str(scratch), "loadavg_before": loadavg()}
    t_start = time.perf_counter()
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        from benchmarks.abft import fs_type
        result["workdir_fs"] = fs_type(scratch)
        tif = scratch / f"dem-{rows}x{cols}-seed{seed}.tif"
        if not tif.is_file():
            if progress:
                progress(f"terrain: writing a {rows} x {cols} float32 GeoTIFF DEM")
            synthetic_dem(tif, rows, cols, seed)
        d = read_dem(tif)
        result["kernels"], outs = kernels(d.data, d.cell_size, d.nodata, repeat, reference, progress)
        del d
        if e2e:
            result["end_to_end"] = end_to_end(tif, scratch, repeat, result["kernels"]["floor_s"], timeout, progress)
        if ns:
            ks = {k: result["kernels"][k]["kernel_s"] for k in ("slope", "cutdepth")}
            result["abft"] = abft(tif, scratch, ns, ks, outs, timeout, backend, progress)
    finally:
        if own:
            shutil.rmtree(scratch, ignore_errors=True)
    result["total_s"] = time.perf_counter() - t_start
    result["loadavg_after"] = loadavg()
    return result


def _load(x: list[float] | None) -> str:
    return "?" if not x else f"{x[0]:.2f}"


def tables(result: dict[str, Any]) -> list[Any]:
    """The kernel, end-to-end and N-ABFT tables."""
    from rich.table import Table
    out: list[Any] = []
    k = result.get("kernels")
    cells = result["cells"]
    if k:
        t = Table(title=f"Kernels, {result['rows']} x {result['cols']} float32 DEM -> float32, one process (one core), "
                        f"median of {result['repeat']} after warm-up; load {_load(k['loadavg_before'])} -> "
                        f"{_load(k['loadavg_after'])}")
        for c in ("kernel", "time (wall)", "M cells/s", "floor (copy) M cells/s", "goal M cells/s", "ratio to goal",
                  "verdict", "M cells per CPU-s", "ratio", "verdict (CPU)", "above floor", "numpy reference",
                  "bit-identical"):
            t.add_column(c, justify="right")
        for name in ("slope", "cutdepth"):
            r = k[name]
            ref = f"{r['reference_s']:.2f} s, {r['reference_cells_per_s'] / 1e6:.0f} M/s" if "reference_s" in r else "-"
            t.add_row(name, f"{r['kernel_s']:.3f} s", f"{r['cells_per_s'] / 1e6:.1f}",
                      f"{k['floor_cells_per_s'] / 1e6:.0f}", f"{r['goal_cells_per_s'] / 1e6:.0f}",
                      f"{r['ratio_to_goal']:.2f}", "met" if r["goal_met"] else "MISSED",
                      f"{r['cells_per_cpu_s'] / 1e6:.1f}", f"{r['ratio_to_goal_cpu']:.2f}",
                      "met" if r["goal_met_cpu"] else "MISSED",
                      f"{r['above_floor_s']:.3f} s ({r['times_floor']:.1f}x floor)", ref,
                      str(r.get("bit_identical_to_reference", "-")))
        t.caption = (f"floor: numpy.copy of the float32 DEM ({k['floor_s']:.3f} s), measured in this run; above floor: "
                     f"the kernel's time beyond it (compute); per CPU-s: cells per second of this process's CPU time "
                     f"(the time it ran on a core; wall time also counts waiting for a core other work holds); warm-up "
                     f"(load/compile the loops) {k['warm_up_s']:.2f} s, not timed")
        out.append(t)
    e = result.get("end_to_end")
    if e:
        t = Table(title=f"End to end: planaria terrain slope (a process) vs gdaldem slope, median of {result['repeat']} "
                        f"each, alternating; load {_load(e['loadavg_before'])} -> {_load(e['loadavg_after'])}")
        for c in ("what", "time", "M cells/s", "ratio", "goal", "verdict"):
            t.add_column(c, justify="right")
        g = e.get("gdaldem_s")
        ratio = e.get("ratio")
        t.add_row("planaria (float32 out, fsync)", f"{e['ours_s']:.2f} s", f"{cells / e['ours_s'] / 1e6:.0f}",
                  f"{ratio:.2f}" if ratio else "-", f"<= {E2E_GOAL}",
                  ("met" if e["goal_met"] else "MISSED") if ratio else "no gdaldem")
        if g:
            t.add_row(f"gdaldem ({e.get('gdaldem_version', '')})", f"{g:.2f} s", f"{cells / g / 1e6:.0f}", "1.00", "", "")
            t.caption = (f"CPU time of the processes: planaria {e['ours_cpu_s']:.2f} s, gdaldem {e['gdaldem_cpu_s']:.2f} s "
                         f"(ratio {e['cpu_ratio']:.2f})")
        out.append(t)
        t = Table(title="Parts of planaria's end-to-end time (medians) against their floors")
        for c in ("part", "time", "floor", "above floor", "share of the time"):
            t.add_column(c, justify="right")
        parts, floors = e["parts"], e["part_floors"]
        total = sum(parts.values())
        for p_ in ("startup", "read", "compute", "write"):
            t.add_row(p_, f"{parts[p_]:.2f} s", f"{floors[p_]:.2f} s", f"{parts[p_] - floors[p_]:.2f} s",
                      f"{100 * parts[p_] / total:.0f} %")
        worst = max(parts, key=lambda p_: parts[p_] - floors[p_])
        a = e.get("agreement") or {}
        t.caption = (f"start-up: interpreter, imports, loading the compiled loops; write includes the fsync and "
                     f"rename. Largest excess over its floor: {worst}"
                     + ("" if not ratio or e["goal_met"] else " (the goal is missed)")
                     + (f". Outputs: largest difference {a.get('max_abs_diff_deg'):.2g} deg, fill cells "
                        f"{'equal' if a.get('fill_cells_agree') else 'DIFFER'}" if a.get("max_abs_diff_deg") is not None
                        else ""))
        out.append(t)
    if result.get("abft"):
        t = Table(title="N-ABFT (mode abft, N workers + 2 masters) against the one-process kernel")
        for c in ("kernel", "N", "wall (timed)", "worker compute max", "write output", "one-process kernel",
                  "speed-up", "output = one-process", "load"):
            t.add_column(c, justify="right")
        for r in result["abft"]:
            t.add_row(r["kernel"], str(r["workers"]), f"{r['wall_s']:.2f} s", f"{r['compute_s_max']:.2f} s",
                      f"{r['write_output_s']:.2f} s", f"{r['one_process_kernel_s']:.2f} s", f"{r['speedup']:.2f}",
                      str(r["bit_identical"]), _load(r["loadavg"]))
        t.caption = (f"wall: the runtime's --bench time, barrier after start-up -> output written and fsynced "
                     f"(reads, parts, verification included); {result['cores']} cores, so N + 2 ranks share them")
        out.append(t)
    return out


def table(result: dict[str, Any]) -> Any:
    """All tables of a result, grouped."""
    from rich.console import Group
    return Group(*tables(result))


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """Print the result as JSON or as tables."""
    from benchmarks import _launch
    _launch.show(result, as_json, table, min_width=220)


def command(
    rows: int = typer.Option(16000, "--rows", help="DEM rows (the paper's size: 16000)."),
    cols: int = typer.Option(15120, "--cols", help="DEM columns (the paper's size: 15120)."),
    repeat: int = typer.Option(3, "--repeat", help="Timed runs of each kernel, and end-to-end runs of each side (medians)."),
    workers: str = typer.Option("1,2,4", "--workers", help="N-ABFT worker counts, comma-separated (empty: no N-ABFT runs)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic DEM."),
    timeout: float = typer.Option(900.0, "--timeout", help="Seconds allowed per process or job."),
    workdir: str = typer.Option(None, "--workdir", help="Work directory (the DEM is kept and reused; default: a "
                                "temporary directory, removed)."),
    backend: str = typer.Option("ulfm", "--backend", help="Failure backend of the N-ABFT jobs: ulfm or sim."),
    reference: bool = typer.Option(True, "--reference/--no-reference", help="Also run the numpy reference kernels "
                                   "once each and check the outputs bit for bit."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (every run) as JSON."),
) -> None:
    """Terrain kernels against a memory floor and their goals, planaria terrain slope against gdaldem slope end
    to end, and N-ABFT's speed-up over the one-process kernel per N.

    Kernel goals: slope >= 150 and cut depth >= 100 M cells/s on one core; end to end <= 0.8x gdaldem's time.
    The floor (a numpy pass reading one float32 raster and writing another) and the load average are measured
    in the same run. Run it alone on the machine.

    Example: python -m benchmarks terrain --rows 16000 --cols 15120 --repeat 3 --workers 1,2,4
    """

    def compute() -> dict[str, Any]:
        return run(rows, cols, repeat, workers, seed, timeout, workdir, backend, reference,
                      progress=_launch.progress_printer(json_out))
    raise typer.Exit(_launch.run_and_show("terrain", compute, show, json_out))
