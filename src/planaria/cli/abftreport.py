"""The text form of an N-ABFT report (``planaria abft`` without ``--json``), readable at 80 columns.

Each line holds one fact; a line longer than the terminal wraps between words with its
continuation indented (a path is never split). Workers are named by their index 0..N-1, the one
``--force`` takes, with their MPI rank (the report's JSON names them by rank; docs/abft.md).
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

#: MPI rank of worker 0 (ranks 0 and 1 are the masters)
FIRST_WORKER_RANK = 2
STATUS = {0: "unrecoverable", 1: "transient"}


def worker_name(rank: Any) -> str:
    """``worker 1 (rank 3)`` for MPI rank 3."""
    if not isinstance(rank, int):
        return f"worker {rank}"
    return f"worker {rank - FIRST_WORKER_RANK} (rank {rank})"


def _where(where: Any) -> str:
    """Where an injected fault struck: its phase, or the copy, row, column and bit it flipped."""
    if not isinstance(where, dict):
        return str(where)
    if "phase" in where:
        return str(where["phase"])
    return ", ".join(f"{k} {v}" for k, v in where.items())


def _yes(value: Any) -> str:
    return {True: "yes", False: "no"}.get(value, str(value))


def heading(r: dict[str, Any]) -> str:
    """The run in one line: kernel, workers and their ranks, raster shape, mode."""
    n = r.get("workers")
    shape = r.get("shape") or []
    cells = " x ".join(str(s) for s in shape) + " cells" if shape else "?"
    ranks = f" (MPI ranks {FIRST_WORKER_RANK}..{n + FIRST_WORKER_RANK - 1})" if isinstance(n, int) else ""
    return f"N-ABFT {r.get('kernel')} on {n} workers{ranks}, {cells}, mode {r.get('mode', 'abft')}"


def errors_table(r: dict[str, Any]) -> Table:
    """One row per block that failed verification in a round."""
    t = Table(title="blocks that failed verification", title_justify="left")
    for name in ("round", "block", "worker", "rank", "status"):
        t.add_column(name, no_wrap=True)
    t.add_column("detail", ratio=1, overflow="fold")
    for e in r.get("errors", []):
        w = e.get("worker")
        t.add_row(str(e.get("round")), str(e.get("block")),
                  str(w - FIRST_WORKER_RANK) if isinstance(w, int) else str(w), str(w),
                  STATUS.get(e.get("status"), str(e.get("status"))), str(e.get("error")))
    return t


def facts(r: dict[str, Any], out: Path) -> list[tuple[str, str]]:
    """The report's lines after the table, each with its style ('' for none)."""
    lines: list[tuple[str, str]] = []
    for a in r.get("recoveries", []):
        src = f", from {worker_name(a['source'])}" if a.get("source") is not None else ""
        lines.append((f"round {a.get('round')}: {a.get('action')} block {a.get('block')} on "
                      f"{worker_name(a.get('worker'))}{src}", ""))
    lines.append((f"rounds {r.get('rounds')}, finished by the {r.get('finisher')} master, "
                  f"replica agreed: {_yes(r.get('replica_agreed'))}", ""))
    tm = r.get("timings", {})
    lines.append((f"time: compute {tm.get('compute', 0):.3f} s, verification {tm.get('verification', 0):.4f} s, "
                  f"recovery {tm.get('recovery', 0):.4f} s", ""))
    for f in r.get("injected", []):
        lines.append((f"injected {f.get('kind')} on worker {f.get('worker')} (rank {f.get('rank')}), "
                      f"block {f.get('block')}: {_where(f.get('where'))}", ""))
    if r.get("ok") and r.get("verified") is False:
        lines.append((f"output written without verification (mode {r.get('mode')}, "
                      f"{r.get('workers')} worker(s))", "yellow"))
    elif r.get("ok"):
        lines.append(("every block verified", "green"))
    else:
        lines.append((f"not verified: {r.get('fatal', 'see the report')}", "red"))
    if r.get("ok"):
        lines.append((f"output: {out}", ""))
        if r.get("digest"):
            lines.append((f"digest: {r.get('digest')}", ""))
    return lines


def wrap(line: str, width: int) -> str:
    """``line`` wrapped between words at ``width`` (at least 40), continuations indented."""
    return textwrap.fill(line, width=max(40, width), subsequent_indent="    ",
                         break_long_words=False, break_on_hyphens=False)


def print_report(con: Console, r: dict[str, Any], out: Path) -> None:
    """The whole text report on ``con``, wrapped at its width."""
    con.print(wrap(heading(r), con.width), soft_wrap=True, markup=False, highlight=False)
    if r.get("errors"):
        con.print(errors_table(r))
    else:
        con.print("no errors detected", markup=False, highlight=False)
    for line, style in facts(r, out):
        con.print(wrap(line, con.width), style=style or None, soft_wrap=True, markup=False, highlight=False)
