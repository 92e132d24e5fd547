"""What the controller passes on: an event to the ranks in its range (``planaria.events.ranges``)
and to the tools subscribed to it, a localization service's knock to the ranks it wrote to, the
ranks' output lines to attached tools (with a bounded history for tools that attach late).

An event is packed and framed once for all its targets; ranks behind one node agent get one
``to`` message for that node. Events are kept in the job record in batches (``EventLog.batch``).
Runs in the controller's server thread (``keep_io`` in any).
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Any

from planaria.events import codes as ev_codes
from planaria.events.channel import frame
from planaria.events.ranges import PROC_LOCAL, Range, targets
from planaria.launch import protocol
from planaria.launch.channels import Peer
from planaria.launch.eventlog import EventLog
from planaria.launch.ranktable import RankTable
from planaria.launch.relay import Subscriptions
from planaria.launch.transport import Dest, Routed, Transport

IO_HISTORY = 500                          # output lines kept for tools that attach late
EARLY_EVENTS = 256                        # events kept for ranks whose agent has not said hello yet


class Fanout:
    """Events, knocks and output lines on their way to ranks and tools."""

    def __init__(self, table: RankTable, transport: Transport, log: EventLog, secret: str, host: str) -> None:
        self.table = table
        self.transport = transport
        self.log = log
        self._tok = secret
        self.host = host                       # the source host of the controller's own events
        self.subscriptions = Subscriptions()
        self.io_history: list[dict[str, Any]] = []
        self.unknocked: set[int] = set()       # knocked before their agent said hello
        self.relayed = 0
        self._eids = itertools.count(1)
        # An event raised while some agents are still connecting reaches them on their hello:
        # (range, source, source host, ranks known when it was raised, packed message)
        self.early: deque[tuple[Range, int | None, str | None, frozenset[int], bytes]] = deque(maxlen=EARLY_EVENTS)
        self.greeted: set[int] = set()

    # --- events --------------------------------------------------------
    def emit(self, code: int, source: int | None, rng: Range, info: dict[str, Any], affected: Any,
             origin: str, t: float | None = None, source_host: str | None = None,
             cache: bool = True) -> dict[str, Any]:
        """Forward one event to the ranks in range (and to subscribed tools); log it."""
        now = time.time()
        live, live_src, source_host = self.table.in_reach(source, source_host, self.transport.idents)
        tg = targets(rng, source, live_src, source_host if source is not None else self.host) & set(live)
        ev: dict[str, Any] = {"code": int(code), "source": source, "range": rng.to_wire(), "info": info,
              "affected": sorted(int(r) for r in affected or ()), "id": next(self._eids),
              "t": now if t is None else t, "source_host": source_host, "origin": origin,
              "cache": cache}
        packed = protocol.pack({"type": "event", "event": ev}, self._tok)
        self._to_ranks(sorted(tg), packed)
        if rng.kind != PROC_LOCAL:
            self.early.append((rng, source, source_host, frozenset(self.transport.idents), packed))
        if self.subscriptions:
            self.to_subscribers({"type": "event", "event": ev}, "events")
        self.relayed += 1
        # written in batches (SWEEP_INTERVAL, RECORD_BATCH, before any other record, at stop):
        # a file append per event would take the CPU the receiving ranks need right now
        self.log.batch({"type": "event", "t": now, "id": ev["id"], "code": ev["code"],
                        "name": ev_codes.name_of(ev["code"]), "source": source,
                        "origin": origin, "range": rng.name, "targets": sorted(tg),
                        "affected": ev["affected"], "info": info})
        return ev

    def _to_ranks(self, ranks: list[int], payload: bytes) -> None:
        """``payload`` to each of ``ranks``: framed once; one message per node agent, not per rank."""
        framed = frame(payload)
        idents = self.transport.idents
        behind: dict[bytes | Peer, list[int]] = {}
        for r in ranks:
            dest = idents[r]
            if isinstance(dest, Routed):
                behind.setdefault(dest.node, []).append(dest.lid)
            else:
                self.transport.send_packed(dest, payload, framed)
        for node, lids in behind.items():
            self.transport.send_packed(node, self.transport.to_node(lids, payload))

    # --- tools' subscriptions ------------------------------------------
    def to_subscribers(self, msg: dict[str, Any], what: str) -> None:
        """``msg`` to the tools subscribed to ``what`` (``events`` or ``io``)."""
        subs = self.subscriptions.wanted(msg, what)
        if not subs:
            return
        payload = protocol.pack(msg, self._tok)
        for ident in subs:
            self.transport.send_packed(ident, payload)

    def subscribe(self, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """A tool's ``subscribe``: cancelled, renewed, or new (then sent the output history it asks for)."""
        if msg.get("cancel"):
            self.subscriptions.cancel(ident)
            return
        new = self.subscriptions.renew(ident, msg, now)
        if new and msg.get("history") and msg.get("io"):
            for rec in list(self.io_history):
                self.transport.reply(ident, dict(rec))

    def expire(self) -> None:
        """Forget tools whose subscription was not renewed."""
        if self.subscriptions:
            self.subscriptions.expire(time.time())

    def keep_io(self, rec: dict[str, Any]) -> bool:
        """Keep an output line in the bounded history (any thread); True when tools want it now."""
        self.io_history.append(rec)
        if len(self.io_history) > IO_HISTORY:
            del self.io_history[:len(self.io_history) - IO_HISTORY]
        return bool(self.subscriptions)

    # --- knocks --------------------------------------------------------
    def knock(self, dest: Dest) -> None:
        """Wake a rank's localization service: another rank wrote to it on the service communicator."""
        self.transport.send_packed(dest, protocol.pack({"type": "knock"}, self._tok))

    def on_wake_spares(self, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """A working rank started a recovery (or released the spares, or sent them its footprint:
        ``warm``): wake every spare's wait."""
        packed = protocol.pack({"type": "wake", "warm": True} if msg.get("warm") else {"type": "wake"}, self._tok)
        for r in self.table.spares():
            dest = self.transport.idents.get(r)
            if dest is not None:
                self.transport.send_packed(dest, packed)

    def on_knock(self, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """A rank's localization service wrote to these ranks: wake theirs (``gone``: those ended)."""
        ended = []
        for r in msg.get("ranks") or ():
            if not isinstance(r, int):
                continue
            if self.table.state(r) in ("finished", "failed", "lost"):
                ended.append(r)                  # nobody there to wake: the sender analyses itself
                continue
            dest = self.transport.idents.get(r)
            if dest is None:
                self.unknocked.add(r)            # kept until the agent says hello, never dropped
            else:
                self.knock(dest)
        if ended:
            self.transport.reply(ident, {"type": "gone", "ranks": ended})

    def arrived(self, rank: int, dest: Dest, host: str | None = None) -> None:
        """Rank ``rank``'s agent spoke from ``dest``: a knock, and the events in its range raised
        before its first word, are delivered now (in the order they were raised)."""
        if rank in self.unknocked:
            self.unknocked.discard(rank)
            self.knock(dest)
        if rank in self.greeted:
            return
        self.greeted.add(rank)
        for rng, source, source_host, known, packed in list(self.early):
            if rank in known:
                continue
            hosts = {rank: host} if source is None or source == rank else {rank: host, source: source_host}
            if rank in targets(rng, source, hosts, source_host if source is not None else self.host):
                self._to_ranks([rank], packed)
