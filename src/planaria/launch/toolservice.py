"""The controller's answers to tools (and to the ranks' event API): ``notify`` (an event to relay),
``ctl`` (kill, signal, pause or resume ranks), ``publish`` and ``lookup`` (the job's key-value
store, a lookup waiting for its keys at most an hour; the clients wait longer in slices, see
``events.local.wait_for_keys``), ``subscribe`` (events and output, renewed
by the tool) and ``stdin`` (text for ranks' agents); docs/tools.md.

Each request is answered with a message of its own type, carrying its ``id`` when it had one,
except a rank's ``notify`` without an ``id`` (fire and forget) and a waiting lookup (answered
when its keys are there or its time is up). Runs in the controller's server thread.
"""
from __future__ import annotations

import os
import signal as _signal
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from planaria.events import codes as ev_codes
from planaria.events.ranges import Range
from planaria.launch import protocol
from planaria.launch.eventlog import EventLog
from planaria.launch.fanout import Fanout
from planaria.launch.ranktable import REACHABLE, RankTable, Row
from planaria.launch.relay import KVStore
from planaria.launch.transport import Dest, Routed, Transport
from planaria.util.procstat import parent_of, start_ticks

_CTL_SIGNALS = {"kill": _signal.SIGKILL, "pause": _signal.SIGSTOP, "resume": _signal.SIGCONT}

Fields = dict[str, Any] | None      # a reply's fields (None: no reply now)


def parse_signal(value: Any) -> int:
    """``TERM``, ``SIGTERM``, ``15`` -> 15; ValueError otherwise."""
    if isinstance(value, int):
        return value
    text = str(value or "").strip().upper()
    if text.isdigit():
        return int(text)
    name = text if text.startswith("SIG") else "SIG" + text
    sig = getattr(_signal, name, None)
    if not isinstance(sig, _signal.Signals):
        raise ValueError(f"unknown signal {value!r}")
    return int(sig)


def ctl_signal(action: str, value: Any) -> int:
    """The signal a ``ctl`` action sends (``value`` for ``signal``); ValueError for an unknown one."""
    if action == "signal":
        return parse_signal(value)
    if action in _CTL_SIGNALS:
        return _CTL_SIGNALS[action]
    raise ValueError(f"unknown action {action!r} (kill, signal, pause, resume)")


