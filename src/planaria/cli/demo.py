"""`planaria demo`: the heat-in-a-rod job, with injected failures, recovered, checked bit for bit."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from planaria.cli.main import app

DEFAULT_INJECT = ["kill:rank=2,iter=120", "kill:rank=4,iter=290"]


@app.command()
def demo(
    np_: int = typer.Option(6, "-n", "--np", help="Working ranks."),
    backend: str = typer.Option("auto", "--backend", help="ulfm (real ULFM), sim (simulated failures) or auto."),
    inject: list[str] = typer.Option(None, "--inject",
                                     help="Faults to inject (default: two kills at different moments). "
                                          "Pass --inject none for a failure-free run."),
    steps: int = typer.Option(400, "--steps", help="Time steps."),
    every: int = typer.Option(50, "--every", help="Checkpoint every this many steps."),
    cells_per_rank: int = typer.Option(262144, "--cells-per-rank", help="Cells per rank (262144 = 2 MiB checkpoint)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Bound on the whole job, seconds."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
) -> None:
    """Solve the heat equation in a rod on N ranks, kill ranks on the way, recover, and check the result.

    The survivors revoke, shrink, restore the newest in-memory checkpoint that still covers
    the whole rod (each block is duplicated at a partner), redistribute the rod and resume.
    The final temperature field must equal a failure-free serial run bit for bit; the exit
    status is 0 only if it does.

    Examples:

      planaria demo

      planaria demo --backend sim --inject 'kill:rank=1,iter=50' --inject 'kill:rank=3,iter=200'

      planaria demo --inject none --json
    """
    from planaria.launch.runner import RunOptions, run_job

    plan = DEFAULT_INJECT if not inject else ([] if inject == ["none"] else list(inject))
    cmd = [sys.executable, "-m", "planaria.demo.heat", "--steps", str(steps), "--every", str(every),
           "--cells-per-rank", str(cells_per_rank)]
    opts = RunOptions(command=cmd, nprocs=np_, backend=backend, inject=plan, timeout=timeout, json=json_out,
                      emit_summary=False)
    code = run_job(opts)
    report = _report(opts)
    if report is None:
        typer.echo("planaria demo: the job ended without a result (see the summary above)", err=True)
        raise typer.Exit(code or 1)
    if json_out:
        typer.echo(json.dumps(report, indent=2))
    else:
        _print(report)
    ok = report.get("bit_identical") is True and code == 0
    raise typer.Exit(0 if ok else (code or 1))


def _report(opts: object) -> dict | None:
    from planaria.launch.jobdir import jobs_root
    root = Path(jobs_root())
    jobs = sorted(root.glob("*/demo.json"), key=lambda p: p.stat().st_mtime) if root.exists() else []
    if not jobs:
        return None
    report = json.loads(jobs[-1].read_text())
    summary = jobs[-1].parent / "summary.json"
    if summary.exists():
        kills = {}
        run = json.loads(summary.read_text())
        report["run"] = run
        for r in run.get("ranks", []):
            inj = r.get("injected") or {}
            if r.get("state") == "failed" and inj.get("t"):
                kills[r["rank"]] = inj["t"]
        report["kills"] = kills
        times = sorted(kills.values())
        for ev, t_kill in zip(report["failures"], times):
            ev["detection_s"] = ev["t_detect"] - t_kill
    report["jobdir"] = str(jobs[-1].parent)
    return report


def _print(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    con = Console(stderr=False)
    t = Table(title=f"heat in a rod: {report['cells']:,} cells, {report['steps']} steps, "
                    f"{report['ranks_start']} → {report['ranks_end']} ranks ({report['backend']})")
    for col in ("failure", "detected at step", "detection ms", "shrink ms", "recovery ms", "resumed from step", "ranks left"):
        t.add_column(col, justify="right")
    for k, ev in enumerate(report["failures"], 1):
        det = ev.get("detection_s")
        t.add_row(str(k), str(ev["detected_at_step"]), "-" if det is None else f"{det * 1e3:.1f}",
                  f"{ev['shrink_s'] * 1e3:.1f}", f"{ev['recovery_s'] * 1e3:.1f}",
                  str(ev["restored_version"]), str(ev["ranks_left"]))
    con.print(t)
    ck = report["checkpoint_s"]
    if ck["count"]:
        con.print(f"checkpoints: {ck['count']} × {report['checkpoint_bytes_per_rank'] / 2**20:.1f} MiB per rank "
                  f"(memory, duplicated at a partner), median {ck['median'] * 1e3:.1f} ms, max {ck['max'] * 1e3:.1f} ms")
    con.print(f"elapsed {report['elapsed_s']:.2f} s; final field "
              + ("[bold green]equals the failure-free serial run bit for bit[/]" if report["bit_identical"]
                 else f"[bold red]differs from the serial run (max |diff| {report['max_abs_diff']:.3g})[/]"))
    con.print(f"job directory: {report['jobdir']}")
