"""The diagnosis report of one state file: offline analysis + hang filter + what the controller knew.

``analyze(state)`` runs the offline analysis (``offline.diagnose``: count check, collective
matching, wait-for graph, root causes), the stack-sampling hang filter over the sampled
thread stacks (``hangfilter.group``: stable threads in equivalence classes, smallest first,
with a merged call-prefix tree), and lists the facts the controller recorded (failed, lost
and finished ranks, injected faults, incidents of the localization service). Returns a
JSON-able dict with a ``text`` rendering.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from planaria.diagnose import hangfilter, offline, pyspy, stacksonly, stacktree

MAX_CLASSES_SHOWN = 12


def app_site(stack: Sequence[Any] | None) -> str | None:
    """Innermost frame of ``stack`` outside planaria (the application's line), else the innermost frame."""
    if not stack:
        return None
    from planaria.comm.msglog import is_app_file
    for frame in reversed(stack):
        if is_app_file(str(frame[0])):
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
    out_classes: list[dict[str, Any]] = []
    for hc in classes:
        out_classes.append({"threads": hc.count, "ranks": hc.rank_ranges, "names": sorted(hc.names),
                            "site": app_site(hc.stack), "innermost": hc.site, "stack_id": hc.stack_id})
    tree = stacktree.build_tree(classes) if classes else None
    lines = [f"hang filter: {len(rows)} threads sampled {s} times (s > 1 + ln n / ln k with k = 250 "
             f"needs s >= {needed}); {sum(c.count for c in classes)} never changed stack, "
             f"in {len(classes)} class(es), smallest first:"]
    for c in out_classes[:MAX_CLASSES_SHOWN]:
        inner = c["innermost"] or ""
        call = f" (in {inner.rsplit(' in ', 1)[-1]})" if inner.startswith(pyspy.MPI_FILE) else ""
        lines.append(f"  {c['threads']} thread(s) on rank(s) {c['ranks']} [{', '.join(c['names'])}] at {c['site']}{call}")
    if len(out_classes) > MAX_CLASSES_SHOWN:
        lines.append(f"  ... {len(out_classes) - MAX_CLASSES_SHOWN} more class(es)")
    if tree is not None:
        lines.append("merged call tree of the stable threads:")
        lines.extend("  " + ln for ln in stacktree.to_text(tree).splitlines())
    return {"samples": s, "samples_needed": needed, "threads": len(rows), "classes": out_classes,
            "tree_text": stacktree.to_text(tree) if tree is not None else "",
            "dot": stacktree.to_dot(tree) if tree is not None else "",
            "tree": stacktree.to_nodes(tree) if tree is not None else [], "text": "\n".join(lines)}


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
    rank = {k: i for i, k in enumerate(_INCIDENT_ORDER)}
    chosen = sorted(latest.values(), key=lambda i: (rank.get(str(i.get("kind")), len(rank)), -(i.get("count") or 0)))
    for inc in chosen[:MAX_INCIDENTS_SHOWN]:
        n = inc.get("count")
        more = f", {n} record(s)" if n else ""
        out.append(f"incident (responsible rank {inc.get('responsible', inc.get('by'))}{more}): {inc.get('verdict')}")
    if len(chosen) > MAX_INCIDENTS_SHOWN:
        out.append(f"... {len(chosen) - MAX_INCIDENTS_SHOWN} more incident(s) in the JSON report")
    return out


LOST_AFTER = 1.0      # seconds a receive must have waited before a missing message counts as lost
HUNG_AFTER = 1.0      # no wait longer than this: the job is progressing, not hung


def lost_messages(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Point-to-point waits for a message the peer has sent but the waiting rank never received.

    Rank a waits to receive from rank b while b's log counts more messages sent to a than a's
    log counts received from b: a message from b to a was lost (network, or dropped).
    """
    recs = {int(r["rank"]): r for r in state.get("ranks") or []}
    out = []
    for a, rec in sorted(recs.items()):
        op = rec.get("op") or {}
        b = op.get("peer")
        if op.get("kind") != "p2p" or not isinstance(b, int) or b not in recs:
            continue
        other = op.get("unmatched")
        sent = int(((recs[b].get("sent") or {}).get(str(a))) or 0)
        got = int(((rec.get("recvd") or {}).get(str(b))) or 0)
        if isinstance(other, dict) and other.get("source") == b and sent > got + 1:
            other = None        # b sent more than the one left over: a message before it was lost
        elif isinstance(other, dict) and other.get("source") != b and sent > got and not other.get("wildcard"):
            other = None        # b sent more than arrived and none of it waits here (the probe looks
            #                     for b's messages first): lost; another rank's early message waits
            #                     for a later receive
        # a wait shorter than LOST_AFTER may end by itself (the message in flight); not when an
        # earlier ANY_SOURCE receive took the awaited rank's message and that rank is in a collective
        settled = (isinstance(other, dict) and isinstance(other.get("wildcard"), dict)
                   and (recs[b].get("op") or {}).get("kind") == "coll")
        if float(op.get("since") or 0.0) < LOST_AFTER and not settled:
            continue
        if not any(w in str(op.get("name")) for w in ("Recv", "recv", "Sendrecv", "sendrecv")):
            continue
        if isinstance(other, dict) and isinstance(other.get("tag"), int):
            out.append(_mismatch(a, b, op, other, rec))
            continue
        if sent > got:
            out.append({"kind": "lost-message", "ranks": hangfilter.rank_ranges([a, b]), "rank_list": [b, a],
                        "reason": f"a message from rank {b} to rank {a} was lost: rank {b} sent {sent}, "
                                  f"rank {a} received {got} and waits in {op.get('name')} from rank {b}",
                        "op": op.get("name"), "comm": op.get("comm"), "site": op.get("site"),
                        "host": rec.get("host")})
    return out


def _mismatch(a: int, b: int, op: dict[str, Any], other: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    """Rank ``a`` waits for a message from rank ``b`` while another one waits at ``a`` unmatched:
    the program's tag or source mismatch, not a lost message."""
    src, tag, want = other.get("source"), other.get("tag"), op.get("tag")
    where = f" at {_short_site(op.get('site'))}" if op.get("site") else ""
    wild = other.get("wildcard")
    if isinstance(wild, dict) and wild.get("site"):
        # an ANY_SOURCE receive took b's message, meant (by its tag) for src's: that receive is the bug
        return {"kind": "source-mismatch", "ranks": hangfilter.rank_ranges([a]), "rank_list": [a],
                "reason": f"receive from any source took the wrong message: rank {a}'s ANY_SOURCE receive at "
                          f"{_short_site(wild['site'])} took rank {b}'s message (tag {tag}), so its receive "
                          f"from rank {b}{where} waits while rank {src}'s message (tag {tag}) is left unmatched",
                "op": op.get("name"), "comm": op.get("comm"), "site": wild["site"], "host": rec.get("host"),
                "unmatched": other}
    if src == b:
        kind, reason = "tag-mismatch", (f"unmatched tag: rank {b} sent tag {tag}, rank {a} waits for tag "
                                        f"{'any' if want is None else want} from rank {b}{where}")
    else:
        kind, reason = "source-mismatch", (f"unmatched source: rank {src} sent to rank {a} (tag {tag}), rank {a} "
                                           f"waits for a message from rank {b}{where}")
    # the ranks to fix: the receiver and the sender of the message it does not match (a receive
    # that names another rank does not make that rank part of the mismatch)
    ranks = sorted({a, src if isinstance(src, int) else b})
    return {"kind": kind, "ranks": hangfilter.rank_ranges(ranks), "rank_list": [a] + [r for r in ranks if r != a],
            "reason": reason, "op": op.get("name"), "comm": op.get("comm"), "site": op.get("site"),
            "host": rec.get("host"), "unmatched": other}


def _short_site(site: Any) -> str:
    """``dir/a.py:20 in f`` -> ``a.py:20`` (the user's file and line)."""
    text = str(site).split(" in ", 1)[0]
    return text.rsplit("/", 1)[-1]


LONG_CF_AFTER = 5.0   # seconds a CF has run before a diagnosis names it (a spinning CF looks busy, not hung)


def long_running_cfs(state: dict[str, Any]) -> list[dict[str, Any]]:
    """CFs of a fragmented program that have been running for more than ``LONG_CF_AFTER`` s
    (the ranks' ``cfs`` records): its ranks poll MPI in their loop, so only this names them."""
    out = []
    for rec in state.get("ranks") or []:
        for cf in rec.get("cfs") or []:
            secs = cf.get("running_s")
            if isinstance(secs, (int, float)) and secs > LONG_CF_AFTER:
                r = int(rec["rank"])
                out.append({"kind": "long-cf", "ranks": hangfilter.rank_ranges([r]), "rank_list": [r],
                            "reason": f"CF {cf.get('expr')} has been running for {secs:.1f} s on rank {r}",
                            "site": cf.get("site"), "host": rec.get("host"), "cf": cf.get("cf")})
    return sorted(out, key=lambda c: c["reason"])


_CAUSE_KINDS = ("host-down", "network", "rank-failed", "io-fault", "io-error", "slow")


def incident_causes(incidents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Root causes the localization service found that a state snapshot cannot show (I/O faults, slow ranks...)."""
    best: dict[tuple, dict[str, Any]] = {}
    for inc in incidents:
        kind = str(inc.get("kind"))
        if kind not in _CAUSE_KINDS or not inc.get("ranks"):
            continue
        key = (kind, tuple(inc["ranks"]))
        if key not in best or int(inc.get("count") or 0) >= int(best[key].get("count") or 0):
            best[key] = inc
    out = []
    for (kind, ranks), inc in sorted(best.items(), key=lambda kv: _CAUSE_KINDS.index(kv[0][0])):
        sites = [e.get("site") for e in inc.get("evidence") or [] if e.get("site")]
        out.append({"kind": kind, "ranks": hangfilter.rank_ranges(list(ranks)), "rank_list": list(ranks),
                    "reason": str(inc.get("verdict")), "site": sites[0] if sites else None,
                    "host": inc.get("host"), "records": inc.get("count"), "source": "localization service"})
    return out


def explained_by_lost(state: dict[str, Any], found: list[dict[str, Any]],
                      rep: offline.Report) -> tuple[list[dict[str, Any]], offline.Report]:
    """Findings and root causes that a lost message explains, taken out.

    A message counted sent and never received is the cause of its receiver's wait, so a wait
    cycle through that receiver and its sender is no deadlock (the sender did its part), and a
    rank waiting, directly or through other point-to-point waits, for that receiver does not
    wait because of the other rank's message left at it (``unmatched source``): that message,
    sent early by a neighbour a step ahead, waits for a later receive. Mismatches with evidence
    of their own (a tag, an ``ANY_SOURCE`` receive that took the message) stay."""
    lost_edges = {(c["rank_list"][1], c["rank_list"][0]) for c in found if c["kind"] == "lost-message"}
    if not lost_edges:
        return found, rep
    waits_for = {}
    for r in state.get("ranks") or []:
        op = r.get("op") or {}
        if op.get("kind") == "p2p" and isinstance(op.get("peer"), int):
            waits_for[int(r["rank"])] = int(op["peer"])
    stuck_on_lost = {a for a, _ in lost_edges}

    def behind_lost(rank: int) -> bool:
        seen: set[int] = set()
        while rank not in seen:
            if rank in stuck_on_lost:
                return True
            seen.add(rank)
            if rank not in waits_for:
                return False
            rank = waits_for[rank]
        return False

    kept = [c for c in found if not (
        c["kind"] == "source-mismatch" and not (c.get("unmatched") or {}).get("wildcard")
        and isinstance(waits_for.get(c["rank_list"][0]), int) and behind_lost(waits_for[c["rank_list"][0]]))]
    causes = [rc for rc in rep.root_causes if not (
        rc.kind == "deadlock" and any(a in rc.ranks and b in rc.ranks for a, b in lost_edges))]
    if len(causes) == len(rep.root_causes):
        return kept, rep
    verdict = "hang" if rep.verdict == "deadlock" and not any(rc.kind == "deadlock" for rc in causes) else rep.verdict
    return kept, dataclasses.replace(rep, root_causes=causes, verdict=verdict)


_INCIDENT_ORDER = ("host-down", "network", "rank-failed", "io-fault", "io-error", "deadlock", "not-sending",
                   "external", "unreachable", "collective-hang", "timeout", "slow")
MAX_INCIDENTS_SHOWN = 8


def analyze(state: dict[str, Any]) -> dict[str, Any]:
    """Full report of a state file (see the module docstring)."""
    waits = [float((r.get("op") or {}).get("since") or 0.0) for r in state.get("ranks") or [] if r.get("op")]
    lost = lost_messages(state)
    out: dict[str, Any]
    if stacksonly.applies(state):        # a program without the runtime: its stacks are all there is
        rep = stacksonly.diagnose(state)
        out = rep.to_dict()
        parts = [rep.to_text().rstrip()]
    elif waits and max(waits) < HUNG_AFTER:
        out = {"verdict": "progressing", "root_causes": [], "evidence": [
            f"{len(waits)} rank(s) in MPI, the longest wait {max(waits):.3f} s: the job is progressing"]}
        parts = [f"job {state.get('job')}: {len(state.get('ranks') or [])} ranks answered; verdict: progressing "
                 f"(no rank waits longer than {HUNG_AFTER:g} s; longest {max(waits):.3f} s)"]
    else:
        rep = offline.diagnose(state)
        lost, rep = explained_by_lost(state, lost, rep)
        out = rep.to_dict()
        parts = [rep.to_text().rstrip()]
    if lost:
        out["root_causes"] = lost + list(out.get("root_causes") or [])
        mism = [c for c in lost if c["kind"] != "lost-message"]
        out["verdict"] = mism[0]["kind"] if mism else "lost-message"
        head = "messages that do not match their receive" if mism else "lost messages"
        parts.insert(0, "\n".join([f"{head} (they explain the waits below):"]
                                   + [f"  {c['reason']}" if c["kind"] != "lost-message" else
                                      f"  {c['reason']} at {c['site']}" for c in lost]))
    long_cfs = long_running_cfs(state)
    if long_cfs:
        text = "\n".join([f"computation fragments running for more than {LONG_CF_AFTER:g} s:"]
                         + [f"  {c['reason']} at {c['site']}" for c in long_cfs])
        if out.get("verdict") in ("progressing", "no-hang", None) and not out.get("root_causes"):
            out["verdict"] = "long-cf"          # the ranks look busy; what they are busy with is the finding
            parts.insert(0, text)
        else:
            parts.append(text)
        out["root_causes"] = list(out.get("root_causes") or []) + long_cfs
    found = incident_causes((state.get("known") or {}).get("incidents") or [])
    if found:
        if not out.get("root_causes"):
            out["verdict"] = found[0]["kind"] if out.get("verdict") in ("progressing", "no-hang", None) else out["verdict"]
        out["root_causes"] = list(out.get("root_causes") or []) + found
        parts.append("\n".join(["found by the run-time detection:"]
                                + [f"  {c['reason']}" + (f" at {c['site']}" if c.get("site") else "") for c in found]))
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
