"""The controller's end of a collection through node agents (``planaria.launch.nodecollect``):
one request per node agent, the answers merged, every rank without an answer named missing."""
from __future__ import annotations

import threading
import time
from typing import Any

from planaria.launch.nodecollect import ROUTED, NodeCollections, budget_for, levels
from planaria.launch.nodeagent import NodeAgent


def _part(rank: int) -> dict[str, Any]:
    return {"stacks": [[["a.py", rank % 2, "f"]]], "ranks": [{"rank": rank, "threads": [{"stack": 0}]}], "missing": []}


def test_levels_and_budget_follow_the_node_tree() -> None:
    assert ROUTED == NodeAgent.ROUTED
    assert levels([3, 4]) == 1 and levels([3, ROUTED + 2]) == 3
    assert budget_for(1, 1.0, 1, 0.2) == 2.0 and budget_for(3, 0.5, 3, 0.2) == 2.0 + 0.4


def test_answers_are_merged_and_the_silent_node_s_ranks_are_missing() -> None:
    nc = NodeCollections()
    where = {0: ("a", 5), 1: ("a", 6), 2: ("b", 5), 3: ("c", 7)}
    sent: list[tuple[Any, dict[str, Any]]] = []

    def send(node: Any, msg: dict[str, Any]) -> None:
        sent.append((node, msg))
        if node == "a":              # node a answers for both its ranks, b names its rank missing, c is silent
            threading.Timer(0.05, nc.deliver, [{"id": msg["id"], "part": {**_part(0), "ranks": [
                {"rank": 0}, {"rank": 1}]}}]).start()
        elif node == "b":
            threading.Timer(0.05, nc.deliver, [{"id": msg["id"], "part": {"missing": [2]}}]).start()

    t0 = time.monotonic()
    got = nc.collect(where, [0, 1, 2, 3], rounds=1, interval=0.0, hop=0.2, send=send)
    took = time.monotonic() - t0
    assert sorted(node for node, _ in sent) == ["a", "b", "c"]
    assert {node: msg["l"] for node, msg in sent} == {"a": [5, 6], "b": [5], "c": [7]}
    assert all(msg["budget"] == budget_for(1, 0.2, 1, 0.0) and msg["hop"] == 0.2 for _, msg in sent)
    assert sorted(rec["rank"] for rec in got["ranks"]) == [0, 1]
    assert sorted(got["missing"]) == [2, 3]
    assert got["collect"]["nodes"] == 3 and got["collect"]["answered"] == 2
    assert 0.55 <= took < 2.0                   # waited the budget plus one hop for c, no longer
    nc.deliver({"id": sent[0][1]["id"], "part": _part(9)})   # a late answer is dropped, not kept


def test_all_answers_end_the_wait_at_once() -> None:
    nc = NodeCollections()

    def send(node: Any, msg: dict[str, Any]) -> None:
        nc.deliver({"id": msg["id"], "part": _part(node)})

    t0 = time.monotonic()
    got = nc.collect({r: (r, 1) for r in range(4)}, list(range(4)), rounds=1, interval=0.0, hop=5.0, send=send)
    assert time.monotonic() - t0 < 1.0
    assert sorted(rec["rank"] for rec in got["ranks"]) == [0, 1, 2, 3] and got["missing"] == []
    assert len(got["stacks"]) == 2               # the same stack from several nodes kept once
