"""One global diagnosis of a running job: collect through the tree, write the state file, analyze it.

Called by the controller (``planaria diagnose JOB``, or SIGUSR1 to ``planaria run``). Ranks the
controller already knows as failed, lost or finished are not asked; they enter the state file
as ``known`` facts (with the reason the rank or the launcher reported), which the offline
analysis uses next to the count check. Output files in the job directory, numbered per call:
``diag-<n>.state`` (msgpack state file), ``diag-<n>.json`` (report) and ``diag-<n>.txt``.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Set
from typing import Any

from planaria.diagnose import collect as _collect

# collects the part of the given ranks through their node agents (the controller's routes), within
# one hop per level of the node tree plus the sampling time:
# (ranks, rounds, interval, hop) -> merged part, every rank asked and not in it named missing
NodeCollect = Callable[[list[int], int, float, float], dict[str, Any]]


def known_facts(table: dict[int, dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the controller knows without asking the ranks: failed, lost and finished ranks, injected faults, incidents."""
    failed = {str(r): str(v.get("reason") or "failed") for r, v in table.items() if v.get("state") == "failed"}
    lost = sorted(r for r, v in table.items() if v.get("state") == "lost")
    finished = sorted(r for r, v in table.items() if v.get("state") == "finished")
    # a planned hang reports as type "hang" (the rank then stops answering), the other faults as "inject"
    injected = [{k: e.get(k) for k in ("rank", "kind", "detail", "t")} for e in events
                if e.get("type") == "inject" or (e.get("type") == "hang" and e.get("kind") == "hang")]
    incidents = [dict(e["incident"], by=e.get("by"), t=e.get("t")) for e in events
                 if e.get("type") == "incident" and isinstance(e.get("incident"), dict)][-50:]
    exit_sites = {str(r): str(table[r]["site"]) for r in finished if table[r].get("site")}   # their sys.exit
    # where a rank's uncaught exception or crash happened (the launcher read its traceback)
    crash_sites = {str(r): {"site": str(v["site"]), "error": str(v["error"])} for r, v in table.items()
                   if v.get("site") and v.get("error")}
    return {"failed": failed, "lost": lost, "finished": finished, "injected": injected[-50:],
            "incidents": incidents, "exit_sites": exit_sites, "crash_sites": crash_sites}


def build_state(table: dict[int, dict[str, Any]], part: dict[str, Any], job: str,
                known: dict[str, Any]) -> dict[str, Any]:
    """A state file (format ``planaria-state/1``) from the merged collection part."""
    size = max([int(v.get("size") or 0) for v in table.values()] + [len(table)])
    hosts: dict[str, list[int]] = {}
    for r, v in sorted(table.items()):
        if v.get("host"):
            hosts.setdefault(str(v["host"]), []).append(int(r))
    records = list(part.get("ranks", []))
    answered = {int(rec["rank"]) for rec in records}
    for r in known.get("finished") or []:     # finished ranks are not asked: they are not hung
        if r not in answered:
            records.append({"rank": int(r), "host": table.get(r, {}).get("host"), "status": "finished",
                            "op": None, "threads": []})
            answered.add(int(r))
    gone = {int(r) for r in known.get("failed") or {}} | {int(r) for r in known.get("lost") or []}
    missing = sorted(({int(r) for r in part.get("missing", [])} | gone) - answered)
    return {"format": "planaria-state/1", "job": job, "t": time.time(), "size": size, "hosts": hosts,
            "stacks": part.get("stacks", []), "ranks": sorted(records, key=lambda x: x["rank"]),
            "missing": missing, "collect": part.get("collect", {}), "known": known}


PYSPY_MAX_RANKS = 16      # unreachable ranks read from outside per diagnosis, at most
PYSPY_BUDGET = 15.0       # seconds spent on them, at most (each py-spy dump is bounded too)


def _read_unresponsive(part: dict[str, Any], table: dict[int, dict[str, Any]], rounds: int,
                       interval: float) -> dict[str, Any]:
    """Ranks the tree could not reach but whose process lives on this machine: read them with py-spy."""
    import socket

    from planaria.diagnose import pyspy
    here = socket.gethostname()
    extra = []
    deadline = time.monotonic() + PYSPY_BUDGET
    for r in (part.get("missing") or [])[:PYSPY_MAX_RANKS]:
        if time.monotonic() > deadline:
            break
        info = table.get(int(r)) or {}
        if info.get("state") not in ("starting", "running") or info.get("host") not in (here, None):
            continue
        if not pyspy.local_pid(info.get("pid")):
            continue
        got = pyspy.sample(int(r), int(info["pid"]), info.get("host"), rounds, interval,
                           status=pyspy.PLAIN_STATUS if info.get("runtime") is False else None)
        if got is not None:
            extra.append(got)
    if not extra:
        return part
    coll = part.get("collect")
    merged = _collect.merge_parts([part] + extra)
    merged["missing"] = [r for r in merged["missing"] if r not in {p["ranks"][0]["rank"] for p in extra}]
    if coll is not None:
        merged["collect"] = dict(coll, pyspy=[p["ranks"][0]["rank"] for p in extra])
    return merged


