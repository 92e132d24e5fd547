"""``planaria abft slope|cutdepth``: N-ABFT terrain analysis on N workers and two masters ([Song 2013]).

Runs :mod:`planaria.abft.masterworker` with N+2 ranks under ``planaria run`` (failures are tracked
in the job directory as for any job), then prints the report. The report is also kept as
``<out>.abft.json``.

``--force KIND:WORKER`` names a *worker index* 0..N-1 (worker w is MPI rank w+2; ranks 0 and 1
are the masters). ``--inject`` plans of ``planaria run`` name MPI ranks, as everywhere else.

Exit status: 0 every block was verified correct and the output written; 3 it was not
(no live worker left, an undecidable comparison, or the job ended without a report); 2 usage error;
124 the job ran into --timeout (a process never ended), whatever the report says.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NoReturn

import typer

from planaria.abft.names import KINDS, MODES
from planaria.cli._common import launch_job
from planaria.cli.terrain import DTYPE_HELP

app = typer.Typer(name="abft", help="Fault-tolerant terrain analysis (N-ABFT, two masters verify N workers).",
                  no_args_is_help=True, add_completion=False)


_FORCE_HELP = (f"Force a fault KIND:WORKER ({', '.join(KINDS)}) on the first task of worker WORKER, a worker "
               "index 0..N-1 (MPI rank WORKER+2). Repeatable.")


_PLOT_HELP = ("Also write a PNG: the located errors and the recovered blocks' row bands over the input DEM "
              "(needs matplotlib, the plot extra).")


def _usage(msg: str) -> NoReturn:
    typer.echo(f"planaria abft: {msg}", err=True)
    raise typer.Exit(2)


def _same_file(dem: str, out: str) -> bool:
    """``out`` names the file ``dem`` (also through another spelling, a symlink or a hard link)."""
    try:
        if Path(out).exists():
            return os.path.samefile(dem, out)
    except OSError:
        return False
    return Path(out).resolve() == Path(dem).resolve()


def _check(dem: str, n: int, out: str, error_rate: float, backend: str, timeout: float, force: list[str],
           inject: list[str], mode: str, dtype: str) -> str | None:
    """Exit 2 with one line on a wrong option; the output's dtype (None: the input's)."""
    if n < 1:
        _usage(f"-n must be at least 1 (got {n})")
    if not 0.0 <= error_rate <= 1.0:
        _usage(f"--error-rate must be in [0, 1] (got {error_rate})")
    if backend not in ("ulfm", "sim", "auto"):
        _usage(f"unknown --backend {backend!r} (expected ulfm or sim)")
    if mode not in MODES:
        _usage(f"unknown --mode {mode!r} (expected {', '.join(MODES)})")
    if timeout <= 0:
        _usage(f"--timeout must be positive (got {timeout})")
    from planaria.cli.terrain import parse_dtype
    try:
        out_dtype = parse_dtype(dtype)
    except ValueError as exc:
        _usage(str(exc))
    if not Path(dem).is_file():
        _usage(f"--dem {dem}: no such file")
    if _same_file(dem, out):
        _usage(f"--out {out} is the input DEM {dem}; give another output file")
    for item in force:
        kind, _, worker = item.partition(":")
        if kind not in KINDS or not (worker.isascii() and worker.isdigit()) or not int(worker) < n:
            _usage(f"--force {item!r}: expected KIND:WORKER, KIND in {', '.join(KINDS)}, WORKER a worker index in 0..{n - 1}")
    if inject:
        from planaria.inject.plan import Plan, PlanError
        try:
            Plan.parse(list(inject)).validate(n + 2)
        except PlanError as exc:
            _usage(" ".join(str(exc).split()))
    try:
        from planaria.terrain import check_output, dem_info
        from planaria.terrain.dispatch import method_of
        method_of()                     # PLANARIA_TERRAIN_KERNELS, read by every rank
        rows = dem_info(dem).shape[0]
        check_output(out)
    except ValueError as exc:
        _usage(str(exc))
    if rows < n:
        _usage(f"{rows} rows cannot be split over {n} workers")
    return out_dtype


def _check_plot(plot: Path | None) -> None:
    """Exit 2 with one line when the picture could not be written (before the run, so it is not lost)."""
    if plot is None:
        return
    from planaria.util.fsutil import output_problem
    problem = output_problem(plot)
    if not problem:
        from planaria.demo.plot import matplotlib_missing
        problem = matplotlib_missing()
    if problem:
        _usage(f"--plot {plot}: {problem}")


def _plot(report: dict, dem: str, plot: Path, as_json: bool) -> None:
    """Draw the run's picture (also of a failed run: where it failed is what it shows)."""
    from planaria.abft.plot import plot_run
    try:
        plot_run(report, dem, plot)
    except (RuntimeError, ValueError, OSError) as exc:
        typer.echo(f"planaria abft: --plot {plot}: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(3) from None
    typer.echo(f"plot written to {plot}", err=as_json)


def _run(kernel: str, dem: str, n: int, out: str, error_rate: float, seed: int, backend: str,
         timeout: float, as_json: bool, force: list[str], inject: list[str], mode: str = "abft",
         dtype: str = "auto", plot: Path | None = None) -> None:
    from planaria.launch.options import RunOptions

    out_dtype = _check(dem, n, out, error_rate, backend, timeout, force, inject, mode, dtype)
    _check_plot(plot)
    out_p = Path(out).resolve()
    report_p = Path(str(out_p) + ".abft.json")
    report_p.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "planaria.abft.masterworker", "--kernel", kernel, "--dem", str(Path(dem).resolve()),
           "--out", str(out_p), "--error-rate", str(error_rate), "--seed", str(seed), "--report", str(report_p), "--mode", mode]
    for item in force:
        cmd += ["--force", item]
    if out_dtype is not None:
        cmd += ["--dtype", out_dtype]
    opts = RunOptions(command=cmd, nprocs=n + 2, backend=backend, inject=list(inject), timeout=timeout,
                      json=as_json, emit_summary=False, detect=False, diagnose_on_timeout=False)
    code = launch_job(opts)
    report = None
    if report_p.is_file():
        report = json.loads(report_p.read_text())
    if report is None:
        if as_json:
            typer.echo(json.dumps({"ok": False, "error": "the job ended without a report", "job_exit": code}))
        else:
            typer.echo(f"planaria abft: the job ended without a report (job exit status {code})", err=True)
        raise typer.Exit(3)
    report["job_exit"] = code
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        _print(report, out_p)
    if plot is not None:
        _plot(report, dem, plot, as_json)
    if code == 124:     # the output was written, but a process outlived the job: the run hung
        typer.echo(f"planaria abft: the job ran into --timeout ({timeout:g} s) after writing its output", err=True)
        raise typer.Exit(124)
    raise typer.Exit(0 if report.get("ok") else 3)


