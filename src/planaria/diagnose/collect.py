"""Online state collection through a k-ary tree of rank agents ([Gao 2024] §2.3, "online" half).

The collection root (the job controller) splits the ranks into ``k`` contiguous chunks and
asks the first rank of each chunk for the state of its whole chunk; that rank's agent does
the same with the rest of its chunk, and so on. Every hop has a budget: a node waits for its
children at most its own budget minus ``hop`` seconds, and a chunk whose head does not answer
in time is recorded as *missing* (empty), never waited for. A node answers with a *part*:
``{"stacks": [...], "ranks": [state records], "missing": [ranks]}`` whose stack ids index the
part's own stack table; parents merge parts and re-intern stacks.

Wire format: msgpack maps over ZeroMQ, each carrying the job secret ``tok``.
request ``{"type": "collect", "id", "ranks", "eps", "k", "hop", "budget", "rounds", "interval"}``
(``ranks[0]`` is the receiving agent, ``eps[i]`` the endpoint of ``ranks[i]`` or None),
reply ``{"type": "part", "id", "part"}``.
"""
from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Any

import msgpack
import zmq

from planaria.events import curve

DEFAULT_K = 8
DEFAULT_HOP = 1.0


def chunks(ranks: Sequence[int], k: int) -> list[list[int]]:
    """``ranks`` split into at most ``k`` contiguous, nearly equal, non-empty chunks."""
    n = len(ranks)
    if n == 0:
        return []
    k = max(1, min(k, n))
    base, extra = divmod(n, k)
    out, pos = [], 0
    for i in range(k):
        m = base + (1 if i < extra else 0)
        out.append(list(ranks[pos:pos + m]))
        pos += m
    return out


def depth(n: int, k: int) -> int:
    """Levels of agents below the root in the collection tree of ``n`` ranks (root excluded)."""
    k = max(k, 1)
    m, d = math.ceil(n / k), 0      # largest chunk a first-level agent heads
    while m > 0:
        d += 1
        m = math.ceil((m - 1) / k)
    return d


def budget_for(n: int, k: int, hop: float, rounds: int, interval: float) -> float:
    """Seconds the root allows: one ``hop`` per tree level, plus the stack-sampling time, plus one hop."""
    return hop * (depth(n, k) + 1) + max(rounds - 1, 0) * interval


def merge_parts(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One part from several: records and missing ranks concatenated, stack tables re-interned."""
    table: dict[Any, int] = {}
    stacks: list[Any] = []
    ranks: list[dict[str, Any]] = []
    missing: list[int] = []
    for part in parts:
        local = part.get("stacks") or []
        remap: list[int] = []
        for st in local:
            key = _freeze(st)
            idx = table.get(key)
            if idx is None:
                idx = table[key] = len(stacks)
                stacks.append(st)
            remap.append(idx)
        for rec in part.get("ranks") or []:
            for th in rec.get("threads") or []:
                if isinstance(th.get("stack"), int) and th["stack"] >= 0:
                    th["stack"] = remap[th["stack"]]
                if th.get("samples"):
                    th["samples"] = [remap[s] if s >= 0 else -1 for s in th["samples"]]
            ranks.append(rec)
        missing.extend(int(r) for r in part.get("missing") or [])
    return {"stacks": stacks, "ranks": ranks, "missing": missing}


def _freeze(stack: Any) -> Any:
    return tuple(tuple(f) for f in stack)


def ask_children(ctx: zmq.Context, ranks: Sequence[int], eps: Sequence[str | None], secret: str,
                 k: int, hop: float, budget: float, rounds: int, interval: float) -> list[dict[str, Any]]:
    """Ask the heads of ``k`` chunks of ``ranks`` for their chunks' parts; wait at most ``budget - hop`` s.

    Chunks whose head has no endpoint are re-headed by their next rank; a chunk that does not
    answer in time comes back as ``{"missing": chunk}``.
    """
    ep_of = dict(zip(ranks, eps, strict=False))    # a short eps list: the rest have no endpoint (re-headed)
    parts: list[dict[str, Any]] = []
    pending: dict[str, tuple[zmq.Socket, list[int]]] = {}
    child_budget = budget - hop
    for chunk in chunks(list(ranks), k):
        while chunk and not ep_of.get(chunk[0]):
            parts.append({"missing": [chunk[0]]})
            chunk = chunk[1:]
        if not chunk:
            continue
        if child_budget <= 0:
            parts.append({"missing": chunk})
            continue
        head_ep = str(ep_of[chunk[0]])     # not None: heads without an endpoint were dropped above
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        curve.client(sock, secret, head_ep)
        sock.connect(head_ep)
        rid = uuid.uuid4().hex
        msg = {"type": "collect", "tok": secret, "id": rid, "ranks": chunk,
               "eps": [ep_of.get(r) for r in chunk], "k": k, "hop": hop, "budget": child_budget,
               "rounds": rounds, "interval": interval}
        sock.send(msgpack.packb(msg, use_bin_type=True))
        pending[rid] = (sock, chunk)
    deadline = time.monotonic() + max(child_budget, 0.0)
    poller = zmq.Poller()
    for sock, _ in pending.values():
        poller.register(sock, zmq.POLLIN)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for sock, _ev in poller.poll(max(1, int(left * 1000))):
            try:
                reply = msgpack.unpackb(sock.recv(zmq.NOBLOCK), raw=False, strict_map_key=False)
            except (zmq.Again, ValueError, msgpack.UnpackException):
                continue
            if not isinstance(reply, dict) or reply.get("tok") != secret or reply.get("id") not in pending:
                continue
            s, _chunk = pending.pop(reply["id"])
            poller.unregister(s)
            s.close(0)
            parts.append(reply.get("part") or {})
    for sock, chunk in pending.values():
        sock.close(0)
        parts.append({"missing": chunk})
    return parts


def collect(eps: dict[int, str | None], secret: str, k: int = DEFAULT_K, hop: float = DEFAULT_HOP,
            rounds: int = 1, interval: float = 0.2, ctx: zmq.Context | None = None) -> dict[str, Any]:
    """Root of the tree: the merged part of every rank in ``eps`` (rank -> agent endpoint or None)."""
    ranks = sorted(eps)
    budget = budget_for(len(ranks), k, hop, rounds, interval) + hop
    own = ctx is None
    ctx = ctx or zmq.Context()
    try:
        t0 = time.monotonic()
        parts = ask_children(ctx, ranks, [eps[r] for r in ranks], secret, k, hop, budget,
                             rounds, interval)
        merged = merge_parts(parts)
        merged["collect"] = {"k": k, "hop": hop, "rounds": rounds, "interval": interval,
                             "budget": round(budget, 3), "seconds": round(time.monotonic() - t0, 4)}
        return merged
    finally:
        if own:
            ctx.term()
