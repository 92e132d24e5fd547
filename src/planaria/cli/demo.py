"""`planaria demo`: the heat-in-a-rod job with spares, injected failures, recovery, a bit-for-bit check."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from planaria.cli._common import app, launch_job

DEFAULT_INJECT = ["kill:rank=2,iter=120", "kill:rank=4,iter=290"]


@app.command()
def demo(
    np_: int = typer.Option(6, "-n", "--np", help="Working ranks."),
    spares: int = typer.Option(2, "--spares", help="Spare processes that replace failed ones."),
    backend: str = typer.Option("auto", "--backend", help="ulfm (real ULFM), sim (simulated failures) or auto."),
    checkpoint: str = typer.Option("memory", "--checkpoint",
                                   help="memory (partner copy), xor (parity groups of 3), file, or multi "
                                        "(memory every --every steps, file every --file-every)."),
    inject: list[str] = typer.Option(None, "--inject",
                                     help="Faults to inject (default: two kills at different moments). "
                                          "Pass --inject none for a failure-free run."),
    steps: int = typer.Option(400, "--steps", help="Time steps."),
    every: int = typer.Option(50, "--every", help="Checkpoint every this many steps."),
    file_every: int = typer.Option(100, "--file-every", help="File checkpoint interval with --checkpoint multi."),
    cells_per_rank: int = typer.Option(262144, "--cells-per-rank", help="Cells per rank (262144 = 2 MiB checkpoint)."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG: temperature profile and a timeline of "
                                                          "failures and recoveries."),
    timeout: float = typer.Option(600.0, "--timeout", help="Bound on the whole job, seconds."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    when_exhausted: str = typer.Option("stop", "--when-exhausted",
                                       help="When more ranks fail than there are spares: stop (exit 3), or "
                                            "continue on fewer ranks (the rod is split again over the "
                                            "processes left)."),
) -> None:
    """Solve the heat equation in a rod on N working ranks plus spares, kill ranks on the way, recover, check.

    A failed rank is replaced by a spare that takes its place in the rod; everyone restores the
    newest checkpoint every rank can still reach and resumes. The final temperature field must
    equal a failure-free serial run bit for bit; the exit status is 0 only if it does (3 when
    more ranks fail than there are spares, unless --when-exhausted continue: then the job goes
    on with fewer working ranks).

    Examples:

      planaria demo

      planaria demo --backend sim --checkpoint xor --plot heat.png

      planaria demo --inject 'kill:rank=1,iter=50' --inject 'kill:rank=3,phase=recover'

      planaria demo --inject none --json

      planaria demo --spares 1 --when-exhausted continue
    """
    from planaria.launch.options import RunOptions

    _check((("-n", np_, 1), ("--spares", spares, 0), ("--steps", steps, 1), ("--every", every, 1),
            ("--file-every", file_every, 1), ("--cells-per-rank", cells_per_rank, 1)), checkpoint, when_exhausted)
    from planaria.util.fsutil import output_problem
    problem = output_problem(plot) if plot is not None else None
    if plot is not None and not problem:
        from planaria.demo.plot import matplotlib_missing
        problem = matplotlib_missing()
    if problem:
        typer.echo(f"planaria demo: --plot {plot}: {problem}", err=True)
        raise typer.Exit(2)
    plan = DEFAULT_INJECT if not inject else ([] if inject == ["none"] else list(inject))
    cmd = [sys.executable, "-m", "planaria.demo.heat", "--steps", str(steps), "--every", str(every),
           "--cells-per-rank", str(cells_per_rank), "--checkpoint", checkpoint, "--file-every", str(file_every),
           "--when-exhausted", when_exhausted]
    opts = RunOptions(command=cmd, nprocs=np_, spares=spares, backend=backend, inject=plan, timeout=timeout,
                      json=json_out, emit_summary=False, prog="planaria demo",
                      recovery_table=False)
    jobdirs: list[Path] = []
    opts.on_jobdir = jobdirs.append
    code = launch_job(opts)
    _tell(code, _report(jobdirs[0]) if jobdirs else None, plot, json_out)


def _check(least: tuple[tuple[str, int, int], ...], checkpoint: str, when_exhausted: str) -> None:
    """Exit 2 with one line when a number is below its least value (``(option, value, least)``) or
    a choice is unknown."""
    for name, value, low in least:
        if value < low:
            typer.echo(f"planaria demo: {name} must be at least {low} (got {value})", err=True)
            raise typer.Exit(2)
    if checkpoint not in ("memory", "xor", "file", "multi"):
        typer.echo(f"planaria demo: unknown --checkpoint {checkpoint!r} (expected memory, xor, file or multi)", err=True)
        raise typer.Exit(2)
    if when_exhausted not in ("stop", "continue"):
        typer.echo(f"planaria demo: unknown --when-exhausted {when_exhausted!r} (expected stop or continue)",
                   err=True)
        raise typer.Exit(2)


def _tell(code: int, report: dict[str, Any] | None, plot: Path | None, json_out: bool) -> None:
    """The demo's table (or JSON) and plot; exits with its status (0 only for a bit-identical result)."""
    from planaria.launch.options import EXIT_USAGE

    if report is None:
        if code == EXIT_USAGE:                       # the run already named the problem in one line
            raise typer.Exit(code)
        typer.echo("planaria demo: the job ended without a result (see the summary above)", err=True)
        raise typer.Exit(code or 1)
    if json_out:
        typer.echo(json.dumps(report, indent=2))
    else:
        _print(report)
    if plot is not None and report.get("outcome") == "finished":
        from planaria.demo.plot import plot_report
        plot_report(report, plot)
        if not json_out:
            typer.echo(f"plot written to {plot}")
    if report.get("outcome") != "finished":
        raise typer.Exit(3)
    ok = report.get("bit_identical") is True and code == 0
    raise typer.Exit(0 if ok else (code or 1))


