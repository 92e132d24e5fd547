"""Export fragmented-program traces to Chrome/Perfetto trace-event JSON (opens in ui.perfetto.dev).

One process track per rank, CFs as complete ("X") events on as many lanes as ran at once,
flow arrows from the CF that set a DF to each CF that read it, unfinished CFs as instant
events at the end, balancer moves as instant events.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any


def to_chrome(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The trace-event document (``{"traceEvents": [...]}``); times in microseconds from the first record."""
    cfs = {r["id"]: r for r in records if r.get("k") == "cf"}
    starts = {r["cf"]: r for r in records if r.get("k") == "start"}
    ends = {r["cf"]: r for r in records if r.get("k") == "end"}
    times = [r[t] for r in records for t in ("t", "t0") if isinstance(r.get(t), (int, float))]
    t0 = min(times) if times else 0.0
    tend = max(times) if times else 0.0

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 3)

    ev: list[dict[str, Any]] = []
    ranks = sorted({r["rank"] for r in records if "rank" in r})
    for rk in ranks:
        ev.append({"ph": "M", "name": "process_name", "pid": rk, "tid": 0, "args": {"name": f"rank {rk}"}})
    # lanes: per rank, greedy by start time
    runs = []
    for c, e in ends.items():
        s = starts.get(c)
        rk = e.get("rank", (s or {}).get("rank", 0))
        begin = e.get("t0", (s or {}).get("t", e["t"]))
        runs.append((rk, begin, e["t"], c, e))
    runs.sort(key=lambda x: (x[0], x[1]))
    lane_free: dict[int, list[float]] = defaultdict(list)
    where: dict[str, tuple[int, int, float, float]] = {}
    for rk, b, t, c, e in runs:
        lanes = lane_free[rk]
        lane = next((i for i, free in enumerate(lanes) if free <= b), None)
        if lane is None:
            lane = len(lanes)
            lanes.append(t)
        else:
            lanes[lane] = t
        cf = cfs.get(c, {})
        where[c] = (rk, lane + 1, b, t)
        ev.append({"ph": "X", "name": cf.get("code", c), "cat": cf.get("kind", "cf"), "pid": rk, "tid": lane + 1,
                   "ts": us(b), "dur": max(us(t) - us(b), 0.001),
                   "args": {"cf": c, "expr": cf.get("expr"), "at": f"{cf.get('file')}:{cf.get('line')}",
                            "ok": e.get("ok", True), "in": [i["id"] for i in cf.get("in", [])],
                            "out": e.get("out", [])}})
    # flows: writer of a DF -> each reader
    writer: dict[str, str] = {}
    for r in records:
        if r.get("k") == "set":
            writer.setdefault(r["df"], r["cf"])
    flow = 0
    for c, cf in cfs.items():
        if c not in where:
            continue
        for i in cf.get("in", []):
            w = writer.get(i["id"])
            if w is None or w not in where:
                continue
            flow += 1
            wr, wl, _wb, wt = where[w]
            rr, rl, rb, _rt = where[c]
            ev.append({"ph": "s", "id": flow, "name": i.get("decl", "df"), "cat": "df", "pid": wr, "tid": wl,
                       "ts": us(wt) - 0.001})
            ev.append({"ph": "f", "bp": "e", "id": flow, "name": i.get("decl", "df"), "cat": "df", "pid": rr,
                       "tid": rl, "ts": us(rb) + 0.001})
    for r in records:
        k = r.get("k")
        if k == "unfinished":
            cf = cfs.get(r["cf"], {})
            ev.append({"ph": "i", "s": "p", "name": f"unfinished {cf.get('code', r['cf'])}", "pid": r.get("rank", 0),
                       "tid": 0, "ts": us(r.get("t", tend)),
                       "args": {"cf": r["cf"], "expr": cf.get("expr"), "awaits": r.get("awaits", [])}})
        elif k in ("move", "plan", "error"):
            ev.append({"ph": "i", "s": "t", "name": k if k != "error" else f"error {r.get('kind')}",
                       "pid": r.get("rank", 0), "tid": 0, "ts": us(r.get("t", t0)),
                       "args": {kk: vv for kk, vv in r.items() if kk not in ("k", "t")}})
    return {"traceEvents": ev, "displayTimeUnit": "ms"}
