"""``planaria checkpoints``: the file checkpoints of a job or of a store directory, like SCR's ``scr_index``.

Exit status: 0 a restart has a version to resume from (with ``--verify``: the one it would take
checked out), 1 with ``--verify``, the version a restart would take is damaged (it falls back to
an older one), 2 bad input, 3 nothing restorable.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Optional

import typer

if TYPE_CHECKING:
    from planaria.checkpoint.inventory import Inventory, Version

DAMAGED, BAD_INPUT, NOTHING = 1, 2, 3


def _fail(msg: str, code: int = BAD_INPUT) -> NoReturn:
    print(f"planaria checkpoints: {msg}", file=sys.stderr)
    raise typer.Exit(code)


def _stores(spec: str) -> tuple[list[Path], str | None, int | None]:
    """The store directories ``spec`` names (a store directory, a job directory, a job id or
    ``latest``), the job's id and its number of working ranks (None for a store directory)."""
    from planaria.checkpoint.inventory import find_stores, is_store_dir
    if is_store_dir(spec):
        return [Path(spec)], None, None
    from planaria.launch.client import ToolError, find_job
    try:
        jd = find_job(spec)
    except (ToolError, FileNotFoundError) as exc:
        _fail(str(exc))
    try:
        nranks: int | None = int(jd.manifest().get("nranks") or 0) or None
    except (OSError, ValueError, TypeError):
        nranks = None
    found = find_stores(jd.path)
    if not found:
        _fail(f"no file checkpoints in {jd.path} (looked for version directories v00000000... "
              f"up to 3 levels down, e.g. {jd.path / 'checkpoints'})")
    return found, jd.id, nranks


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    x = n / 1024
    for unit in ("KiB", "MiB"):
        if x < 1024:
            return f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} GiB"


def _per_rank(v: Version) -> str:
    sizes = [f.size for f in v.ranks if f.size is not None]
    if not sizes:
        return "-"
    lo, hi = min(sizes), max(sizes)
    return _size(lo) if lo == hi else f"{_size(lo)}-{_size(hi)}"


def _level(v: Version, multilevel: dict[str, Any] | None) -> str:
    if v.level is None or not multilevel:
        return "file"
    lv = next((x for x in multilevel["levels"] if isinstance(x, dict) and x.get("level") == v.level), {})
    return f"{v.level}: file, {_every(lv.get('every')).removesuffix(' checkpoint')}"


def _every(k: Any) -> str:
    """``every checkpoint``, ``every 4th checkpoint``."""
    try:
        n = int(k)
    except (TypeError, ValueError):
        return "interval unknown"
    if n == 1:
        return "every checkpoint"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"every {n}{suffix} checkpoint"


def _caption(inv: Inventory) -> str:
    """What the table cannot show: the levels in memory, and the restart's choice."""
    lines = []
    for s in inv.stores:
        for lv in (s.multilevel or {}).get("levels", []):
            if isinstance(lv, dict) and lv.get("kind") != "file" and lv.get("directory") is None:
                lines.append(f"level {lv.get('level')} ({lv.get('kind')}, {_every(lv.get('every'))}) "
                             "lives in the processes' memory: not visible on disk")
    if not lines:
        lines.append("only file checkpoints are visible on disk (memory and XOR levels live in the processes' memory)")
    return "\n".join(dict.fromkeys(lines))


def _status(v: Version, inv: Inventory) -> str:
    text = {"complete": "ok" if inv.verified else "complete", "incomplete": "[yellow]incomplete[/]",
            "damaged": "[red]damaged[/]", "no-manifest": "[yellow]no manifest[/]"}[v.status]
    if v.version == inv.restart_version and v.directory == inv.restart_directory:
        text += " [bold]← restart[/]"
    return text