class ToolService:
    """Answers the tool requests (``protocol.TOOL_TYPES``)."""

    def __init__(self, table: RankTable, transport: Transport, fanout: Fanout, log: EventLog,
                 outbox: deque[tuple[Dest | None, dict[str, Any]]], secret: str) -> None:
        self.table = table
        self.transport = transport
        self.fanout = fanout
        self.log = log
        self.outbox = outbox                   # sent by the server loop after this turn's messages
        self._tok = secret
        self.kv = KVStore()
        self._handlers: dict[str, Callable[[Dest, dict[str, Any], float], Fields]] = {
            "notify": self._notify, "ctl": self._ctl, "publish": self._publish, "lookup": self._lookup,
            "subscribe": self._subscribe, "stdin": self._stdin}

    def handle(self, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """Answer one tool request from ``ident``."""
        mtype = msg["type"]
        fields = self._handlers[mtype](ident, msg, now)
        if fields is None:
            return
        reply: dict[str, Any] = {"type": mtype, **fields}
        if msg.get("id") is not None:
            reply["id"] = msg["id"]
        self.transport.reply(ident, reply)

    def answer_lookups(self) -> None:
        """Answer the waiting lookups whose keys are all there or whose time is up."""
        if self.kv.waiting():
            for ident, reply in self.kv.ready(time.time()):
                self.transport.reply(ident, reply)

    def _notify(self, ident: Dest, msg: dict[str, Any], now: float) -> Fields:
        """An event raised by a tool or a rank, relayed by range."""
        reply: dict[str, Any] = {}
        try:
            raw: Any = msg.get("code")          # checked by parse_code (a bad one raises)
            code = ev_codes.parse_code(raw)
            rng = Range.from_wire(msg.get("range"))
        except (ValueError, TypeError) as exc:
            reply["error"] = str(exc)
        else:
            src = msg.get("source") if isinstance(msg.get("source"), int) else None
            ev = self.fanout.emit(code, src, rng, dict(msg.get("info") or {}), msg.get("affected") or (),
                                  "rank" if isinstance(msg.get("rank"), int) else "tool", t=msg.get("t"),
                                  source_host=msg.get("source_host"), cache=bool(msg.get("cache", True)))
            reply["event"] = ev["id"]
            reply["agents"] = self.table.reachable_count()
        if msg.get("id") is None and isinstance(msg.get("rank"), int):
            return None                  # a rank's notify is fire-and-forget
        return reply

    def _ctl(self, ident: Dest, msg: dict[str, Any], now: float) -> Fields:
        """kill | signal | pause | resume the given ranks (all when none named)."""
        action = str(msg.get("action") or "")
        try:
            sig = ctl_signal(action, msg.get("signal"))
        except ValueError as exc:
            return {"error": str(exc)}
        want = msg.get("ranks")
        done: list[int] = []
        by_node: list[int] = []                    # signalled by their node agent
        errors: dict[str, str] = {}
        rows = {r: v for r, v in self.table.view().items() if want is None or r in want}
        for r in sorted(set(want or ()) - set(rows)):
            errors[str(r)] = "no such rank"
        for r, info in sorted(rows.items()):
            why = self._signal(r, info, sig, by_node)
            if why is not None:
                errors[str(r)] = why
                continue
            done.append(r)
            self.table.apply_ctl(r, action, sig, now)
        out = {"action": action, "signal": int(sig), "ranks": done, "errors": errors, "by_node_agent": by_node}
        self.log.write({"type": "ctl", "t": now, **out})
        return out

    def _signal(self, rank: int, info: Row, sig: int, by_node: list[int]) -> str | None:
        """Send ``sig`` to ``rank`` (through its node agent when it is behind one); why not, or None."""
        pid = info.get("pid")
        if info["state"] not in REACHABLE or not pid:
            return f"not running ({info['state']})"
        dest = self.transport.idents.get(rank)
        if isinstance(dest, Routed):           # its node agent signals it, on its host
            self.outbox.append((dest.node, {"type": "signal", "l": [dest.lid], "sig": int(sig)}))
            by_node.append(rank)
            return None
        if not _same_process(int(pid), info):
            # its pid names no process here that started when the rank did: the rank runs on
            # another host (without a node agent), or it ended and the pid went to another process
            return f"its process is not on this host or has ended (pid {pid} on {info.get('host')})"
        try:
            os.kill(int(pid), sig)
        except OSError as exc:
            return exc.strerror or str(exc)
        return None

    def _publish(self, ident: Dest, msg: dict[str, Any], now: float) -> Fields:
        stored, err = self.kv.publish(msg.get("data") or {}, bool(msg.get("replace")), msg.get("rank"))
        if stored:
            self.log.write({"type": "publish", "t": now, "rank": msg.get("rank"), "keys": stored})
        return {"stored": stored, "error": err}

    def _lookup(self, ident: Dest, msg: dict[str, Any], now: float) -> Fields:
        keys = [str(k) for k in msg.get("keys") or ()]
        found = self.kv.lookup(keys)
        if msg.get("wait") and len(found) < len(keys):
            timeout = min(max(float(msg.get("timeout") or 0.0), 0.0), 3600.0)
            self.kv.wait(ident, msg.get("id"), keys, now + timeout)
            return None
        return {"data": found, "missing": [k for k in keys if k not in found]}

    def _subscribe(self, ident: Dest, msg: dict[str, Any], now: float) -> Fields:
        self.fanout.subscribe(ident, msg, now)
        return {}

    def _stdin(self, ident: Dest, msg: dict[str, Any], now: float) -> Fields:
        """Text for the agents of the given ranks (all reachable when none named); those it reached."""
        payload = protocol.pack({"type": "stdin", "data": str(msg.get("data") or ""),
                                 "eof": bool(msg.get("eof"))}, self._tok)
        idents = self.transport.idents
        sent = [r for r in self.table.reachable(msg.get("ranks"))
                if r in idents and self.transport.send_packed(idents[r], payload)]
        return {"ranks": sent}


def _same_process(pid: int, info: Row) -> bool:
    """Whether ``pid`` on this host is still the rank's process: the start time its hello gave, or,
    for a program without the runtime, the rank recorder (``shim``) as its parent."""
    if isinstance(info.get("st"), int):
        return start_ticks(pid) == info["st"]
    return isinstance(info.get("shim"), int) and parent_of(pid) == info["shim"]
