"""``planaria campaign``: random fault plans from a seed over the demo, an application and ABFT, each run classified."""
from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

import typer


def _usage(msg: str) -> None:
    """One line on stderr, exit 2."""
    typer.echo(f"planaria campaign: {msg}", err=True)
    raise typer.Exit(2)


def _int(name: str, text: str, least: int | None = None) -> int:
    """An integer option's value (ASCII digits), or a usage error."""
    if not re.fullmatch(r"-?[0-9]+", text.strip()):
        _usage(f"{name} {text!r}: expected an integer")
    value = int(text.strip())
    if least is not None and value < least:
        _usage(f"{name} must be at least {least} (got {value})")
    return value


def campaign(
    runs: str = typer.Option("30", "--runs", metavar="N",
                             help="Number of runs (targets and backends take turns)."),
    targets: str = typer.Option("demo,app,abft", "--targets", metavar="LIST",
                                help="Comma-separated: demo, app, abft."),
    backends: str = typer.Option("ulfm,sim", "--backends", metavar="LIST", help="Comma-separated: ulfm, sim."),
    seed: str = typer.Option("1", "--seed", metavar="INT",
                             help="Seed of the fault plans: the same seed draws the same plans."),
    first: str = typer.Option("0", "--first", metavar="K",
                              help="Start at run K: --first 0 --runs 200 and --first 200 --runs 800 are "
                                   "together the runs of --runs 1000."),
    timeout: str = typer.Option("90", "--timeout", metavar="SECONDS",
                                help="Each job's --timeout in seconds; the campaign kills a command itself "
                                     "30 s later."),
    keep: bool = typer.Option(False, "--keep", help="Keep every run's directory (job directories, outputs, "
                                                    "checkpoints); by default only bad runs' are kept."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON record of every run instead of the table."),
    app_path: Optional[Path] = typer.Option(None, "--app", help="The application of the 'app' target (default: "
                                                                "examples/resilient_app.py of this source tree)."),
) -> None:
    """Run a fault campaign: random fault plans drawn from --seed, every run bounded and classified.

    Targets: 'demo' (planaria demo, 6 working ranks + 2 spares, every checkpoint store),
    'app' (examples/resilient_app.py under planaria run, memory or file checkpoints,
    checkpoint files damaged between two runs) and 'abft' (planaria abft slope|cutdepth on a
    small DEM, random and forced worker faults, master kills). Faults: kills at iterations,
    in checkpoint, recover and finish, of spares, of adjacent ranks at once, at times near the
    start and the end, random (MTBF) kills, bit flips, I/O errors on checkpoint files.

    Each run is correct, a documented exit (exit 3: spares exhausted, unrecoverable, ABFT
    cannot correct), a library crash (a documented stop that only Open MPI's known crash of
    surviving processes explains), wrong, hung or unexplained. The table counts them per target and
    backend; every bad run is listed with its plan and the commands that replay it. See
    docs/campaign.md.

    Exit status: 0 no run was wrong, hung or unexplained; 1 some were; 2 bad input.

    Examples:

      planaria campaign --runs 12 --seed 7

      planaria campaign --runs 200 --targets app --backends ulfm --timeout 60

      planaria campaign --runs 30 --json > campaign.json

      planaria campaign --seed 7 --first 200 --runs 800       # runs 200-999 of seed 7's campaign
    """
    from planaria.campaign import plans

    n = _int("--runs", runs, least=1)
    k0 = _int("--first", first, least=0)
    s = _int("--seed", seed)
    t = float(timeout) if re.fullmatch(r"[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?|[0-9]+\.", timeout.strip()) else math.nan
    if not math.isfinite(t) or t <= 0:
        _usage(f"--timeout {timeout!r}: expected a positive number of seconds")
    try:
        names = plans.parse_list(targets, plans.TARGETS, "targets")
        bks = plans.parse_list(backends, plans.BACKENDS, "backends")
    except ValueError as exc:
        _usage(str(exc))
    from planaria.campaign import targets as tg
    app = app_path.resolve() if app_path is not None else tg.find_app()
    if "app" in names and (app is None or not app.is_file()):
        _usage(f"--app {app_path}: no such file" if app_path is not None
               else "examples/resilient_app.py not found (pass --app PATH)")
    code = _run(plans.schedule(s, n, names, bks, first=k0), s, t, keep, json_out, app, names, bks)
    raise typer.Exit(code)


def _run(todo: list[Any], seed: int, timeout: float, keep: bool, json_out: bool, app: Path | None,
         names: list[str], bks: list[str]) -> int:
    """Execute the plans with a progress bar, print the report; the exit status."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from planaria.campaign import report
    from planaria.campaign import targets as tg

    import signal

    def _interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    # Ctrl-C, and a kill or a batch system's SIGTERM, end the campaign with the report of the runs
    # done (a shell starts background commands with SIGINT ignored: take it back)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    root = Path(tempfile.mkdtemp(prefix="planaria-campaign-"))
    ctx = tg.Context(root=root, timeout=timeout, app=app, keep=keep)
    header = {"seed": seed, "timeout": timeout, "targets": names, "backends": bks, "directory": str(root)}
    err = Console(stderr=True)
    records: list[tg.RunRecord] = []
    interrupted = False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("campaign", total=len(todo))
        try:
            for p in todo:
                nbad = len(report.bad(records))
                bar.update(task, description=f"run {p.index} {p.target}/{p.backend}" + (f" ({nbad} bad)" if nbad else ""))
                records.append(tg.execute(p, ctx))
                bar.advance(task)
        except KeyboardInterrupt:
            interrupted = True
    bad = report.bad(records)
    if json_out:
        typer.echo(json.dumps(report.to_json(records, header | {"interrupted": interrupted}), indent=1))
    else:
        report.print_report(records, header)
    if not bad and not keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        err.print(f"run directories kept under {root}", highlight=False)
    if interrupted:
        err.print(f"interrupted after {len(records)} of {len(todo)} run(s)")
        return 130
    return 1 if bad else 0
