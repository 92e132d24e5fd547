"""Third step of the offline analysis: the wait-for graph over ranks and collective groups.

Nodes 0..size-1 are ranks, size+g is collective group g. A rank in a point-to-point call waits on
its peer, a rank in a collective on its group; a group waits on its laggards. Following a rank's
waits gives its terminal (pointer jumping: log2 n vector passes) and hop count; cycles among ranks
are deadlocks, strongly connected groups (a laggard that waits, maybe through point-to-point chains,
in another collective) are deadlocks across operations.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planaria.diagnose.collectives import Collectives
from planaria.diagnose.prepare import Prepared
from planaria.diagnose.state import NULL


@dataclass(frozen=True, eq=False)
class WaitGraph:
    """Who waits on whom, and where each chain of waits ends."""

    waits_on: np.ndarray             # node -> the node it waits on (itself: waits on nobody)
    terminal: np.ndarray             # node -> where its chain of waits ends (or a node on its cycle)
    hops: np.ndarray                 # node -> waits followed to reach its terminal
    bad_peer_rows: np.ndarray        # rows whose peer is outside the job
    self_waiting: np.ndarray         # ranks whose point-to-point peer is themselves
    waiting_ranks: np.ndarray        # ranks in MPI
    waiting_terminal: np.ndarray     # their terminal
    laggard_terminal: np.ndarray     # terminal of each laggard (Collectives.laggard_rank)
    basin: np.ndarray                # group -> ranks in MPI whose waits end in it
    group_edges: dict[int, set[int]]     # group -> groups one of its laggards' waits end in
    ancestors: dict[int, set[int]]       # group (with edges) -> groups that reach it, itself included
    rank_cycles: tuple[tuple[int, ...], ...]   # point-to-point wait cycles, each from its lowest rank

    def ancestors_of(self, g: int) -> set[int]:
        return self.ancestors.get(g) or {g}

    def waiters_of_groups(self, groups: list[int]) -> int:
        """Ranks whose waits end in any of ``groups`` or in a group that reaches one of them."""
        return sum(int(self.basin[h]) for h in set().union(*map(self.ancestors_of, groups)))


def wait_graph(p: Prepared, coll: Collectives) -> WaitGraph:
    """The wait-for graph of the prepared ranks and their collective groups."""
    c, size, n_groups = p.cols, p.size, coll.n_groups
    n_nodes = size + n_groups
    waits_on = np.arange(n_nodes, dtype=np.int64)
    p2p = np.flatnonzero(p.is_p2p)
    peer = c["op_peer"][p2p]
    valid = (peer != NULL) & (peer >= 0) & (peer < size)
    waits_on[p.rank[p2p[valid]]] = peer[valid]
    in_coll = np.flatnonzero(p.is_coll)
    waits_on[p.rank[in_coll]] = size + coll.group_of_row[in_coll]
    terminal, hops = follow(waits_on)
    waiting_ranks = p.rank[p.in_mpi]
    waiting_terminal = terminal[waiting_ranks]
    ends_in_group = waiting_terminal[waiting_terminal >= size] - size
    laggard_terminal = terminal[coll.laggard_rank]
    edges = group_edges(coll.laggard_group, laggard_terminal, size, n_groups)
    return WaitGraph(waits_on=waits_on, terminal=terminal, hops=hops, bad_peer_rows=p2p[(peer != NULL) & ~valid],
                     self_waiting=p.rank[p2p[valid & (peer == p.rank[p2p])]], waiting_ranks=waiting_ranks,
                     waiting_terminal=waiting_terminal, laggard_terminal=laggard_terminal,
                     basin=np.bincount(ends_in_group, minlength=n_groups), group_edges=edges,
                     ancestors=ancestors(edges), rank_cycles=rank_cycles(waits_on, terminal, size))


def follow(waits_on: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pointer jumping: each node's terminal (a fixed point, or a node on its cycle) and hop count."""
    n = waits_on.size
    nxt, dist = waits_on.copy(), (waits_on != np.arange(n)).astype(np.int64)
    for _ in range(int(np.ceil(np.log2(max(n, 2)))) + 1):   # f^(2^k): fixed point or on a cycle
        if np.array_equal(nxt[nxt], nxt):
            break
        dist = dist + dist[nxt]
        nxt = nxt[nxt]
    return nxt, dist


def group_edges(laggard_group: np.ndarray, laggard_terminal: np.ndarray, size: int,
                n_groups: int) -> dict[int, set[int]]:
    """group -> groups: a laggard of the first waits (maybe via point-to-point chains) in the second."""
    ends_in_group = laggard_terminal >= size
    span = max(n_groups, 1)
    pairs = np.unique(laggard_group[ends_in_group] * span + (laggard_terminal[ends_in_group] - size))
    edges: dict[int, set[int]] = {}
    for a, b in zip((pairs // span).tolist(), (pairs % span).tolist(), strict=True):
        edges.setdefault(a, set()).add(b)
    return edges


def rank_cycles(waits_on: np.ndarray, terminal: np.ndarray, size: int) -> tuple[tuple[int, ...], ...]:
    """The cycles among ranks, each starting at its lowest rank."""
    term = terminal[:size]
    cand = np.unique(term[waits_on[term] != term])
    seen: set[int] = set()
    cycles = []
    for x in cand.tolist():
        if x in seen:
            continue
        cyc, y = [], x
        while y not in seen:
            seen.add(y)
            cyc.append(y)
            y = int(waits_on[y])
        if y in cyc:
            cyc = cyc[cyc.index(y):]
            k = cyc.index(min(cyc))
            cycles.append(tuple(cyc[k:] + cyc[:k]))
    return tuple(cycles)


def ancestors(edges: dict[int, set[int]]) -> dict[int, set[int]]:
    """For each group in the edge subgraph, the groups that reach it (itself included)."""
    rev: dict[int, list[int]] = {}
    for g, es in edges.items():
        for h in es:
            rev.setdefault(h, []).append(g)
    nodes = set(edges) | set(rev)
    anc = {}
    for g in nodes:
        seen, stack = {g}, [g]
        while stack:
            for parent in rev.get(stack.pop(), ()):
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        anc[g] = seen
    return anc
