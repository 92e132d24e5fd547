"""``planaria diagnose``: explain a hung job -- offline from a state file (online collection plugs in here)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer


def diagnose(
    job: Optional[str] = typer.Argument(None, help="Job to collect the state of (online collection)."),
    offline: Optional[Path] = typer.Option(None, "--offline", metavar="STATEFILE",
                                           help="Analyse a state file (.state) written by an earlier collection."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
) -> None:
    """Tell why a job hangs: who everyone waits on, what it does, and where.

    The analysis (paper 000, section 2.3) merges every rank's state, counts
    the ranks that gave none (dead or unreachable, grouped by host), matches
    collectives per communicator (who has not arrived, and what it does
    instead) and follows point-to-point waits to the root causes: ranks
    without state, ranks computing or blocked outside MPI, wait cycles
    (deadlock), collectives that every member entered.

    Examples:

      planaria diagnose --offline job.state

      planaria diagnose --offline job.state --json > report.json

    Exit status: 0 a report was produced (see its verdict), 2 bad arguments
    or an unusable state file.
    """
    if offline is None:
        raise typer.Exit(online(job, json_out))
    if job is not None:
        print("planaria diagnose: give a JOB or --offline STATEFILE, not both", file=sys.stderr)
        raise typer.Exit(2)
    raise typer.Exit(run_offline(offline, json_out))


def online(job: str | None, json_out: bool) -> int:
    """Collect the state of a running job and analyse it (not available in this build)."""
    if job is None:
        print("planaria diagnose: give a JOB or --offline STATEFILE", file=sys.stderr)
        return 2
    print("planaria diagnose: online collection is not available in this build", file=sys.stderr)
    return 2


def run_offline(path: Path, json_out: bool) -> int:
    """Read ``path``, analyse it, print the report; 2 with one line on stderr if the file is unusable."""
    from planaria.diagnose.offline import diagnose as analyse
    from planaria.diagnose.state import read_state

    try:
        report = analyse(read_state(path))
    except ValueError as e:
        print(f"planaria diagnose: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2) if json_out else report.to_text())
    return 0
