"""The picture of a job's life per rank (``planaria run --plot``): when each rank started and ended,
the failures, each recovery's phases as every working rank timed them, the checkpoints. Built from
the job record alone (``manifest.json``, ``events.jsonl``, ``summary.json``), so it can be drawn
for any finished job of a ``Resilient`` program. ``timeline`` is pure; ``plot_timeline`` needs
matplotlib (the ``plot`` extra).
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from planaria.launch.recoveries import role_label
from planaria.util.fsutil import atomic_write
from planaria.util.plotting import pyplot

#: a recovery's phases in the order they run, with their colours in the picture
PHASE_COLOURS = (("revoke_shrink", "tab:orange"), ("substitution", "tab:purple"), ("restore", "tab:green"))


def _rel(t: Any, t0: float) -> float | None:
    return round(float(t) - t0, 6) if isinstance(t, (int, float)) else None


def _rank_recovery(rec: dict[str, Any], t0: float) -> dict[str, Any]:
    """One rank's record of one recovery: its detection, the phases of the attempt that succeeded
    (``[start, seconds]``, back to back, ending when it resumed) and its resumption."""
    done = float(rec.get("t_done") or rec.get("t_detect") or t0)
    end, phases = done, {}
    for name, _ in reversed(PHASE_COLOURS):
        took = float(rec.get(f"{name}_s") or 0.0)
        end -= took
        phases[name] = [round(end - t0, 6), round(took, 6)]
    return {"number": rec.get("number"), "detect": _rel(rec.get("t_detect"), t0), "done": round(done - t0, 6),
            "phases": {name: phases[name] for name, _ in PHASE_COLOURS}, "attempts": rec.get("attempts")}


def _lane(row: dict[str, Any], events: list[dict[str, Any]], t0: float, elapsed: float) -> dict[str, Any]:
    """The lane of one rank: start, end, failure, role, its checkpoints and recoveries."""
    rank = row["rank"]
    mine = [e for e in events if e.get("rank") == rank]
    hello = [e["t"] for e in mine if e.get("type") == "hello" and isinstance(e.get("t"), (int, float))]
    failed = row.get("state") in ("failed", "lost")
    injected = (row.get("injected") or {}).get("t")
    fail_t = _rel(injected, t0) if failed and injected else (row.get("t") if failed else None)
    recs = sorted((_rank_recovery(e, t0) for e in mine if e.get("type") == "recovery"),
                  key=lambda r: r["done"])
    cks = [[round(float(a) - t0, 6), float(b), int(c)] for e in mine if e.get("type") == "checkpoints"
           for a, b, c in (e.get("times") or []) if isinstance(a, (int, float))]
    took_over = row.get("role") == "recovered" and recs
    return {"rank": rank, "role": role_label(row.get("role"), row.get("logical"), rank), "state": row.get("state"),
            "start": round(min(hello) - t0, 6) if hello else 0.0,
            "end": fail_t if fail_t is not None else (row.get("t") if row.get("t") is not None else elapsed),
            "failed_at": fail_t, "spare_until": recs[0]["detect"] if took_over else None,
            "checkpoints": sorted(cks), "recoveries": recs}


def timeline(manifest: dict[str, Any], events: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """What ``plot_timeline`` draws, in seconds since the job started: one lane per rank (``ranks``,
    of the last attempt of a restarted job, like the summary's rank table), the merged ``recoveries``
    of the summary, the job's ``elapsed`` time."""
    t0 = float(manifest.get("t0") or 0.0)
    elapsed = float(summary.get("elapsed") or 0.0)
    attempts = summary.get("attempts") or []
    since = float(attempts[-1].get("t_start") or 0.0) if attempts else 0.0    # the rank table's attempt
    restart = int(attempts[-1].get("restart") or 0) if attempts else 0
    events = [e for e in events if isinstance(e.get("t"), (int, float)) and e["t"] - t0 >= since]
    return {"job": summary.get("job"), "elapsed": elapsed, "nranks": summary.get("nranks"),
            "spares": summary.get("spares"), "outcome": summary.get("outcome"),
            "ranks": [_lane(row, events, t0, elapsed) for row in summary.get("ranks") or []],
            "recoveries": [r for r in summary.get("recoveries") or [] if int(r.get("restart") or 0) == restart]}


def job_timeline(jobdir: str | Path) -> dict[str, Any]:
    """``timeline`` of the finished job in ``jobdir``; ValueError (one line) when its record is incomplete."""
    path = Path(jobdir)
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: no complete job record ({exc})") from None
    events: list[dict[str, Any]] = []
    try:
        for line in (path / "events.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    except OSError:
        pass
    return timeline(manifest, events, summary)


def _draw_lane(ax: Any, y: int, lane: dict[str, Any], least: float) -> None:
    """One rank's lane: working (solid) or waiting as a spare (dotted), checkpoints, phases, failure;
    a bar shorter than ``least`` seconds is drawn that long (visible on a long time axis)."""
    start, end = lane["start"], lane["end"]
    idle = lane["spare_until"] if lane["spare_until"] is not None else (end if lane["role"] == "spare" else None)
    if idle is not None:
        ax.plot([start, idle], [y, y], ls=":", color="0.6", lw=1)
        start = idle
    if lane["role"] != "spare":
        ax.plot([start, end], [y, y], color="0.35", lw=1.2)
    cks = lane["checkpoints"]
    if cks:
        ax.broken_barh([(t, max(d, least)) for t, d, _ in cks], (y - 0.12, 0.24), color="tab:blue")
    for rec in lane["recoveries"]:
        first = rec["phases"][PHASE_COLOURS[0][0]][0]
        if rec["detect"] is not None and first > rec["detect"]:
            ax.plot([rec["detect"], first], [y, y], color="tab:red", lw=3, alpha=0.4)
        for name, colour in PHASE_COLOURS:
            s, d = rec["phases"][name]
            ax.broken_barh([(s, max(d, least / 3))], (y - 0.3, 0.6), color=colour)
    if lane["failed_at"] is not None:
        ax.plot([lane["failed_at"]], [y], marker="X", ms=10, color="tab:red")


ZOOMED = 3            # recoveries drawn again in panels of their own (their phases last milliseconds)


def _draw_lanes(ax: Any, data: dict[str, Any], least: float = 0.0) -> None:
    """Every lane, the recoveries' bands and the rank labels on one axis."""
    lanes = data["ranks"]
    for rec in data["recoveries"]:
        ax.axvspan(rec["t"], rec["t_end"], color="tab:orange", alpha=0.12)
    for y, lane in enumerate(lanes):
        _draw_lane(ax, y, lane, least)
    ax.set_yticks(range(len(lanes)), [f"{ln['rank']} {ln['role']}".strip() for ln in lanes])
    ax.set_ylim(len(lanes) - 0.3, -0.8)


def _zoom(ax: Any, data: dict[str, Any], rec: dict[str, Any]) -> None:
    """One recovery close up: from the kill before it to the last rank's resumption."""
    _draw_lanes(ax, data)
    left = rec["t"] - (rec.get("detection_s") or 0.0)
    pad = max(0.15 * (rec["t_end"] - left), 0.001)
    ax.set_xlim(left - pad, rec["t_end"] + pad)
    ax.set_title(f"recovery {rec['number']}: lost {rec['lost']}, from {rec['version']}, "
                 f"{(rec.get('total_s') or 0) * 1e3:.1f} ms", fontsize=9)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel("seconds since the job started", fontsize=8)


def _legend(fig: Any) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color="0.35", label="working"), Line2D([], [], ls=":", color="0.6", label="spare"),
               Patch(color="tab:blue", label="checkpoint"), Line2D([], [], color="tab:red", lw=3, alpha=0.4,
                                                                   label="failure seen, recovery pending"),
               *[Patch(color=c, label=n.replace("_", "+")) for n, c in PHASE_COLOURS],
               Line2D([], [], marker="X", ls="", color="tab:red", label="process failed")]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8, frameon=False)