def gather(ask: dict[int, str | None], secret: str, k: int, hop: float, rounds: int, interval: float,
           behind: Set[int], via_nodes: NodeCollect | None) -> dict[str, Any]:
    """The merged part of the ranks in ``ask``: those in ``behind`` through their node agents, the
    others through the k-ary tree of their own endpoints, both at once."""
    routed = sorted(r for r in ask if r in behind) if via_nodes is not None else []
    skip = set(routed)
    direct = {r: ep for r, ep in ask.items() if r not in skip}
    t0 = time.monotonic()
    got: dict[str, dict[str, Any]] = {}
    if routed:
        assert via_nodes is not None
        th = threading.Thread(target=lambda: got.__setitem__("nodes", via_nodes(routed, rounds, interval, hop)),
                              name="planaria-collect-nodes", daemon=True)
        th.start()
    part: dict[str, Any] = \
        _collect.collect(direct, secret, k=k, hop=hop, rounds=rounds, interval=interval) if direct else \
        {"stacks": [], "ranks": [], "missing": [], "collect": {"k": k, "hop": hop, "seconds": 0.0}}
    if routed:
        th.join(_collect.budget_for(len(routed), 2, hop, rounds, interval) + 2 * hop)   # bounded in any case
        coll = part["collect"]
        nodes: dict[str, Any] = got.get("nodes") or {"missing": routed}
        part = _collect.merge_parts([part, nodes])
        part["collect"] = dict(coll, direct=len(direct), behind_nodes=len(routed), nodes=nodes.get("collect"),
                               seconds=round(time.monotonic() - t0, 4))
    return part


def collect_and_analyze(jobdir: Any, table: dict[int, dict[str, Any]], secret: str, k: int = 8,
                        hop: float = 1.0, rounds: int = 0, interval: float = 0.2,
                        behind: Set[int] = frozenset(), via_nodes: NodeCollect | None = None) -> dict[str, Any]:
    """Run one collection over the ranks in ``table`` and write the state file and the report.

    ``behind``: ranks served by node agents, collected through them by ``via_nodes`` when given."""
    from planaria.diagnose.hangfilter import samples_needed
    from planaria.diagnose.report import analyze
    from planaria.diagnose.state import write_state
    t0 = time.monotonic()
    active = {int(r): v for r, v in table.items() if v.get("state") in ("starting", "running")}
    ask = {r: v.get("ep") for r, v in active.items() if v.get("runtime") is not False}
    plain = sorted(r for r, v in active.items() if v.get("runtime") is False)  # no agent: read from outside
    if rounds <= 0:
        rounds = samples_needed(max(3 * len(table), 2))
    part = gather(ask, secret, k, hop, rounds, interval, behind, via_nodes)
    gathered = time.monotonic() - t0
    part["missing"] = sorted(set(part.get("missing", [])) | set(plain))
    part = _read_unresponsive(part, table, rounds, interval)
    read_out = time.monotonic() - t0 - gathered
    known = known_facts(table, jobdir.events())
    state = build_state(table, part, jobdir.path.name, known)
    n = 1 + sum(1 for _ in jobdir.path.glob("diag-*.state"))
    state_path = jobdir.file(f"diag-{n}.state")
    write_state(state_path, state)
    collected = time.monotonic() - t0
    report = analyze(state)
    report["timing"] = {"collect_s": round(collected, 3), "total_s": round(time.monotonic() - t0, 3),
                        "gather_s": round(gathered, 3), "pyspy_s": round(read_out, 3),
                        "state_s": round(collected - gathered - read_out, 3), "rounds": rounds, "interval": interval}
    json_path = jobdir.write_json(f"diag-{n}.json", report)
    from planaria.util.fsutil import atomic_write
    txt_path = jobdir.file(f"diag-{n}.txt")
    atomic_write(txt_path, report["text"].encode("utf-8"))
    return {"state": str(state_path), "json": str(json_path), "text_path": str(txt_path), "report": report}
