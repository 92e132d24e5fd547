"""The wait-for graph as a picture draws it: a few dozen nodes, whatever the number of ranks (pure).

Part of the render step of the offline analysis (the report's ``wait_graph``, drawn by
``planaria diagnose --dot/--svg``, :mod:`planaria.diagnose.picture`). Nodes are ranks (``r<rank>``),
collective calls (``g<group>``: a communicator's collective #seq, pointing at the members that
have not arrived) and sets of ranks that wait on the same node in the same operation
(``s<k>``: "ranks 0-2,5 in Allreduce"). A rank that others wait on keeps a node of its own, so
chains and cycles (deadlocks) show rank by rank. Edges point from the waiter to what it waits on.
Edges to the root causes' ranks come first; beyond ``limit`` nodes the rest are counted in
``omitted``, not drawn.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from planaria.diagnose.collectives import Collectives
from planaria.diagnose.findings import clip, ranges, short_site
from planaria.diagnose.prepare import Prepared
from planaria.diagnose.waitgraph import WaitGraph
from planaria.diagnose.waiting import lag_categories

MAX_NODES = 60        # nodes of a drawn wait graph
MAX_LAGGARDS = 8      # not-arrived members of a collective drawn one by one (more: one set node)


class _Drawing:
    """Nodes and edges being collected, up to a node budget."""

    def __init__(self, p: Prepared, coll: Collectives, limit: int, roots: np.ndarray) -> None:
        self.p, self.coll, self.limit, self.roots = p, coll, limit, roots
        self.nodes: dict[str, dict[str, Any]] = {}
        self.edges: list[dict[str, Any]] = []
        self.omitted = 0

    def full(self, extra: int = 1) -> bool:
        return len(self.nodes) + extra > self.limit

    def rank(self, r: int) -> str:
        nid = f"r{r}"
        if nid not in self.nodes:
            self.nodes[nid] = {"id": nid, "kind": "rank", "ranks": str(r), "n_ranks": 1, "label": f"rank {r}",
                               "detail": self.p.state_text(r), "root": bool(np.isin(r, self.roots))}
        return nid

    def ranks(self, ranks: np.ndarray, detail: str) -> str:
        if ranks.size == 1:
            return self.rank(int(ranks[0]))
        nid = f"s{len(self.nodes)}"
        self.nodes[nid] = {"id": nid, "kind": "ranks", "ranks": ranges(ranks), "n_ranks": int(ranks.size),
                           "label": f"{ranks.size} ranks: {clip(ranges(ranks), 40)}", "detail": detail,
                           "root": bool(np.isin(ranks, self.roots).any())}
        return nid

    def group(self, g: int) -> str:
        nid = f"g{g}"
        if nid not in self.nodes:
            coll, p = self.coll, self.p
            lag = coll.laggards(g)
            self.nodes[nid] = {"id": nid, "kind": "collective", "ranks": "", "n_ranks": 0,
                               "label": coll.group_text(p, g), "root": False,
                               "detail": f"{coll.waiters(g).size} of {int(coll.group_size[g])} members in it"}
            if lag.size > MAX_LAGGARDS:       # one node per what they do instead (no state, computing, ...)
                for what, ranks in lag_categories(p, coll, lag, g).items():
                    self.edge(nid, self.ranks(ranks, what), "not arrived")
            for r in (lag.tolist() if lag.size <= MAX_LAGGARDS else []):
                self.edge(nid, self.rank(int(r)), "not arrived")
        return nid

    def edge(self, src: str, dst: str, label: str) -> None:
        self.edges.append({"from": src, "to": dst, "label": label})


def _waiter_sets(p: Prepared, graph: WaitGraph, own: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(target node, waiting ranks) with one operation name each; ranks in ``own`` alone."""
    w = graph.waiting_ranks
    t = graph.waits_on[w]
    keep = t != w
    w, t = w[keep], t[keep]
    alone = np.isin(w, own)
    op = p.cols["op_name"][p.row_of[w]].astype(np.int64)
    key = np.where(alone, -1 - np.arange(w.size), t * (int(op.max(initial=0)) + 1) + op)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    return [(int(t[first[k]]), w[inverse == k]) for k in order.tolist()]


def wait_graph_data(p: Prepared, coll: Collectives, graph: WaitGraph, roots: list[int],
                    limit: int = MAX_NODES) -> dict[str, Any]:
    """``{"nodes": [...], "edges": [...], "omitted": n}`` for the report (see the module docstring).
    A node has ``id``, ``kind`` (rank, ranks, collective), ``ranks`` (range text), ``n_ranks``,
    ``label``, ``detail`` (what it does) and ``root`` (it holds a root cause's rank); an edge
    ``from``, ``to`` and ``label`` (the operation). ``roots`` are the root causes' ranks, whose
    edges are drawn first."""
    d = _Drawing(p, coll, limit, np.asarray(roots, dtype=np.int64))
    size = p.size
    t_all = graph.waits_on[graph.waiting_ranks]
    lag = coll.laggard_rank
    own = np.unique(np.concatenate([t_all[t_all < size], lag, np.asarray(roots, dtype=np.int64)]))
    sets = _waiter_sets(p, graph, own)
    root_set = set(roots)
    sets.sort(key=lambda s: s[0] not in root_set and not (s[1].size == 1 and int(s[1][0]) in root_set))
    for target, ranks in sets:
        if d.full(2 + (MAX_LAGGARDS if target >= size else 0)):
            d.omitted += int(ranks.size)
            continue
        first = int(ranks[0])
        op = p.op_text(first)
        src = d.ranks(ranks, f"in {op.split(' (tag')[0]} at {short_site(p.site(first))}")
        dst = d.rank(target) if target < size else d.group(target - size)
        d.edge(src, dst, op.split(" ")[0])
    for r in roots:                    # a root cause nobody waits on (yet) is still shown
        if 0 <= r < size and not d.full():
            d.rank(int(r))
    return {"nodes": list(d.nodes.values()), "edges": d.edges, "omitted": d.omitted}
