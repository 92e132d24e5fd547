"""The controller's end of a state collection through node agents (a global diagnosis of a job
whose ranks sit behind them): one ``collect`` per node agent, one merged ``npart`` back from each.

The diagnosis thread asks (``NodeCollections.collect``); the controller's server thread sends the
requests (the ``send`` callback queues them for it) and hands the answers in (``deliver``). The
request follows the same routes as events: a node agent asks its own ranks and the children that
hold the others, and merges their parts, so the controller gets one message per top-level node.
"""
from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from planaria.diagnose.collect import merge_parts

ROUTED = 1 << 24        # node agents' route numbers (a rank behind a child agent) start here (NodeAgent.ROUTED)


def levels(lids: Iterable[int]) -> int:
    """Node-agent levels between the controller and these ranks: 1, or 2 and more when some are
    reached through a child agent (the controller sees one route number; 3 covers fan-out**3 nodes)."""
    return 3 if any(lid >= ROUTED for lid in lids) else 1


def budget_for(depth: int, hop: float, rounds: int, interval: float) -> float:
    """The top node agents' budget: one hop per level and one for the ranks, plus the sampling time
    (an agent waits its budget less one hop, and gives its children that much)."""
    return hop * (depth + 1) + max(rounds - 1, 0) * interval


class NodeCollections:
    """Collections under way through node agents, by id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, queue.SimpleQueue[Any]] = {}

    def deliver(self, msg: dict[str, Any]) -> None:
        """A node agent's ``npart`` (server thread): to the collection waiting for it, if any."""
        cid = msg.get("id")
        if not isinstance(cid, str):
            return
        with self._lock:
            q = self._waiting.get(cid)
        if q is not None:
            q.put(msg.get("part"))

    def collect(self, where: dict[int, tuple[Any, int]], ranks: list[int], rounds: int, interval: float,
                hop: float, send: Callable[[Any, dict[str, Any]], None]) -> dict[str, Any]:
        """The merged part of ``ranks`` (``where``: rank -> (its node agent, its number there)); every
        rank asked and absent from the answers (a node that did not answer in time) is named missing."""
        by_node: dict[Any, list[int]] = {}
        for r in ranks:
            node, lid = where[r]
            by_node.setdefault(node, []).append(lid)
        depth = max((levels(lids) for lids in by_node.values()), default=1)
        budget = budget_for(depth, hop, rounds, interval)
        cid = uuid.uuid4().hex
        q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        with self._lock:
            self._waiting[cid] = q
        t0 = time.monotonic()
        parts: list[dict[str, Any]] = []
        try:
            for node, lids in by_node.items():
                send(node, {"type": "collect", "id": cid, "l": lids, "rounds": rounds, "interval": interval,
                            "budget": budget, "hop": hop})
            deadline = t0 + budget + hop                # their answers' way back
            while len(parts) < len(by_node):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    part = q.get(timeout=left)
                except queue.Empty:
                    break
                parts.append(part if isinstance(part, dict) else {})
        finally:
            with self._lock:
                del self._waiting[cid]
        merged = merge_parts(parts)
        seen = {rec.get("rank") for rec in merged["ranks"]} | set(merged["missing"])
        merged["missing"] += [r for r in ranks if r not in seen]
        merged["collect"] = {"nodes": len(by_node), "answered": len(parts), "budget": round(budget, 3),
                             "seconds": round(time.monotonic() - t0, 4)}
        return merged
