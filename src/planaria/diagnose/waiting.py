"""Who waits where, for the report: per collective and per communicator, with the members that have
not arrived and what they do instead; and receives whose peer is not sending (paper 000 §2.3 step 6).

Part of the render step of the offline analysis. Each function returns its entries and the
evidence lines it found, in the order a report shows them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from planaria.diagnose.collectives import Collectives
from planaria.diagnose.findings import TEXT_LINES, clip, rank_phrase, ranges, short_site
from planaria.diagnose.prepare import Prepared, uniq
from planaria.diagnose.state import NULL

DETAIL = 32          # collective groups / p2p communicators listed one by one in the summary


# --------------------------------------------------------------------------- unmatched receives
def unmatched_receives(p: Prepared) -> tuple[list[dict[str, Any]], int, list[str]]:
    """(the first 100 receives whose peer is not sending to them, their count, evidence lines)."""
    c = p.cols
    rows = np.flatnonzero(p.is_p2p & p.is_recv_name[c["op_name"]] & ~p.is_send_name[c["op_name"]])
    peer = c["op_peer"][rows]
    ok = (peer != NULL) & (peer >= 0) & (peer < p.size)
    rows, peer = rows[ok], peer[ok]
    prow = p.row_of[peer]
    ans = prow >= 0
    rows, peer, prow = rows[ans], peer[ans], prow[ans]
    me = p.rank[rows]
    # the peer has moved past the send: it is in a collective, has finished, or receives from us too
    recv_from_me = p.is_p2p[prow] & p.is_recv_name[c["op_name"][prow]] & (c["op_peer"][prow] == me)
    blocked = p.is_coll[prow] | p.finished[prow] | recv_from_me
    sel = np.flatnonzero(blocked)
    out: list[dict[str, Any]] = []
    for i in sel[:100].tolist():
        r, q = int(me[i]), int(peer[i])
        tag = int(c["op_tag"][rows[i]])
        out.append({"rank": r, "peer": q, "tag": None if tag == NULL else tag, "site": p.site(r),
                    "peer_state": p.state_text(q)})
    evidence = []
    for u in out[:TEXT_LINES]:
        tag_text = f", tag {u['tag']}" if u["tag"] is not None else ""
        evidence.append(f"unmatched receive: rank {u['rank']} waits in "
                        f"{p.op_text(u['rank']).split(' (tag')[0]}{tag_text} at {short_site(u['site'])}; "
                        f"rank {u['peer']} is not sending to it: it {u['peer_state']}")
    if sel.size > TEXT_LINES:
        evidence.append(f"... {sel.size - TEXT_LINES} more unmatched receives")
    return out, int(sel.size), evidence


# --------------------------------------------------------------------------- who waits where
def waiting_summary(p: Prepared, coll: Collectives) -> tuple[list[dict[str, Any]], list[str]]:
    """Entries per collective (the most waited-in first) and per communicator of point-to-point
    waits, sorted by ranks waiting; and the cross-communicator dependencies seen."""
    evidence: list[str] = []
    out = _group_entries(p, coll, evidence)
    out += _p2p_entries(p)
    out.sort(key=lambda e: -e["waiting"])
    return out, evidence


def _group_entries(p: Prepared, coll: Collectives, evidence: list[str]) -> list[dict[str, Any]]:
    c = p.cols
    out: list[dict[str, Any]] = []
    nw = np.diff(coll.waiter_off)
    order = np.argsort(-nw, kind="stable")
    for g in order[:DETAIL].tolist():
        w, lag = coll.waiters(g), coll.laggards(g)
        comm = p.strings[int(coll.group_comm[g])]
        wr = p.row_of[w]
        codes, cnt = uniq(c["op_site"][wr], counts=True)
        sites = {p.string(int(k)) or "?": int(n) for k, n in zip(codes.tolist(), cnt.tolist(), strict=True)}
        cats = lag_categories(p, coll, lag, g)
        ops = "/".join(p.strings[int(k)] for k in uniq(c["op_name"][wr]).tolist())
        na = "; ".join(f"{clip(ranges(v), 60)} ({k})" for k, v in cats.items())
        out.append({"comm": comm, "kind": "coll", "op": ops, "seq": int(coll.group_seq[g]), "waiting": int(w.size),
                    "members": int(coll.group_size[g]), "sites": sites, "not_arrived": ranges(lag),
                    "n_not_arrived": int(lag.size),
                    "not_arrived_by_state": {k: ranges(v) for k, v in cats.items()},
                    "text": f"{comm}: {w.size} of {coll.group_size[g]} members in {coll.group_text(p, g)} at "
                            f"{p.sites_of(w)}" + (f"; not arrived: {na}" if na else "; all arrived")})
        for k, v in cats.items():
            if k.startswith("in ") and " on " in k:
                evidence.append(f"cross-communicator dependency: {coll.group_text(p, g)} lacks "
                                f"{rank_phrase(v)}, which {'wait' if v.size > 1 else 'waits'} {k}")
    if coll.n_groups > DETAIL:
        out.append(_more_groups_entry(p, coll, order[DETAIL:]))
    return out


def _more_groups_entry(p: Prepared, coll: Collectives, rest: np.ndarray) -> dict[str, Any]:
    """One entry for the collective groups ``rest`` not listed one by one."""
    sel = np.zeros(coll.n_groups, dtype=bool)
    sel[rest] = True
    lag = coll.laggard_rank[sel[coll.laggard_group]]
    w = coll.waiter_rank[sel[coll.waiter_group]]
    ops = "/".join(p.strings[int(k)] for k in uniq(p.cols["op_name"][p.row_of[w]]).tolist())
    cats = {k: int(v.size) for k, v in lag_categories(p, coll, lag, -1, by_op=False).items()}
    return {"comm": f"{rest.size} more communicators", "kind": "coll", "op": ops, "seq": None,
            "waiting": int(w.size), "members": int(coll.group_size[rest].sum()), "n_not_arrived": int(lag.size),
            "not_arrived_by_state": cats,
            "text": f"{rest.size} more collectives: {w.size} ranks in {ops} at {p.sites_of(w)}; "
                    f"not arrived: {lag.size} ranks" + (" (" + ", ".join(f"{v} {k}" for k, v in
                                                                         cats.items()) + ")" if cats else "")}


def _p2p_entries(p: Prepared) -> list[dict[str, Any]]:
    """One entry per communicator of point-to-point waits (the busiest first), the rest in one."""
    c = p.cols
    p2p = np.flatnonzero(p.is_p2p)
    if not p2p.size:
        return []
    out: list[dict[str, Any]] = []
    comm = c["op_comm"][p2p].astype(np.int64)
    codes, cnt = uniq(comm, counts=True)
    corder = np.argsort(-cnt, kind="stable")
    for cc in codes[corder[:DETAIL]].tolist():
        rows = p2p[comm == cc]
        nm = p.string(cc) or "?"
        ranks = p.rank[rows]
        names = "/".join(p.strings[int(x)] for x in uniq(c["op_name"][rows]).tolist())
        scodes, scnt = uniq(c["op_site"][rows], counts=True)
        out.append({"comm": nm, "kind": "p2p", "op": names, "seq": None, "waiting": int(rows.size),
                    "members": None, "ranks": ranges(ranks),
                    "sites": {p.string(int(k)) or "?": int(n)
                              for k, n in zip(scodes.tolist(), scnt.tolist(), strict=True)},
                    "text": f"{nm}: {rank_phrase(ranks)} in point-to-point waits ({names}) at {p.sites_of(ranks)}"})
    if codes.size > DETAIL:
        rest = codes[corder[DETAIL:]]
        rows = p2p[np.isin(comm, rest)]
        out.append({"comm": f"{rest.size} more communicators", "kind": "p2p", "op": None, "seq": None,
                    "waiting": int(rows.size), "members": None, "ranks": ranges(p.rank[rows]),
                    "text": f"{rest.size} more communicators: {rows.size} ranks in point-to-point waits at "
                            f"{p.sites_of(p.rank[rows])}"})
    return out


def lag_categories(p: Prepared, coll: Collectives, lag: np.ndarray, g: int,
                   by_op: bool = True) -> dict[str, np.ndarray]:
    """Not-arrived members by what they do: no state / computing / p2p wait / other collective."""
    cats: dict[str, np.ndarray] = {}
    if not lag.size:
        return cats
    rows = p.row_of[lag]
    nost = rows < 0
    if nost.any():
        cats["no state"] = lag[nost]
    ar, rws = lag[~nost], rows[~nost]
    comp = p.computing[rws]
    if comp.any():
        cats["computing"] = ar[comp]
    in_p2p = p.is_p2p[rws]
    in_coll = p.is_coll[rws]
    if not by_op:
        if in_p2p.any():
            cats["in point-to-point waits"] = ar[in_p2p]
        if in_coll.any():
            cats["in other collectives"] = ar[in_coll]
        return cats
    if in_p2p.any():
        names = p.cols["op_name"][rws[in_p2p]]
        for nm in uniq(names).tolist()[:TEXT_LINES]:
            cats[f"in {p.strings[nm]} (point-to-point)"] = ar[in_p2p][names == nm]
    if in_coll.any():
        gg = coll.group_of_row[rws[in_coll]]
        for h in uniq(gg).tolist()[:TEXT_LINES]:
            label = f"in {coll.group_text(p, h)}" if h != g else "in the same collective"
            cats[label] = ar[in_coll][gg == h]
    return cats
