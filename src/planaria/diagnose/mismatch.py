"""Root causes in collectives: ranks that disagree on the next collective (its name, root, count,
or communicator), and collectives every member entered that do not complete (suspect the network).

Part of the root-cause step of the offline analysis (``causes``). Each function appends the
evidence lines it finds to the list it is given, in the order a report shows them.
"""
from __future__ import annotations

import numpy as np

from planaria.comm.flight import OPS, bytes_text, mismatch_text
from planaria.diagnose.collectives import Collectives
from planaria.diagnose.findings import RootCause, clip, ran_past, rank_phrase, ranges, short_site
from planaria.diagnose.prepare import Prepared, uniq
from planaria.diagnose.state import NULL
from planaria.diagnose.waitgraph import WaitGraph

_MAX_MISMATCH = 100   # mismatched collectives reported one by one
_COUNT_CHECKED = frozenset(OPS)     # collectives whose buffer size must agree on every rank


def call_text(p: Prepared, row: int) -> str:
    """"Bcast (root 0)" / "Allreduce": a collective call as its members must agree on it."""
    nm = p.string(int(p.cols["op_name"][row])) or "?"
    peer = int(p.cols["op_peer"][row])
    return nm if peer == NULL else f"{nm} (root {peer})"


def ahead(p: Prepared, a: int, b: int) -> bool:
    """Rank of row ``a`` has run past the call rank of row ``b`` is in: a later step, or in the same
    step (or without steps) a later line of the same function of the same file. Then ``a``'s rank
    skipped ``b``'s call, and that call is the one to fix."""
    st = p.cols["step"]
    if st[a] != NULL and st[b] != NULL and st[a] != st[b]:
        return bool(st[a] > st[b])
    return ran_past(p.string(int(p.cols["op_site"][a])), p.string(int(p.cols["op_site"][b])))


# --------------------------------------------------------------------------- cycles of collectives
def cross_comm_mismatch(p: Prepared, coll: Collectives, graph: WaitGraph, scc: list[int], waiters: int,
                        evidence: list[str]) -> RootCause | None:
    """Collectives on different communicators that wait for each other's ranks, every rank missing
    from one being inside another (no point-to-point wait between): the ranks disagree on which
    collective comes next. The ranks of the collective with strictly the fewest ranks inside are the
    odd ones, at their call (or at the call they skipped, when they have run past it); None when the
    cycle goes through a point-to-point wait or no collective is strictly the smallest."""
    inside = np.asarray(scc, dtype=np.int64) + p.size
    if any(not np.isin(graph.waits_on[coll.laggards(g)], inside).all() for g in scc):
        return None
    nw = np.array([coll.waiters(g).size for g in scc])
    if (nw == nw.min()).sum() != 1:
        return None
    g, h = scc[int(np.argmin(nw))], scc[int(np.argmax(nw))]
    odd, major = coll.waiters(g), coll.waiters(h)
    orow, mrow = int(p.row_of[odd[0]]), int(p.row_of[major[0]])
    osites = uniq(p.cols["op_site"][p.row_of[odd]])
    site = p.string(int(osites[0])) if osites.size == 1 else None
    call = f"{coll.group_text(p, g)} at {short_site(site) if site else p.sites_of(odd)}"
    msite = p.string(int(p.cols["op_site"][mrow]))
    mcall = f"{coll.group_text(p, h)} at {short_site(msite)}"
    they = "they wait" if odd.size > 1 else "it waits"
    at = g                       # the collective whose call is to fix
    lag = coll.laggards(g)
    if ahead(p, orow, mrow):
        site, at = msite, h
        reason = (f"{rank_phrase(odd)} skipped {mcall}, which {rank_phrase(major)} "
                  f"{'wait' if major.size > 1 else 'waits'} in: {they} in {call}, which lacks {rank_phrase(lag)}")
    else:
        reason = (f"{rank_phrase(odd)} called {call} where {rank_phrase(major)} called {mcall}: {they} for "
                  f"{rank_phrase(lag)}, which wait{'s' if lag.size == 1 else ''} for "
                  f"{'them' if odd.size > 1 else 'it'} (collectives on different communicators)")
    evidence.append(f"collective mismatch across communicators: {reason}")
    row = orow if at == g else mrow
    return RootCause("collective-mismatch", odd.tolist(), reason, op=p.string(int(p.cols["op_name"][row])),
                     comm=p.strings[int(coll.group_comm[at])], site=site, waiters=waiters)


