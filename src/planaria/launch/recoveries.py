"""The recoveries of a job, from its record: what every working rank of a ``Resilient`` program told
the controller (``recovery`` and ``checkpoints`` records in ``events.jsonl``), merged into one entry
per recovery for ``summary.json``; the table ``planaria run`` and ``planaria demo`` print; the role
shown for a spare that took over a logical rank. Pure but the table (rich).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

#: the phases of a recovery, as the ranks time them (seconds)
PHASES = ("revoke_shrink_s", "substitution_s", "restore_s", "total_s", "elapsed_s")

LEGEND = ("times in ms, the slowest rank's; detect: kill to the first error; total: revoke+shrink + "
          "substitution + restore; rank: the logical rank lost; by: the spare (job rank) that took it over; "
          "step: where the failure was seen; from: the checkpoint step resumed from; tries: recovery attempts")


def role_label(role: Any, logical: Any, rank: Any = None) -> str:
    """The role as shown in tables: ``spare→L2`` for a spare that took over logical rank 2, the
    role and ``→L<n>`` for any other process whose logical rank is not its job rank, else the role."""
    text = str(role or "")
    if not isinstance(logical, int):
        return text
    if role == "recovered":
        return f"spare→L{logical}"
    return f"{text}→L{logical}" if logical != rank else text


def kill_times(ranks: Iterable[dict[str, Any]]) -> list[float]:
    """When the failed or lost ranks of a rank table died (wall clock, ascending): an injected
    fault's time when there is one, else when the launcher learnt of it."""
    out = []
    for r in ranks:
        if r.get("state") not in ("failed", "lost"):
            continue
        t = (r.get("injected") or {}).get("t") or r.get("fail_time")
        if isinstance(t, (int, float)):
            out.append(float(t))
    return sorted(out)


def _median(values: Sequence[float]) -> float | None:
    import statistics     # at the job's end only

    return float(statistics.median(values)) if values else None


def _merge_one(number: int, recs: list[dict[str, Any]], kills: Sequence[float], t0: float) -> dict[str, Any]:
    """One recovery from the records of the ranks that took part in it as working ranks."""
    first = min(recs, key=lambda r: float(r.get("t_detect") or 0.0))
    t_detect = float(first.get("t_detect") or 0.0)
    steps = [int(r["detected_at"]) for r in recs if isinstance(r.get("detected_at"), int) and r["detected_at"] >= 0]
    replaced = sorted({(int(a), int(b)) for r in recs for a, b in (r.get("replaced_by") or [])})
    before = [t for t in kills if t <= t_detect]
    out: dict[str, Any] = {
        "number": number, "restart": int(first.get("restart") or 0),
        "lost": sorted({int(x) for r in recs for x in r.get("lost") or []}),
        "replaced_by": [list(p) for p in replaced], "version": max(int(r.get("version", -1)) for r in recs),
        "detected_at": min(steps) if steps else None, "error": first.get("error"),
        "t": round(t_detect - t0, 6), "t_end": round(max(float(r.get("t_done") or t_detect) for r in recs) - t0, 6),
        "detection_s": round(t_detect - before[-1], 6) if before else None,
        "attempts": max(int(r.get("attempts") or 1) for r in recs),
        "ranks": max(int(r.get("ranks") or 0) for r in recs), "continued": any(r.get("continued") for r in recs),
        "reported_by": len(recs), "median": {},
    }
    for phase in PHASES:
        values = [float(r[phase]) for r in recs if isinstance(r.get(phase), (int, float))]
        out[phase] = max(values) if values else None
        out["median"][phase] = _median(values)
    return out


def merge(records: Iterable[dict[str, Any]], t0: float, kills: Sequence[float] = ()) -> list[dict[str, Any]]:
    """One entry per recovery (by its ``number`` in its attempt, ``restart``) from the ranks'
    ``recovery`` records, in order:
    the lost logical ranks, ``replaced_by`` (``[[logical rank, job rank of the spare], ...]``), the
    version resumed from, the first step it was seen at, the phases' times (the slowest rank's, and
    ``median`` over the ranks), ``t``/``t_end`` (seconds since ``t0``: first detection, last
    resumption) and ``detection_s`` (the last kill before it to its first detection)."""
    by_number: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for rec in records:
        if rec.get("type") == "recovery" and isinstance(rec.get("number"), int):
            by_number.setdefault((int(rec.get("restart") or 0), rec["number"]), []).append(rec)
    return [_merge_one(n, by_number[(r, n)], kills, t0) for r, n in sorted(by_number)]


def checkpoints(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The checkpoints the ranks told: how many each rank took in an attempt (the most), their
    durations' median and maximum over every rank (seconds)."""
    per_rank: dict[tuple[Any, Any], int] = {}
    took: list[float] = []
    for rec in records:
        if rec.get("type") != "checkpoints":
            continue
        for item in rec.get("times") or []:
            if isinstance(item, (list, tuple)) and len(item) == 3:
                took.append(float(item[1]))
                key = (rec.get("restart"), rec.get("rank"))
                per_rank[key] = per_rank.get(key, 0) + 1
    return {"count": max(per_rank.values(), default=0), "median_s": _median(took), "max_s": max(took, default=None)}


def _ms(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value * 1e3:.1f}"


def recovery_table(rows: Sequence[dict[str, Any]], title: str | None = None) -> Any:
    """The per-recovery table (a rich ``Table``) of ``merge``'s entries or the demo's: one row per
    recovery, narrow enough for an 80-column terminal."""
    from rich import box
    from rich.table import Table

    t = Table(title=title)
    t.box, t.padding, t.show_edge = box.SIMPLE_HEAD, (0, 1, 0, 0), False
    for col in ("#", "rank", "by", "step", "detect", "revoke+\nshrink", "substi-\ntution", "re-\nstore", "total",
                "from", "tries"):
        t.add_column(col, justify="right", min_width=max(map(len, col.split("\n"))))
    for k, ev in enumerate(rows, 1):
        spares = [str(b) for _, b in ev.get("replaced_by") or []]
        step = ev.get("detected_at")
        t.add_row(str(k) + ("*" if ev.get("continued") else ""), ",".join(map(str, ev.get("lost") or [])) or "-",
                  ",".join(spares) or "-", "-" if step is None else str(step), _ms(ev.get("detection_s")),
                  _ms(ev.get("revoke_shrink_s")), _ms(ev.get("substitution_s")), _ms(ev.get("restore_s")),
                  _ms(ev.get("total_s")), str(ev.get("version")), str(ev.get("attempts")))
    return t


def print_recoveries(console: Any, rows: Sequence[dict[str, Any]], title: str | None = None,
                     checkpoint_line: str | None = None) -> None:
    """The table, its legend, the recoveries that continued on fewer ranks, and a checkpoint line."""
    console.print(recovery_table(rows, title))
    console.print(f"[dim]{LEGEND}[/]")
    for k, ev in enumerate(rows, 1):
        if ev.get("continued"):
            console.print(f"* recovery {k}: not enough spares; continued on {ev.get('ranks')} working ranks")
    if checkpoint_line:
        console.print(checkpoint_line)


def checkpoint_line(stats: dict[str, Any]) -> str | None:
    """``checkpoints: N per rank, median X ms, max Y ms`` (None when none was told)."""
    if not stats.get("count"):
        return None
    return (f"checkpoints: {stats['count']} per rank, median {_ms(stats.get('median_s'))} ms, "
            f"max {_ms(stats.get('max_s'))} ms")