def _report(jobdir: Path) -> dict[str, Any] | None:
    """This run's demo.json, with kill times and detection delays from its summary; None if it wrote none."""
    path = jobdir / "demo.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    summary = jobdir / "summary.json"
    if summary.exists():
        run = json.loads(summary.read_text())
        report["run"] = {k: v for k, v in run.items() if k != "ranks"}
        kills = sorted((r["injected"]["t"], r["rank"]) for r in run.get("ranks", [])
                       if r.get("state") == "failed" and (r.get("injected") or {}).get("t"))
        report["kills"] = [{"t": t, "rank": rank} for t, rank in kills]
        for ev in report.get("failures", []):
            before = [t for t, _ in kills if t <= ev["t_detect"]]
            if before:
                ev["detection_s"] = ev["t_detect"] - before[-1]
    report["jobdir"] = str(jobdir)
    report["report_file"] = str(path)
    return report


def _print(report: dict[str, Any]) -> None:
    from rich.console import Console
    con = Console()
    if report.get("outcome") != "finished":
        con.print(f"[bold red]{report.get('outcome')}[/]: {report.get('message')}")
        con.print(f"job directory: {report['jobdir']}")
        return
    end = report.get("ranks_end", report["ranks"])
    title = (f"heat in a rod: {report['cells']:,} cells, {report['steps']} steps, {report['ranks']} working "
             f"+ {report['spares']} spare ranks" + (f" ({end} working at the end)" if end != report["ranks"] else "")
             + f", {report['checkpoint']} checkpoints ({report['backend']})")
    from planaria.launch.recoveries import print_recoveries
    print_recoveries(con, report["failures"], title)
    ck = report["checkpoint_s"]
    if ck["count"]:
        con.print(f"checkpoints: {ck['count']} × {report['checkpoint_bytes_per_rank'] / 2**20:.1f} MiB per rank, "
                  f"median {ck['median'] * 1e3:.1f} ms, max {ck['max'] * 1e3:.1f} ms")
    con.print(f"elapsed {report['elapsed_s']:.2f} s; final field "
              + ("[bold green]equals the failure-free serial run bit for bit[/]" if report["bit_identical"]
                 else f"[bold red]differs from the serial run (max |diff| {report['max_abs_diff']:.3g})[/]"))
    con.print(f"job directory: {report['jobdir']}")