def skipped_step(p: Prepared, coll: Collectives, scc: list[int], waiters: int,
                 evidence: list[str]) -> RootCause | None:
    """A rank missing from a collective whose members all wait in it at step s (``pl.step``), while
    it waits in a point-to-point call at a later step: it went round its loop without the
    collective (a wait cycle of its point-to-point call and the collective is the symptom)."""
    st = p.cols["step"]
    for g in scc:
        inside = coll.waiters(g)
        if not inside.size or not (p.row_of[inside] >= 0).all():
            continue
        steps = np.unique(st[p.row_of[inside]])
        if len(steps) != 1 or steps[0] < 0:
            continue
        s = int(steps[0])
        later_ranks = [int(r) for r in coll.laggards(g).tolist()
                       if p.row_of[r] >= 0 and st[p.row_of[r]] > s and p.is_p2p[p.row_of[r]]]
        if not later_ranks:
            continue
        odd = np.asarray(later_ranks, dtype=np.int64)
        site = p.site(int(inside[0]))
        later = sorted({int(st[p.row_of[r]]) for r in later_ranks})
        reason = (f"{rank_phrase(odd)} skipped {coll.group_text(p, g)} at {short_site(site)}, which "
                  f"{rank_phrase(inside)} {'wait' if inside.size > 1 else 'waits'} in at step {s}: "
                  f"{'they are' if odd.size > 1 else 'it is'} already at step {', '.join(map(str, later))}, "
                  f"{p.state_text(later_ranks[0])}")
        evidence.append(f"collective skipped: {reason}")
        return RootCause("collective-mismatch", later_ranks, reason,
                         op=p.string(int(p.cols["op_name"][p.row_of[inside[0]]])),
                         comm=p.strings[coll.group_comm[g]], site=site, host=p.host(later_ranks[0]), waiters=waiters)
    return None


# --------------------------------------------------------------------------- collectives every member entered
def group_causes(p: Prepared, coll: Collectives, graph: WaitGraph, evidence: list[str]) -> list[RootCause]:
    """Mismatched collectives, and collectives every member has entered (grouped by op and site)."""
    if not coll.n_groups:
        return []
    mismatch = _mixed_calls(p, coll)
    nw = np.diff(coll.waiter_off)
    all_in = np.diff(coll.laggard_off) == 0
    # every member entered, more of them have completed it than are still inside: a mismatch, not a stall
    passed = all_in & ~mismatch & (nw < coll.group_size - nw)
    out = []
    for g in np.flatnonzero(passed).tolist()[:_MAX_MISMATCH]:
        rc = odd_cause(p, coll, graph, g, evidence)
        if rc is None:
            passed[g] = False
        else:
            out.append(rc)
    for g in np.flatnonzero(mismatch).tolist()[:_MAX_MISMATCH]:
        out.append(odd_cause(p, coll, graph, g, evidence) or _mixed_cause(p, coll, graph, g, evidence))
    stuck = np.flatnonzero(all_in & ~mismatch & ~passed)
    sized = [rc for rc in (size_cause(p, coll, graph, g, evidence) for g in stuck[:_MAX_MISMATCH].tolist())
             if rc is not None]
    if sized:
        out.extend(rc for rc, _ in sized)
        stuck = np.setdiff1d(stuck, [g for _, g in sized])
    if stuck.size:
        out.extend(stuck_causes(p, coll, graph, stuck))
    return out


