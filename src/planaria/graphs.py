"""Graph helpers shared by the rule base and the offline diagnosis (pure, no planaria imports)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping


def cyclic_components(adj: Mapping[int, Iterable[int]]) -> list[list[int]]:
    """Strongly connected components that contain a cycle (more than one node, or a self loop).

    Iterative Tarjan (wait-for graphs of a large job would overflow Python's recursion limit);
    every component sorted, the list sorted. ``adj[v]`` lists the nodes ``v`` has an edge to.
    """
    nodes = sorted(set(adj) | {w for es in adj.values() for w in es})
    succ = {v: sorted(set(adj.get(v, ()))) for v in nodes}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in succ[v]:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(out)
