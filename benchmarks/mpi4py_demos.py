"""mpi4py's own demos, unchanged, under ``planaria run --world`` (runtime on) and under plain mpiexec.

    python -m benchmarks mpi4py-demos [--demos cpi,mandelbrot,osu_latency] [--np 2] [--timeout 300]
                                      [--demo-dir DIR] [--json]

The demos come from the installed mpi4py version's source distribution (fetched once with
``pip download`` into ``~/.cache/planaria``, or ``--demo-dir``):

* ``cpi``: demo/compute-pi/cpi-cco.py, interval counts 1000000 then 0 on standard input; correct
  when every printed error is below 1e-10;
* ``mandelbrot``: demo/mandelbrot/mandelbrot.py; correct when it prints its timing summary and
  exits 0 (matplotlib's window is suppressed with ``MPLBACKEND=Agg``);
* ``osu_latency``: demo/osu_latency.py (2 ranks); correct when it prints a latency for every
  size from 0 B to 4 MiB. Its 8-byte latencies are printed for both runs as information; the
  overhead goal is judged by ``python -m benchmarks overhead`` (interleaved in one job).

Exit status 0 when every demo ran correctly both ways.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer

from benchmarks.compat import sdist_part

DEMOS = {
    "cpi": ("compute-pi/cpi-cco.py", "1000000\n0\n"),
    "mandelbrot": ("mandelbrot/mandelbrot.py", ""),
    "osu_latency": ("osu_latency.py", ""),
}


def check(name: str, out: str) -> str | None:
    """None when ``out`` is the demo's correct output, else what is wrong."""
    if name == "cpi":
        errors = [float(e) for e in re.findall(r"error is ([0-9.]+)", out)]
        if not errors:
            return "no result printed"
        return None if all(e < 1e-10 for e in errors) else f"errors {errors}"
    if name == "mandelbrot":
        return None if "all tasks, mean:" in out else "no timing summary"
    sizes = [int(m) for m in re.findall(r"^(?:\[0\] )?\s*(\d+)\s+[0-9.]+$", out, re.M)]
    want = [0] + [2 ** i for i in range(23)]
    return None if sizes == want else f"sizes {sizes[:3]}...{sizes[-3:]} (expected 0..4194304)"


def latency_8b(out: str) -> float | None:
    m = re.search(r"^(?:\[0\] )?\s*8\s+([0-9.]+)$", out, re.M)
    return float(m.group(1)) if m else None


def run(mode: str, name: str, demo_dir: Path, np_: int, timeout: float) -> dict:
    """One demo, ``raw`` (mpiexec) or ``planaria`` (planaria run --world): its record."""
    path, stdin = DEMOS[name]
    prog = [sys.executable, str(demo_dir / path)]
    n = 2 if name == "osu_latency" else np_
    env = dict(os.environ, MPLBACKEND="Agg", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if mode == "raw":
        cmd = [str(Path(sys.executable).parent / "mpiexec"), "--with-ft", "ulfm", "--oversubscribe", "-n", str(n), *prog]
    else:
        cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(n), "--world", "--timeout", str(timeout),
               "--", *prog]
    try:
        res = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout + 30, env=env,
                             start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"demo": name, "mode": mode, "ok": False, "why": "hang"}
    why = check(name, res.stdout) if res.returncode == 0 else f"exit {res.returncode}: {res.stderr.strip()[-200:]}"
    rec = {"demo": name, "mode": mode, "ok": why is None, "why": why, "exit": res.returncode}
    if name == "osu_latency":
        rec["latency_8B_us"] = latency_8b(res.stdout)
    return rec


def _status(r: dict[str, Any]) -> str:
    return "ok" if r["ok"] else "FAIL"


def command(
    demos: str = typer.Option(",".join(DEMOS), "--demos", help="Demos, comma-separated: " + ", ".join(DEMOS) + "."),
    np_: int = typer.Option(2, "--np", help="Ranks (osu_latency always runs on 2)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds per job."),
    demo_dir: str | None = typer.Option(None, "--demo-dir", help="mpi4py's demo/ directory (default: fetched once with pip download)."),
    json_out: bool = typer.Option(False, "--json", help="Print the records as JSON."),
) -> None:
    """mpi4py's own demos, unchanged, under planaria run --world and under plain mpiexec: do they run correctly.

    Exit 0 when every demo ran correctly both ways.
    Example: python -m benchmarks mpi4py-demos --demos cpi,osu_latency
    """
    names = [d for d in demos.split(",") if d]
    unknown = [d for d in names if d not in DEMOS]
    if unknown:
        raise typer.BadParameter(f"unknown demo(s) {unknown}; expected some of {list(DEMOS)}", param_hint="--demos")
    ddir = Path(demo_dir) if demo_dir else sdist_part("demo")
    recs = [run(mode, name, ddir, np_, timeout) for name in names for mode in ("raw", "planaria")]
    if json_out:
        print(json.dumps(recs, indent=1))
    else:
        print(f"{'demo':<12} {'raw':<10} {'planaria':<10} note")
        for name in names:
            raw, pl = (r for r in recs if r["demo"] == name)
            note = ""
            if name == "osu_latency":
                note = f"8 B latency raw {raw.get('latency_8B_us')} us, planaria {pl.get('latency_8B_us')} us"
            print(f"{name:<12} {_status(raw):<10} {_status(pl):<10} {note or (pl['why'] or '')}")
    raise typer.Exit(0 if all(r["ok"] for r in recs) else 1)