def _mixed_calls(p: Prepared, coll: Collectives) -> np.ndarray:
    """group -> its ranks are inside different collectives, or name different roots."""
    c, n_groups = p.cols, coll.n_groups
    wrow = p.row_of[coll.waiter_rank]
    ns = len(p.strings) + 1
    names = np.unique(coll.waiter_group * ns + c["op_name"][wrow] + 1)
    peers = c["op_peer"][wrow]
    peers = np.where((peers >= 0) & (peers < p.size), peers + 1, 0)
    roots = np.unique(coll.waiter_group * (p.size + 1) + peers)
    n_names = np.bincount(names // ns, minlength=n_groups)
    n_roots = np.bincount(roots // (p.size + 1), minlength=n_groups)
    return (n_names > 1) | (n_roots > 1)


def _mixed_cause(p: Prepared, coll: Collectives, graph: WaitGraph, g: int, evidence: list[str]) -> RootCause:
    """Group ``g``'s ranks entered different collectives (or roots) and no class is the odd one: all of them."""
    c = p.cols
    w = coll.waiters(g)
    wr = p.row_of[w]
    nm_codes = uniq(c["op_name"][wr])
    comm = p.strings[int(coll.group_comm[g])]
    what = ", ".join(
        f"{rank_phrase(w[c['op_name'][wr] == nm])} in {p.strings[int(nm)]} at "
        f"{short_site(p.string(int(c['op_site'][wr[c['op_name'][wr] == nm]][0])))}" for nm in nm_codes.tolist())
    if nm_codes.size == 1:
        what += "; roots " + ", ".join("none" if x == NULL else str(x) for x in uniq(c["op_peer"][wr])[:8])
    evidence.append(f"collective mismatch on {comm} #{coll.group_seq[g]}: {what}")
    return RootCause("collective-mismatch", w.tolist(),
                     f"ranks entered different collectives (or roots) as #{coll.group_seq[g]} on {comm}: "
                     f"{what}", comm=comm, waiters=graph.waiters_of_groups([g]))


def stuck_causes(p: Prepared, coll: Collectives, graph: WaitGraph, stuck: np.ndarray) -> list[RootCause]:
    """Collectives every member entered that do not complete, one cause per (op, site)."""
    c = p.cols
    ns = len(p.strings) + 1
    first = p.row_of[coll.waiter_rank[coll.waiter_off[stuck]]]
    key = c["op_name"][first].astype(np.int64) * ns + c["op_site"][first] + 1
    out = []
    for k in uniq(key).tolist():
        gs = stuck[key == k]
        sel = np.zeros(coll.n_groups, dtype=bool)
        sel[gs] = True
        ranks = coll.waiter_rank[sel[coll.waiter_group]]
        g0 = int(gs[0])
        comm = p.strings[int(coll.group_comm[g0])]
        op = p.string(int(k // ns))
        site = p.string(int(k % ns) - 1)
        hosts = {p.host(int(r)) for r in ranks[:64]}
        if gs.size == 1:
            reason = (f"all {coll.group_size[g0]} members of {comm} entered {coll.group_text(p, g0)} and it does "
                      f"not complete -> suspect the network or transport (hardware scan of the collective "
                      f"tree needed)")
        else:
            names = ", ".join(p.strings[int(coll.group_comm[g])] for g in gs[:4].tolist())
            reason = (f"in each of {gs.size} communicators ({names}{', ...' if gs.size > 4 else ''}) all "
                      f"members entered {op} and it does not complete -> suspect the "
                      f"network or transport (hardware scan of the collective trees needed)")
        out.append(RootCause(
            "stuck-collective", ranks.tolist(), reason, op=op,
            comm=comm if gs.size == 1 else None, site=site, host=next(iter(hosts)) if len(hosts) == 1 else None,
            waiters=graph.waiters_of_groups(gs.tolist()),
            example=f"{ranks.size} rank{'s are' if ranks.size != 1 else ' is'} stuck in "
                    f"{coll.group_text(p, g0) if gs.size == 1 else op} at {short_site(site)}"))
    return out


def size_cause(p: Prepared, coll: Collectives, graph: WaitGraph, g: int,
               evidence: list[str]) -> tuple[RootCause, int] | None:
    """A collective every member entered but whose buffers disagree in size (a count
    mismatch: MPI leaves it undefined, it may hang), with ``g``; None when the sizes agree or
    the operation's counts may differ by rank."""
    w = coll.waiters(g)
    wr = p.row_of[w]
    name = p.string(int(p.cols["op_name"][wr[0]]))
    if name not in _COUNT_CHECKED:
        return None
    sizes = p.cols["op_size"][wr]
    known = sizes > 0
    vals, counts = np.unique(sizes[known], return_counts=True)
    if vals.size < 2:
        return None
    i = min(range(vals.size), key=lambda j: (int(counts[j]), -int(vals[j])))
    odd, others = w[known & (sizes == vals[i])], w[known & (sizes != vals[i])]
    comm = p.strings[int(coll.group_comm[g])]
    call = f"{name} #{coll.group_seq[g]} on {comm}"
    reason = mismatch_text(clip(ranges(odd)), int(vals[i]), clip(ranges(others)),
                           sorted(int(v) for v in vals if v != vals[i]), call)
    site = p.string(int(p.cols["op_site"][p.row_of[int(odd[0])]]))
    evidence.append(f"count mismatch in {call}: " + ", ".join(
        f"{rank_phrase(w[known & (sizes == v)])} passed {bytes_text(int(v))}" for v in vals.tolist()))
    return RootCause("collective-mismatch", odd.tolist(), reason, op=name, comm=comm, site=site,
                     waiters=graph.waiters_of_groups([g])), g


def odd_ones(p: Prepared, coll: Collectives, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(odd ranks, ranks of the largest other class, members that completed the collective) of group
    ``g``, or None when no class is strictly smaller than every other.

    The ranks inside are partitioned by (call, root). Members that entered the collective and have
    left it (completed) form a class of their own: they are counted with the class whose root is among
    its own ranks when exactly one class has that (the root they got their data from), and they are
    never the odd ones (what they called is not known). A single class inside against more members
    that completed is odd unless it holds its own root (a root still collecting from senders that left)."""
    c = p.cols
    w = coll.waiters(g)
    wr = p.row_of[w]
    peer = c["op_peer"][wr]
    peer = np.where((peer >= 0) & (peer < p.size), peer, -1)
    key = c["op_name"][wr].astype(np.int64) * (p.size + 1) + peer + 1
    ukey, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
    inv = inv.ravel()
    mem = coll.members(g)
    ent = coll.lookup.entered(p, np.full(mem.size, coll.group_comm[g], dtype=np.int64), mem)
    done = mem[(ent >= coll.group_seq[g]) & ~np.isin(mem, w)]
    own_root = np.array([bool(np.isin(ukey[k] % (p.size + 1) - 1, w[inv == k])) for k in range(ukey.size)])
    sizes = cnt.copy()
    rest = done.size
    if done.size and own_root.sum() == 1:
        sizes[own_root] += done.size
        rest = 0
    if ukey.size == 1 and (not rest or own_root[0]):
        return None
    low = int(sizes.min())
    if (sizes == low).sum() != 1 or (rest and rest <= low):
        return None
    k = int(np.argmin(sizes))
    others = np.flatnonzero(np.arange(ukey.size) != k)
    major = w[inv == others[np.argmax(cnt[others])]] if others.size else w[:0]
    return w[inv == k], major, done


def odd_cause(p: Prepared, coll: Collectives, graph: WaitGraph, g: int, evidence: list[str]) -> RootCause | None:
    """The collective-mismatch of the odd ranks of group ``g`` (see :func:`odd_ones`), or None."""
    found = odd_ones(p, coll, g)
    if found is None:
        return None
    odd, major, done = found
    orow = int(p.row_of[odd[0]])
    comm = p.strings[int(coll.group_comm[g])]
    inst = f"collective #{coll.group_seq[g]} on {comm}"
    osites = uniq(p.cols["op_site"][p.row_of[odd]])
    site = p.string(int(osites[0])) if osites.size == 1 else None
    call = f"{call_text(p, orow)} at {short_site(site) if site else p.sites_of(odd)}"
    op_row = orow
    if major.size:
        mrow = int(p.row_of[major[0]])
        msite = p.string(int(p.cols["op_site"][mrow]))
        mcall = f"{call_text(p, mrow)} at {short_site(msite)}"
        if ahead(p, orow, mrow):
            site, op_row = msite, mrow
            reason = (f"{rank_phrase(odd)} skipped {mcall} ({inst}), which {rank_phrase(major)} "
                      f"{'wait' if major.size > 1 else 'waits'} in: {'they are' if odd.size > 1 else 'it is'} "
                      f"already in {call}")
        else:
            reason = f"{rank_phrase(odd)} called {call} where {rank_phrase(major)} called {mcall} ({inst})"
        if done.size:
            reason += f"; {rank_phrase(done)} {'have' if done.size > 1 else 'has'} completed it"
    else:
        reason = (f"{rank_phrase(odd)} {'are' if odd.size > 1 else 'is'} still in {call} ({inst}), which "
                  f"{rank_phrase(done)} {'have' if done.size > 1 else 'has'} completed: "
                  f"{'their calls do' if odd.size > 1 else 'its call does'} not match theirs "
                  f"(another collective, root or count), or {'their' if odd.size > 1 else 'its'} data was lost")
    evidence.append(f"collective mismatch on {comm} #{coll.group_seq[g]}: {reason}")
    return RootCause("collective-mismatch", odd.tolist(), reason, op=p.string(int(p.cols["op_name"][op_row])),
                     comm=comm, site=site, waiters=graph.waiters_of_groups([g]))
