"""Fourth step of the offline analysis: the wait-for graph followed to its root causes.

Ranks others (transitively) wait on that wait on nobody (no state, computing, blocked outside MPI,
finished, hung by the fault plan), point-to-point wait cycles (deadlock, or a matched send and
receive both waiting: suspect the network), cycles of collectives through their laggards
(deadlock across operations, or ranks that disagree on the next collective), and collectives
every member entered that do not complete (``mismatch``). Each cause counts the ranks that wait
on it; the causes are sorted by that count.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from planaria.diagnose.collectives import Collectives
from planaria.diagnose.findings import TEXT_LINES, RootCause, rank_phrase, short_site
from planaria.diagnose.mismatch import cross_comm_mismatch, group_causes, skipped_step
from planaria.diagnose.prepare import Prepared
from planaria.diagnose.pyspy import STOPPED_STATUS
from planaria.diagnose.state import NULL
from planaria.diagnose.waitgraph import WaitGraph
from planaria.graphs import cyclic_components

_EXAMPLES = 32      # root causes that get an example sentence
_SINK_KINDS = frozenset({"no-state", "computing", "blocked-outside-mpi", "finished", "any-source", "unknown-wait",
                         "self-wait", "injected"})
_KIND_ORDER = {"injected": -1, "deadlock": 0, "no-state": 1, "stuck-transfer": 2, "collective-mismatch": 3,
               "computing": 4, "blocked-outside-mpi": 5, "finished": 6, "stuck-collective": 7, "any-source": 8,
               "self-wait": 9, "unknown-wait": 10}


@dataclass(frozen=True)
class Causes:
    """The root causes, most waited-on first, and the evidence found on the way."""

    causes: tuple[RootCause, ...]
    evidence: tuple[str, ...]


def root_causes(p: Prepared, coll: Collectives, graph: WaitGraph) -> Causes:
    """Every root cause of the wait-for graph, with the ranks that wait on it and an example sentence."""
    evidence: list[str] = []
    rank_level = [cycle_cause(p, list(cyc)) for cyc in graph.rank_cycles]          # (a) rank cycles
    on_cycle = np.zeros(p.size, dtype=bool)
    for cyc in graph.rank_cycles:
        on_cycle[list(cyc)] = True
    rank_level += sink_causes(p, graph, sink_ranks(p, graph, on_cycle))            # (b) ranks waiting on nobody
    counts = rank_cause_waiters(p, coll, graph, rank_level, on_cycle)
    causes = [dataclasses.replace(rc, waiters=int(n)) for rc, n in zip(rank_level, counts.tolist(), strict=True)]
    for scc in cyclic_components(graph.group_edges):                                # (c) group cycles
        n_wait = graph.waiters_of_groups(scc)
        causes.append(cross_comm_mismatch(p, coll, graph, scc, n_wait, evidence)
                      or skipped_step(p, coll, scc, n_wait, evidence)
                      or group_cycle_cause(p, coll, graph, scc, n_wait))
    causes.extend(group_causes(p, coll, graph, evidence))                          # (d) stalled collectives
    causes.sort(key=lambda x: (-x.waiters, _KIND_ORDER.get(x.kind, 99), x.ranks[:1]))
    for i, x in enumerate(causes[:_EXAMPLES]):   # one O(size) pass each: only for the root causes a reader sees first
        if not x.example and x.kind in _SINK_KINDS:
            causes[i] = dataclasses.replace(x, example=example(p, coll, graph, np.asarray(x.ranks, dtype=np.int64)))
    return Causes(tuple(causes), tuple(evidence))


def sink_ranks(p: Prepared, graph: WaitGraph, on_cycle: np.ndarray) -> np.ndarray:
    """Ranks a wait ends on that wait on nobody (not on a cycle), and every rank without state."""
    size, t_w, lt = p.size, graph.waiting_terminal, graph.laggard_terminal
    sinks = np.unique(np.concatenate([t_w[t_w < size], lt[lt < size]]))
    return np.union1d(sinks[~on_cycle[sinks]], p.census.missing)


def rank_cause_waiters(p: Prepared, coll: Collectives, graph: WaitGraph, causes: list[RootCause],
                       on_cycle: np.ndarray) -> np.ndarray:
    """Ranks waiting on each rank-level cause: point-to-point chains ending on its ranks, plus the
    ranks in collectives (or collectives reaching them) that lack its ranks."""
    size, n_groups = p.size, coll.n_groups
    span = max(n_groups, 1)
    cause_of_rank = np.full(size, -1, dtype=np.int64)
    for i, rc in enumerate(causes):
        cause_of_rank[rc.ranks] = i
    t_w, waiting, lt = graph.waiting_terminal, graph.waiting_ranks, graph.laggard_terminal
    direct = np.bincount(t_w[(t_w < size) & (t_w != waiting)], minlength=size)
    onto = np.bincount(t_w[t_w < size], minlength=size)     # cycle members land on the cycle themselves
    weight = np.where(on_cycle, onto, direct)
    has = np.flatnonzero(cause_of_rank >= 0)
    count = np.bincount(cause_of_rank[has], weights=weight[has], minlength=len(causes))
    sel = lt < size
    cause_of_laggard, group_of_laggard = cause_of_rank[lt[sel]], coll.laggard_group[sel]
    ok = cause_of_laggard >= 0
    pairs = np.unique(cause_of_laggard[ok] * span + group_of_laggard[ok])
    pair_cause, pair_group = pairs // span, pairs % span
    if graph.ancestors:   # expand groups reached through other groups
        extra = {(c_, h) for c_, g in zip(pair_cause.tolist(), pair_group.tolist(), strict=True)
                 if g in graph.ancestors for h in graph.ancestors[g]}
        if extra:
            ex = np.array(sorted(extra), dtype=np.int64)
            pairs = np.unique(np.concatenate([pairs, ex[:, 0] * n_groups + ex[:, 1]]))
            pair_cause, pair_group = pairs // n_groups, pairs % n_groups
    count += np.bincount(pair_cause, weights=graph.basin[pair_group], minlength=len(causes))
    return count


# --------------------------------------------------------------------------- rank cycles
def cycle_cause(p: Prepared, cyc: list[int]) -> RootCause:
    """A point-to-point wait cycle: a deadlock, a tag mismatch, or (two ranks, a matching send and
    receive) a message that does not arrive."""
    c = p.cols
    pair = _pair_cause(p, cyc) if len(cyc) == 2 else None
    if pair is not None:
        return pair
    row0 = int(p.row_of[cyc[0]])
    details = [f"rank {r} waits in {p.op_text(r)} at {short_site(p.site(r))}" for r in cyc]
    ring = " -> ".join(str(r) for r in cyc + cyc[:1])
    r0 = cyc[0]
    return RootCause("deadlock", sorted(cyc), f"wait cycle {ring}: each waits for the next (deadlock)",
                     op=p.string(int(c["op_name"][row0])), comm=p.string(int(c["op_comm"][row0])),
                     site=p.site(r0) if len({p.site(r) for r in cyc}) == 1 else None,
                     host=p.host(r0) if len({p.host(r) for r in cyc}) == 1 else None, details=details)


def _pair_cause(p: Prepared, cyc: list[int]) -> RootCause | None:
    """Two ranks, one only receiving from the other, which only sends to it: a tag mismatch, or on
    one communicator a transfer that does not arrive. None otherwise."""
    c = p.cols
    a, b = cyc
    if not p.only(int(p.row_of[a]), p.is_recv_name):
        a, b = b, a
    ra, rb = int(p.row_of[a]), int(p.row_of[b])
    if not (p.only(ra, p.is_recv_name) and p.only(rb, p.is_send_name)):
        return None
    ta, tb = int(c["op_tag"][ra]), int(c["op_tag"][rb])
    comm_a, comm_b = int(c["op_comm"][ra]), int(c["op_comm"][rb])
    example = f"rank {a} is stuck in {p.op_text(a)} at {short_site(p.site(a))}; rank {b} {p.state_text(b)}"
    if ta not in (NULL, -1) and tb != ta:
        return RootCause("deadlock", sorted(cyc), f"tag mismatch: rank {b} sends tag {tb} to rank {a}, "
                         f"which waits for tag {ta}", op=p.string(int(c["op_name"][ra])),
                         comm=p.string(comm_a), site=p.site(a), host=p.host(a), example=example)
    if comm_a != comm_b:
        return None
    ha, hb = p.host(a), p.host(b)
    link = f"between {ha} and {hb}" if ha != hb else f"inside {ha}"
    return RootCause("stuck-transfer", sorted(cyc),
                     f"matching send and receive both waiting: the message does not arrive "
                     f"-> suspect the network or transport {link}",
                     op=p.string(int(c["op_name"][ra])), comm=p.string(comm_a), site=p.site(a),
                     host=ha if ha == hb else None, example=example)


# --------------------------------------------------------------------------- group cycles
def group_cycle_cause(p: Prepared, coll: Collectives, graph: WaitGraph, scc: list[int], waiters: int) -> RootCause:
    """Collectives that lack ranks waiting (point-to-point) for ranks inside them: a deadlock across operations."""
    size = p.size
    inside = np.asarray(scc, dtype=np.int64) + size
    ranks: set[int] = set()
    details = []
    for g in scc:
        lag = coll.laggards(g)
        for lr in lag[np.isin(graph.terminal[lag], inside)].tolist()[:TEXT_LINES]:
            path, x = [lr], int(graph.waits_on[lr])
            while x < size and len(path) < 64:
                path.append(x)
                x = int(graph.waits_on[x])
            ranks.update(path)
            details.append(f"{coll.group_text(p, g)} lacks rank {lr}: " + "; ".join(
                f"rank {r} {p.state_text(r)}" for r in path) +
                f" (inside {coll.group_text(p, x - size)}, which needs rank {lr})")
    rs = sorted(ranks)
    w0 = int(coll.waiters(scc[0])[0])
    # the call to fix is the point-to-point wait (the others entered a collective every member
    # calls): its site, not the collective's
    p2p = [r for r in rs if p.is_p2p[int(p.row_of[r])]]
    at = p2p[0] if p2p else (rs[0] if rs else None)
    return RootCause("deadlock", rs, "ranks wait in point-to-point operations for ranks that are inside a "
                     "collective that needs them (deadlock across operations)",
                     op=p.string(int(p.cols["op_name"][p.row_of[w0]])), comm=p.strings[coll.group_comm[scc[0]]],
                     site=p.site(at) if at is not None else None, host=p.host(rs[0]) if rs else None,
                     waiters=waiters, example=details[0] if details else "", details=details[1:])


# --------------------------------------------------------------------------- ranks waiting on nobody
def sink_causes(p: Prepared, graph: WaitGraph, sinks: np.ndarray) -> list[RootCause]:
    """Group sink ranks by what they do (and host / site) into root causes."""
    if not sinks.size:
        return []
    keys: dict[tuple[Any, ...], list[int]] = {}
    self_wait = set(graph.self_waiting.tolist())
    hung_by_plan = injected_hangs(p.state)
    for r, row in zip(sinks.tolist(), p.row_of[sinks].tolist(), strict=True):
        keys.setdefault(_sink_key(p, r, row, self_wait, hung_by_plan), []).append(r)
    bad_peer = set(p.rank[graph.bad_peer_rows].tolist())
    out = []
    for key, rs in keys.items():
        kind, reason, op, comm = _sink_reason(p, key, rs, bad_peer)
        r0 = rs[0]
        hosts = {p.host(r) for r in rs[:64]}
        site = p.site(r0) if len({p.site(r) for r in rs[:64]}) == 1 else None
        if kind == "finished" and len(rs) == 1:
            site = finished_site(p, r0)
        out.append(RootCause(kind, rs, reason, op=op, comm=comm, site=site,
                             host=p.host(r0) if len(hosts) == 1 else None))
    return out


def _sink_key(p: Prepared, r: int, row: int, self_wait: set[int], hung_by_plan: dict[int, str]) -> tuple[Any, ...]:
    """What sink rank ``r`` (at ``row``, -1 without state) does: its kind first, then what tells
    its cause apart from others of that kind (host, site, op)."""
    c = p.cols
    if r in hung_by_plan and (row < 0 or not p.finished[row]):
        return ("injected", hung_by_plan[r])
    if row < 0:
        return ("no-state", int(p.host_of[r]))
    if p.finished[row]:
        return ("finished", int(c["status"][row]))
    if p.string(int(c["status"][row])) == STOPPED_STATUS:   # alive, not running: no state of its own
        return ("stopped", p.site(r))
    if p.computing[row]:
        blocked = p.computing_reason(row).startswith("blocked")
        return ("blocked-outside-mpi" if blocked else "computing", p.site(r))
    if r in self_wait:
        return ("self-wait", int(c["op_name"][row]), int(c["op_site"][row]))
    if p.is_p2p[row] and int(c["op_peer"][row]) == NULL and p.is_recv_name[c["op_name"][row]]:
        return ("any-source", int(c["op_name"][row]), int(c["op_comm"][row]), int(c["op_site"][row]))
    return ("unknown-wait", int(c["op_name"][row]), int(c["op_comm"][row]), int(c["op_site"][row]))


def _sink_reason(p: Prepared, key: tuple[Any, ...], rs: list[int],
                 bad_peer: set[int]) -> tuple[str, str, str | None, str | None]:
    """(kind, reason, op, comm) of the sink ranks ``rs`` that share ``key``."""
    kind = key[0]
    row0 = int(p.row_of[rs[0]])
    if kind == "injected":
        return kind, f"hangs as the fault plan asked ({key[1]}; planaria --inject), not by a fault of the program", \
            None, None
    if kind == "no-state":
        return kind, _no_state_reason(p, key[1]), None, None
    if kind == "finished":
        return kind, f"has finished ({p.strings[key[1]]}) while other ranks still wait for it", None, None
    if kind == "stopped":
        return "no-state", "is stopped (SIGSTOP or a debugger): alive but not running", None, None
    if kind == "computing":
        return kind, f"not in MPI: computing (endless loop or slow){step_note(p, rs)}", None, None
    if kind == "blocked-outside-mpi":
        return kind, f"not in MPI: {p.computing_reason(row0)}{step_note(p, rs)}", None, None
    reason = {"self-wait": "waits for a message from itself",
              "any-source": "waits for a message from any source (ANY_SOURCE); no rank is sending to it",
              "unknown-wait": "waits in MPI with no known peer"}[kind]
    if kind == "unknown-wait" and bad_peer.intersection(rs):
        reason = f"waits on a peer outside the job (size {p.size})"
    return kind, reason, p.string(int(p.cols["op_name"][row0])), p.string(int(p.cols["op_comm"][row0]))


def _no_state_reason(p: Prepared, h: int) -> str:
    """Why ranks of host code ``h`` (-1: unknown) have no state."""
    census = p.census
    if h in census.down_hosts:
        return (f"no state -- host {p.host_names[h]}: all {census.down_hosts[h]} ranks missing "
                f"-> node down or unreachable")
    if h in census.partial_hosts:
        m, t = census.partial_hosts[h]
        return (f"no state -- process dead or unreachable ({m} of {t} ranks of host "
                f"{p.host_names[h]} missing; the node answers)")
    return "no state (dead or unreachable)"


def finished_site(p: Prepared, r: int) -> str | None:
    """Where finished rank ``r`` left (its ``sys.exit``, told in its bye), else the call of a rank
    still waiting for it (the one it never matched)."""
    got = ((p.state.get("known") or {}).get("exit_sites") or {}).get(str(r))
    if got:
        return str(got)
    rows = np.flatnonzero((p.cols["op_peer"] == r) & p.in_mpi)
    return p.string(int(p.cols["op_site"][rows[0]])) if rows.size else None


def injected_hangs(state: dict[str, Any]) -> dict[int, str]:
    """Ranks a planned ``hang`` fault stopped (the controller's records), with its description."""
    out: dict[int, str] = {}
    for inj in (state.get("known") or {}).get("injected") or []:
        if inj.get("kind") == "hang" and isinstance(inj.get("rank"), int):
            out[inj["rank"]] = str(inj.get("detail") or "injected hang")
    return out


def step_note(p: Prepared, rs: list[int]) -> str:
    """"; last step 7, most ranks at step 9": how far behind the ranks ``rs`` are (``pl.step``)."""
    st = p.cols["step"]
    mine = st[p.row_of[np.asarray(rs)]]
    mine = mine[mine != NULL]
    others = st[st != NULL]
    if not mine.size or not others.size:
        return ""
    med = int(np.median(others))
    lo = int(mine.min())
    return f"; last step {lo}, most ranks at step {med}" if lo != med else f"; last step {lo}"


# --------------------------------------------------------------------------- example sentences
def example(p: Prepared, coll: Collectives, graph: WaitGraph, rs: np.ndarray) -> str:
    """One sentence: a rank that waits directly on one of ``rs`` (p2p), or a collective that lacks them."""
    size = p.size
    f0 = graph.waits_on[:size]
    hit = np.flatnonzero(np.isin(f0, rs) & (f0 != np.arange(size)))
    if hit.size:
        return _p2p_example(p, graph, rs, hit)
    hit = np.flatnonzero(np.isin(coll.laggard_rank, rs))
    if not hit.size:
        return ""
    g = int(coll.laggard_group[hit[0]])
    inter = np.intersect1d(coll.laggards(g), rs)
    w = coll.waiters(g)
    pred = p.state_text(int(inter[0]))
    if inter.size > 1:
        pred = _plural(pred)
    are = "ranks are" if w.size != 1 else "rank is"
    return (f"{w.size} {are} stuck in {coll.group_text(p, g)} at {p.sites_of(w)}; "
            f"{rank_phrase(inter)} {'have' if inter.size > 1 else 'has'} not arrived: "
            f"{'they' if inter.size > 1 else 'it'} {pred}")


def _p2p_example(p: Prepared, graph: WaitGraph, rs: np.ndarray, hit: np.ndarray) -> str:
    """The first of the ranks ``hit`` waiting directly on ``rs``, and the longest chain ending there."""
    size = p.size
    f0 = graph.waits_on[:size]
    w = int(hit[0])
    tgt = int(f0[w])
    more = hit.size - 1
    who = f"rank {w} is" if not more else f"rank {w} and {more} more rank{'s' if more > 1 else ''} are"
    text = f"{who} stuck in {p.op_text(w)} at {short_site(p.site(w))}; rank {tgt} {p.state_text(tgt)}"
    chained = np.flatnonzero(np.isin(graph.terminal[:size], rs) & (graph.hops[:size] >= 2))
    if chained.size:
        far = int(chained[np.argmax(graph.hops[chained])])
        path: list[Any] = [far]
        x = int(f0[far])
        while len(path) < 200 and x != path[-1]:
            path.append(x)
            if int(f0[x]) == x:
                break
            x = int(f0[x])
        shown = path if len(path) <= 8 else path[:4] + ["..."] + path[-3:]
        text += f"; longest wait chain: {' -> '.join(map(str, shown))} ({len(path) - 1} hops)"
    return text


def _plural(pred: str) -> str:
    """"has no state" -> "have no state", "is not" -> "are not", "waits in" -> "wait in"."""
    first, sep, rest = pred.partition(" ")
    return {"has": "have", "is": "are", "waits": "wait"}.get(first, first) + sep + rest