def _print(r: dict, out: Path) -> None:
    from rich.console import Console

    from planaria.cli.abftreport import print_report
    print_report(Console(), r, out)


def _command(kernel: str):
    def cmd(
        dem: str = typer.Option(..., "--dem", help="Input DEM (.npy, .npz, GeoTIFF)."),
        n: int = typer.Option(..., "-n", help="Number of workers N (N+2 ranks are launched)."),
        out: str = typer.Option(..., "--out", help="Output raster (same formats)."),
        error_rate: float = typer.Option(0.0, "--error-rate", help="Probability that a worker suffers one injected fault."),
        seed: int = typer.Option(0, "--seed", help="Seed of the injected faults."),
        backend: str = typer.Option("ulfm", "--backend", help="Failure backend: ulfm or sim."),
        timeout: float = typer.Option(600.0, "--timeout", help="Stop the job after S seconds."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
        force: list[str] = typer.Option([], "--force", help=_FORCE_HELP),
        inject: list[str] = typer.Option([], "--inject", help="planaria run fault plan, e.g. 'kill:rank=3,iter=1'."),
        mode: str = typer.Option("abft", "--mode", help="abft (redundant rows, default), plain (no check) or "
                                 "duplicate (every block computed twice and compared)."),
        dtype: str = typer.Option("auto", "--dtype", help=DTYPE_HELP),
        plot: Path | None = typer.Option(None, "--plot", help=_PLOT_HELP),
    ) -> None:
        _run(kernel, dem, n, out, error_rate, seed, backend, timeout, as_json, force, inject, mode, dtype, plot)
    cmd.__doc__ = f"{kernel} with N-ABFT: the result equals the serial one when every block verifies."
    return cmd


app.command("slope")(_command("slope"))
app.command("cutdepth")(_command("cutdepth"))