def _table(inv: Inventory, title: str) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    con = Console()
    table = Table(title=title, caption=_caption(inv))
    # no vertical rules, collapsed padding: fits an 80-column terminal without cutting a word
    table.box, table.padding, table.collapse_padding, table.pad_edge = box.SIMPLE_HEAD, (0, 1), True, False
    for col in ("version", "level", "ranks", "per rank", "total", "checksum", "status"):
        table.add_column(col, justify="right" if col in ("version", "ranks", "per rank", "total") else "left",
                         no_wrap=col != "level")
    multi = len(inv.stores) > 1
    rows = sorted(((v, s) for s in inv.stores for v in s.versions), key=lambda p: (p[0].version, p[0].level or 0))
    for v, s in rows:
        present = sum(1 for f in v.ranks if f.size is not None)
        kinds = sorted({f.checksum_kind for f in v.ranks if f.checksum_kind}) or ["-"]
        level = _level(v, s.multilevel) + (f"\n{s.directory}" if multi else "")
        table.add_row(str(v.version), level, f"{present}/{v.nranks if v.nranks is not None else '?'}",
                      _per_rank(v), _size(v.total_bytes), ",".join(kinds), _status(v, inv))
    con.print(table)
    for v, _ in rows:
        notes = list(v.problems)
        if inv.nranks is not None and v.nranks is not None and v.nranks != inv.nranks:
            notes.append(f"written by {v.nranks} ranks: a restart on {inv.nranks} does not use it")
        for note in notes:
            con.print(f"version {v.version}: {note}", highlight=False, markup=False)
    con.print(_verdict(inv), highlight=False, markup=False)


def _verdict(inv: Inventory) -> str:
    """One line: the version a restart would resume from."""
    if inv.restart_version is None:
        return "nothing restorable: a restart would start from the beginning"
    how = "every file re-read and checked" if inv.verified else "sizes checked; --verify re-reads every file"
    line = f"a restart resumes from version {inv.restart_version} ({inv.restart_directory}; {how})"
    if inv.damaged_choice:
        line += f"; version {inv.unverified_choice} is damaged, so it falls back"
    return line


def _exit_code(inv: Inventory) -> int:
    if inv.restart_version is None:
        return NOTHING
    return DAMAGED if inv.damaged_choice else 0


def checkpoints(
    job: str = typer.Argument(..., metavar="JOB|DIR",
                              help="Job id, job directory, 'latest', or a FileStore directory."),
    verify: bool = typer.Option(False, "--verify", help="Re-read every rank file and check its checksum "
                                "(CRC-32, or SHA-256 for older manifests)."),
    nranks: Optional[int] = typer.Option(None, "--nranks", min=1, help="Only versions written by this many "
                                         "ranks count for a restart (default: the job's working ranks; any for a DIR)."),
    json_out: bool = typer.Option(False, "--json", help="Print the inventory as JSON on stdout."),
) -> None:
    """List the file checkpoints of a job (or of a FileStore directory): per version its level,
    the ranks whose files are there, per-rank and total sizes, the checksum kind of its manifest,
    whether it is complete, and the version a restart would resume from.

    A job's checkpoints are the FileStore directories inside its job directory (e.g.
    $PLANARIA_JOB_DIR/checkpoints) and the other file levels a MultiLevel store names there.
    Memory and XOR levels live in the processes' memory and are never visible on disk. Without
    --verify a version is complete when its manifest exists and every rank file has the size
    it records; --verify re-reads every file, names each damaged or missing one, and chooses the
    restart's version as the restart does (FileStore.latest_complete).

    Examples:

      planaria checkpoints latest

      planaria checkpoints 20260101-120000-ab12cd --verify

      planaria checkpoints /scratch/run7/checkpoints --verify --json

    Exit status: 0 a restart has a version to resume from (with --verify: the one it would take
    checked out); 1 with --verify, the version a restart would take is damaged and it falls back
    to an older one; 2 bad input (no such job or directory, no checkpoints in it); 3 nothing
    restorable.
    """
    from planaria.checkpoint.inventory import inventory
    dirs, job_id, job_ranks = _stores(job)
    inv = inventory(dirs, verify=verify, nranks=nranks if nranks is not None else job_ranks)
    if json_out:
        from planaria.launch.jobdir import dump_json
        sys.stdout.write(dump_json(inv.to_json() | {"job": job_id}))
    else:
        _table(inv, f"checkpoints of job {job_id}" if job_id else f"checkpoints in {dirs[0]}")
    code = _exit_code(inv)
    if code:
        raise typer.Exit(code)
