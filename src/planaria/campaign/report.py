"""The campaign's report: counts per target and backend, every bad run with its plan and replay, or JSON."""
from __future__ import annotations

from collections import Counter
from typing import Any

from planaria.campaign.classify import BAD, CLASSES, LIBRARY
from planaria.campaign.targets import RunRecord


def counts(records: list[RunRecord]) -> dict[tuple[str, str], Counter[str]]:
    """Runs per class for each (target, backend), in the order they first ran."""
    out: dict[tuple[str, str], Counter[str]] = {}
    for r in records:
        out.setdefault((r.plan.target, r.plan.backend), Counter())[r.cls] += 1
    return out


def bad(records: list[RunRecord]) -> list[RunRecord]:
    """The runs that were wrong, hung or unexplained."""
    return [r for r in records if r.cls in BAD]


def to_json(records: list[RunRecord], header: dict[str, Any]) -> dict[str, Any]:
    """The whole campaign as JSON data: settings, counts, and every run."""
    table = [{"target": t, "backend": b, "runs": sum(c.values()), **{k: c.get(k, 0) for k in CLASSES}}
             for (t, b), c in counts(records).items()]
    total = Counter(r.cls for r in records)
    return {**header, "counts": table, "total": {k: total.get(k, 0) for k in CLASSES},
            "bad": len(bad(records)), "runs": [r.to_json() for r in records]}


def print_report(records: list[RunRecord], header: dict[str, Any], console: Any = None) -> None:
    """The rich table of counts, then each bad run's plan, reason and replay commands."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    span = f" (runs {records[0].plan.index}-{records[-1].plan.index})" if records and records[0].plan.index else ""
    t = Table(title=f"fault campaign: {len(records)} run(s){span}, seed {header.get('seed')}, "
                    f"--timeout {header.get('timeout', 0):g} s")
    t.add_column("target")
    t.add_column("backend")
    t.add_column("runs", justify="right")
    for k in CLASSES:
        t.add_column(k, justify="right")
    total: Counter[str] = Counter()
    for (target, backend), c in counts(records).items():
        total.update(c)
        t.add_row(target, backend, str(sum(c.values())), *[_cell(k, c.get(k, 0)) for k in CLASSES])
    t.add_section()
    t.add_row("all", "", str(len(records)), *[_cell(k, total.get(k, 0)) for k in CLASSES])
    con.print(t)
    crashed = [r for r in records if r.cls == LIBRARY]
    if crashed:
        con.print(f"{len(crashed)} run(s) where the MPI library crashed (see docs/recovery.md):")
        _listing(con, crashed)
    worst = bad(records)
    if not worst:
        con.print("[green]no run was wrong, hung or unexplained[/green]")
        return
    con.print(f"[red]{len(worst)} bad run(s)[/red]:")
    _listing(con, worst)


def _listing(con: Any, runs: list[RunRecord]) -> None:
    """Each run's class, reason, plan and the commands that replay it."""
    for r in runs:
        con.print(f"[bold]run {r.plan.index}[/bold] {r.plan.target} on {r.plan.backend}: "
                  f"[red]{r.cls}[/red]: {r.reason}", highlight=False)
        con.print(f"  plan: {r.plan.describe()}", highlight=False, markup=False, soft_wrap=True)
        for line in r.replay:
            con.print(f"  replay: {line}", highlight=False, markup=False, soft_wrap=True)
        if r.directory:
            con.print(f"  kept: {r.directory}", highlight=False, markup=False)


def _cell(cls: str, n: int) -> str:
    """A count, red when it is a bad class and not zero."""
    return f"[red]{n}[/red]" if n and cls in BAD else str(n)
