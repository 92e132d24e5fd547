"""What the controller's TCP socket refused before any message: connections whose CurveZMQ
handshake failed (no key, a wrong key) or that closed before completing one (not a ZeroMQ
peer: garbage, a frame announcing gigabytes), read from the socket's monitor events.

A forged client that keeps reconnecting would fill the job record, so each reason is recorded
the first time and then at most once per ``SUMMARY_EVERY`` seconds with the count since.
libzmq's handshake-succeeded event carries no descriptor; the connections still in their
handshake are taken to finish it in the order they were accepted (which only matters for which
descriptor a log line counts, not for what is refused).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import zmq

from planaria.events.curve import handshake_failure

SUMMARY_EVERY = 10.0
#: the monitor events the guard reads
EVENTS = (zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
          | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
          | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
NOT_ZMTP = "closed before completing a handshake (not a ZeroMQ peer, or an invalid greeting or frame)"


class HandshakeGuard:
    """Counts refused TCP connections by reason and says which to record."""

    def __init__(self, peer: str) -> None:
        self.peer = peer                                  # how records name the socket
        self.refused = 0
        self._pending: OrderedDict[int, float] = OrderedDict()     # fd -> accept time, handshake not done
        self._counts: dict[str, int] = {}                # reason -> refusals not yet recorded
        self._last: dict[str, float] = {}                # reason -> when it was last recorded
        self._out: list[dict[str, Any]] = []

    def feed(self, event: dict[str, Any], now: float | None = None) -> None:
        """One monitor event (``zmq.utils.monitor.parse_monitor_message``)."""
        now = time.time() if now is None else now
        ev, value = int(event.get("event") or 0), event.get("value")
        if ev == zmq.EVENT_ACCEPTED:
            self._pending[int(value or -1)] = now
            return
        if ev == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            if self._pending:
                self._pending.popitem(last=False)
            return
        why = handshake_failure(event)
        if why is not None:
            if self._pending:
                self._pending.popitem(last=False)
            self._count(why, now)
        elif ev == zmq.EVENT_DISCONNECTED and self._pending.pop(int(value or -1), None) is not None:
            self._count(NOT_ZMTP, now)

    def _count(self, why: str, now: float) -> None:
        self.refused += 1
        if why not in self._last:                      # the first of its kind: at once
            self._last[why] = now
            self._out.append({"type": "refused", "t": now, "peer": self.peer, "why": why})
        else:
            self._counts[why] = self._counts.get(why, 0) + 1

    def due(self, now: float | None = None) -> list[dict[str, Any]]:
        """The records to write now: first refusals, and per reason the count of later ones at
        most every ``SUMMARY_EVERY`` seconds."""
        now = time.time() if now is None else now
        out, self._out = self._out, []
        for why, n in list(self._counts.items()):
            if n and now - self._last[why] >= SUMMARY_EVERY:
                out.append({"type": "refused", "t": now, "peer": self.peer, "why": why, "count": n,
                            "since": self._last[why]})
                self._last[why] = now
                self._counts[why] = 0
        return out

    def flush(self, now: float | None = None) -> list[dict[str, Any]]:
        """Everything not yet recorded (at the controller's stop)."""
        now = time.time() if now is None else now
        out, self._out = self._out, []
        for why, n in self._counts.items():
            if n:
                out.append({"type": "refused", "t": now, "peer": self.peer, "why": why, "count": n,
                            "since": self._last[why]})
        self._counts.clear()
        return out
