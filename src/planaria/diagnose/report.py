"""The diagnosis report of one state file: offline analysis + hang filter + what the controller knew.

``analyze(state)`` runs the offline analysis (``offline.diagnose``: count check, collective
matching, wait-for graph, root causes), the stack-sampling hang filter over the sampled
thread stacks (``hangfilter.group``: stable threads in equivalence classes, smallest first,
with a merged call-prefix tree), and lists the facts the controller recorded (failed, lost
and finished ranks, injected faults, incidents of the localization service). Returns a
JSON-able dict with a ``text`` rendering.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from planaria.diagnose import hangfilter, offline, stacktree

MAX_CLASSES_SHOWN = 12


def app_site(stack: list[Any] | None) -> str | None:
    """Innermost frame of ``stack`` outside planaria (the application's line), else the innermost frame."""
    if not stack:
        return None
    for frame in reversed(stack):
        if "/planaria/" not in str(frame[0]).replace("\\", "/"):
            return hangfilter.frame_text(frame)
    return hangfilter.frame_text(stack[-1])


def hang_filter(state: dict[str, Any]) -> dict[str, Any] | None:
    """Stable threads of the sampled stacks, grouped; None when no thread was sampled."""
    rows, ranks, names = [], [], []
    for rec in state.get("ranks") or []:
        for th in rec.get("threads") or []:
            smp = th.get("samples") or ([th["stack"]] if isinstance(th.get("stack"), int) else [])
            if not smp or any(not isinstance(x, int) or x < 0 for x in smp):
                continue
            rows.append(smp)
            ranks.append(int(rec["rank"]))
            names.append(str(th.get("name") or "?"))
    if not rows:
        return None
    s = min(len(r) for r in rows)
    samples = np.array([r[:s] for r in rows], dtype=np.int64)
    stacks = state.get("stacks") or []
    classes = hangfilter.group(samples, np.array(ranks), names, stacks=stacks)
    needed = hangfilter.samples_needed(max(len(rows), 2))
    out_classes = []
    for c in classes:
        out_classes.append({"threads": c.count, "ranks": c.rank_ranges, "names": sorted(c.names),
                            "site": app_site(c.stack), "innermost": c.site, "stack_id": c.stack_id})
    tree = stacktree.build_tree(classes) if classes else None
    lines = [f"hang filter: {len(rows)} threads sampled {s} times (s > 1 + ln n / ln k with k = 250 "
             f"needs s >= {needed}); {sum(c.count for c in classes)} never changed stack, "
             f"in {len(classes)} class(es), smallest first:"]
    for c in out_classes[:MAX_CLASSES_SHOWN]:
        lines.append(f"  {c['threads']} thread(s) on rank(s) {c['ranks']} [{', '.join(c['names'])}] at {c['site']}")
    if len(out_classes) > MAX_CLASSES_SHOWN:
        lines.append(f"  ... {len(out_classes) - MAX_CLASSES_SHOWN} more class(es)")
    if tree is not None:
        lines.append("merged call tree of the stable threads:")
        lines.extend("  " + ln for ln in stacktree.to_text(tree).splitlines())
    return {"samples": s, "samples_needed": needed, "threads": len(rows), "classes": out_classes,
            "tree_text": stacktree.to_text(tree) if tree is not None else "",
            "dot": stacktree.to_dot(tree) if tree is not None else "", "text": "\n".join(lines)}


def known_text(known: dict[str, Any]) -> str:
    """The controller's own records, one line each."""
    lines = []
    for r, why in sorted((known.get("failed") or {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"rank {r} failed: {why}")
    if known.get("lost"):
        lines.append(f"rank(s) {hangfilter.rank_ranges(known['lost'])} lost (killed or crashed, no report)")
    if known.get("finished"):
        lines.append(f"rank(s) {hangfilter.rank_ranges(known['finished'])} had already finished")
    for inj in known.get("injected") or []:
        lines.append(f"injected on rank {inj.get('rank')}: {inj.get('kind')} ({inj.get('detail')})")
    for inc in incident_lines(known.get("incidents") or []):
        lines.append(inc)
    return "\n".join(["what the controller recorded:"] + ["  " + ln for ln in lines]) if lines else ""


def incident_lines(incidents: list[dict[str, Any]]) -> list[str]:
    """One line per distinct incident (latest count), as the localization service reported them."""
    latest: dict[tuple, dict[str, Any]] = {}
    for inc in incidents:          # an incident is re-reported as records join it: keep its latest form
        key = (inc.get("responsible", inc.get("by")), inc.get("kind"), tuple(inc.get("ranks") or ()))
        latest[key] = inc
    out = []
    for inc in latest.values():
        n = inc.get("count")
        more = f", {n} record(s)" if n else ""
        out.append(f"incident (responsible rank {inc.get('responsible', inc.get('by'))}{more}): {inc.get('verdict')}")
    return out


def analyze(state: dict[str, Any]) -> dict[str, Any]:
    """Full report of a state file (see the module docstring)."""
    rep = offline.diagnose(state)
    out = rep.to_dict()
    parts = [rep.to_text().rstrip()]
    hf = hang_filter(state)
    if hf is not None:
        out["hang_filter"] = hf
        parts.append(hf["text"])
    known = state.get("known") or {}
    if known:
        out["known"] = known
        kt = known_text(known)
        if kt:
            parts.append(kt)
    coll = state.get("collect") or {}
    if coll:
        out["collect"] = coll
    out["text"] = "\n\n".join(p for p in parts if p) + "\n"
    return out