def plot_timeline(data: dict[str, Any], path: str | Path) -> Path:
    """Write the PNG of ``timeline``'s data: the whole job on top, the first recoveries close up
    below; returns the path. RuntimeError without matplotlib."""
    plt = pyplot()
    lanes, zoomed = data["ranks"], data["recoveries"][:ZOOMED]
    height = 0.45 * max(len(lanes), 1)
    fig = plt.figure(figsize=(10, 1.8 + height * (2 if zoomed else 1)), layout="constrained")
    grid = fig.add_gridspec(2 if zoomed else 1, max(len(zoomed), 1))
    ax = fig.add_subplot(grid[0, :])
    starts = [ln["start"] for ln in lanes] or [0.0]
    end = max(data["elapsed"], max((ln["end"] for ln in lanes), default=0.0))
    _draw_lanes(ax, data, least=0.004 * (end - min(starts)))
    for rec in data["recoveries"]:
        ax.text(rec["t"], len(lanes) - 0.35, f" #{rec['number']}", fontsize=8, va="bottom")
    ax.set_xlim(max(0.0, min(starts) - 0.03 * (end - min(starts))), end + 0.02 * (end - min(starts)) or 1.0)
    ax.set_xlabel("seconds since the job started")
    ax.set_ylabel("rank")
    ax.set_title(f"job {data['job']}: {data['nranks']} working + {data['spares']} spare ranks, "
                 f"{len(data['recoveries'])} recover{'y' if len(data['recoveries']) == 1 else 'ies'}, "
                 f"{data['outcome']}")
    for k, rec in enumerate(zoomed):
        _zoom(fig.add_subplot(grid[1, k]), data, rec)
    _legend(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write(path, buf.getvalue())
