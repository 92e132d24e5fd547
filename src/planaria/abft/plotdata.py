"""What ``planaria abft --plot`` draws, from the run's report (``OUT.abft.json``) alone (pure).

:func:`plot_data` turns the report into positions on the raster, in full-resolution cells
(row, column), so the drawing (:mod:`planaria.abft.plot`) only scales and draws them:

* ``marks``: located errors, one per compared row that differed from the masters' copy, at the
  differing columns the report lists (``errors[].cells``; a row without listed columns is
  marked across its width);
* ``bands``: the row bands of the blocks whose result was not taken as first computed:
  ``failed`` (the worker gave no result: crash, timeout, read or memory error), ``mismatch``
  (flagged without a located row, as in the ``plain`` and ``duplicate`` modes), ``recomputed``
  (in place, on the same worker) and ``reassigned`` (to another worker); recovered blocks' bands
  are outlined, failed ones hatched;
* ``injected``: the cells where ``--force``/``--error-rate`` flipped a bit (``silent`` faults),
  to compare with the marks;
* ``conflicts``: rows on which two neighbours agreed and the masters' copy did not.

Workers are named by index and MPI rank (worker w is rank w + 2), as the report does.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


MAX_REASON = 60      # characters of an error's text in a band's label


@dataclass(frozen=True)
class Mark:
    """A located error: compared ``row`` of ``block`` (its ``copy``: first or check) differed at ``cols``."""

    row: int
    cols: tuple[int, ...]
    n_cols: int
    block: int
    worker: int        # MPI rank of the worker that sent the row
    round: int
    copy: str


@dataclass(frozen=True)
class Band:
    """Output rows [r0, r1) of ``block``: ``kind`` failed | mismatch | recomputed | reassigned."""

    block: int
    r0: int
    r1: int
    kind: str
    label: str


@dataclass(frozen=True)
class PlotData:
    """Everything the picture shows, in raster cells (see the module docstring)."""

    shape: tuple[int, int]
    title: str
    blocks: list[tuple[int, int]] = field(default_factory=list)        # output rows [r0, r1) per block
    marks: list[Mark] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    injected: list[tuple[int, int, int]] = field(default_factory=list)   # (row, col, worker rank)
    conflicts: list[int] = field(default_factory=list)                  # rows


def _worker(rank: int) -> str:
    return f"worker {rank - 2} (rank {rank})"


def _marks(report: dict[str, Any], width: int) -> list[Mark]:
    out = []
    for e in report.get("errors") or []:
        for c in e.get("cells") or []:
            cols = tuple(int(x) for x in c.get("cols") or ())
            out.append(Mark(row=int(c["row"]), cols=cols, n_cols=int(c.get("n") or width),
                            block=int(e["block"]), worker=int(e["worker"]), round=int(e["round"]),
                            copy=str(c.get("copy"))))
    return out


def _block(task: Any, report: dict[str, Any], n: int) -> int | None:
    """The block a task computes: itself, or in the ``duplicate`` mode task b and N + b both block b."""
    t = int(task)
    if report.get("mode") == "duplicate":
        t %= max(n, 1)
    return t if 0 <= t < n else None


def _recovered(report: dict[str, Any], blocks: list[tuple[int, int]]) -> dict[int, Band]:
    """Per block, the last recovery it went through (a move outranks an in-place recomputation)."""
    out: dict[int, Band] = {}
    for a in report.get("recoveries") or []:
        b = _block(a["block"], report, len(blocks))
        if b is None:
            continue
        r0, r1 = blocks[b]
        if a["action"] == "reassign":
            out[b] = Band(b, r0, r1, "reassigned", f"block {b}: moved from {_worker(int(a['source']))} "
                                                   f"to {_worker(int(a['worker']))}")
        elif a["action"] == "recompute" and (b not in out or out[b].kind != "reassigned"):
            out[b] = Band(b, r0, r1, "recomputed", f"block {b}: recomputed on {_worker(int(a['worker']))}")
    return out


def _error_bands(report: dict[str, Any], blocks: list[tuple[int, int]]) -> list[Band]:
    """Blocks whose worker gave no result, and mismatches without a located row."""
    out: dict[tuple[int, str], Band] = {}
    for e in report.get("errors") or []:
        b = _block(e["block"], report, len(blocks))
        if b is None or (e.get("status") != 0 and e.get("cells")):
            continue
        kind = "failed" if e.get("status") == 0 else "mismatch"
        r0, r1 = blocks[b]
        why = str(e.get("error"))
        why = why if len(why) <= MAX_REASON else why[:MAX_REASON - 3] + "..."
        out.setdefault((b, kind), Band(b, r0, r1, kind, f"block {b}: {why} on {_worker(int(e['worker']))}"))
    return list(out.values())


def _title(report: dict[str, Any], data: PlotData, recovered: int) -> str:
    h, w = data.shape
    located = len(data.marks)
    failed = sum(1 for b in data.bands if b.kind == "failed")
    state = ("verified" if report.get("verified", True) else "written unverified") if report.get("ok") else "NOT verified"
    return (f"N-ABFT {report.get('kernel')} on {report.get('workers')} workers, {h} x {w}: "
            f"{located} located error(s), {failed} failed block(s), {recovered} block(s) recovered; {state}")


def plot_data(report: dict[str, Any]) -> PlotData:
    """The picture's content for a run's report (the ``.abft.json`` sidecar); ValueError when the
    report lacks the raster's shape or the blocks (not a report of ``planaria abft``)."""
    try:
        h, w = (int(x) for x in report["shape"])
        blocks = [(int(r0), int(r1)) for r0, r1 in report["blocks"]]
    except (KeyError, TypeError, ValueError):
        raise ValueError("not a planaria abft report: it has no shape or blocks") from None
    marks = _marks(report, w)
    recovered = _recovered(report, blocks)
    bands = _error_bands(report, blocks) + [recovered[b] for b in sorted(recovered)]
    injected = [(int(f["where"]["row"]), int(f["where"]["col"]), int(f["rank"]))
                for f in report.get("injected") or [] if f.get("kind") == "silent" and "row" in (f.get("where") or {})]
    conflicts = sorted({int(c["row"]) for c in report.get("conflicts") or []})
    data = PlotData(shape=(h, w), title="", blocks=blocks, marks=marks, bands=bands, injected=injected, conflicts=conflicts)
    return replace(data, title=_title(report, data, len(recovered)))
