"""Tool side of events and job control: one-shot requests and the attach stream (bounded)."""
from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import msgpack
import zmq

from planaria.events import curve
from planaria.events import codes as ev_codes
from planaria.launch.client import ToolError, _status, request
from planaria.launch.jobdir import JobDir

_ids = itertools.count(1)


def parse_ranks(text: str | None) -> list[int] | None:
    """``"0,2-4"`` -> [0, 2, 3, 4]; None/'' -> None (all ranks); ValueError on bad input."""
    if text is None or not text.strip() or text.strip() == "all":
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if lo > hi or lo < 0:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                r = int(part)
                if r < 0:
                    raise ValueError
                out.add(r)
        except ValueError:
            raise ValueError(f"bad rank list {text!r} (expected e.g. 0,2-4)") from None
    return sorted(out)


def parse_kv(items: list[str]) -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> {"a": 1, "b": "x"} (values read as JSON when they parse)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item or not item.split("=", 1)[0]:
            raise ValueError(f"bad key=value {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def call(jd: JobDir, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request with an id (so the controller answers every type), bounded by ``timeout``."""
    msg = dict(msg)
    msg.setdefault("id", f"tool-{next(_ids)}")
    return request(jd, msg, timeout)


def format_line(rec: dict[str, Any], timestamp: bool = False, xml: bool = False) -> str:
    """One forwarded output line: ``[R,stdout] text``, optionally timestamped, or as XML."""
    rank, chan, text = rec.get("rank"), rec.get("channel") or "stdout", rec.get("text") or ""
    stamp = time.strftime("%H:%M:%S", time.localtime(rec.get("t") or 0)) + \
        f".{int(((rec.get('t') or 0) % 1) * 1000):03d}"
    if xml:
        ts = f" timestamp={quoteattr(stamp)}" if timestamp else ""
        return f"<{chan} rank={quoteattr(str(rank))}{ts}>{escape(text)}</{chan}>"
    head = f"{stamp} " if timestamp else ""
    return f"{head}[{rank},{chan}] {text}"


def event_origin(ev: dict[str, Any]) -> str:
    """Who raised a relayed event, in the words of ``events.jsonl``'s ``origin``: ``rank N``,
    ``tool`` (``planaria event``) or ``rm`` (the controller: failures, job end)."""
    origin, src = ev.get("origin"), ev.get("source")
    if origin == "rank" or (origin is None and src is not None):
        return f"rank {src}"
    return str(origin or "rm")


def format_event(ev: dict[str, Any], xml: bool = False) -> str:
    """One relayed event as a line."""
    name = ev_codes.name_of(int(ev.get("code", 0)))
    src = ev.get("source")
    origin = event_origin(ev)
    if xml:
        return (f"<event id={quoteattr(str(ev.get('id')))} code={quoteattr(name)} "
                f"origin={quoteattr(origin)} source={quoteattr(str(src))} "
                f"affected={quoteattr(','.join(map(str, ev.get('affected') or [])))}>"
                f"{escape(json.dumps(ev.get('info') or {}, sort_keys=True, default=str))}</event>")
    aff = f" affected={ev.get('affected')}" if ev.get("affected") else ""
    return f"[event {ev.get('id')}] {name} from {origin}{aff} {json.dumps(ev.get('info') or {}, sort_keys=True, default=str)}"


class Attach:
    """A subscription to a running job's output and events, renewed every second.

    ``stream()`` yields ``io`` and ``event`` messages until the job ends (JOB_END), ``duration``
    s pass, or the controller stays silent for ``timeout`` s. ``push(data)`` sends stdin text
    to the chosen ranks.
    """

    def __init__(self, jd: JobDir, *, io: bool = True, events: bool = False, history: bool = True,
                 timeout: float = 10.0) -> None:
        try:
            self.uri, self.secret = jd.control_uri(), jd.secret()
        except OSError as exc:
            raise ToolError(f"job {jd.id} has no controller ({exc.strerror or exc})") from None
        status = _status(jd)
        if status not in (None, "running", "starting", "restarting"):
            raise ToolError(f"job {jd.id} is not running (status: {status})")
        self.jd, self.io, self.events, self.history, self.timeout = jd, io, events, history, timeout
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 200)
        curve.client(self._sock, self.secret, self.uri)
        self._sock.connect(self.uri)
        self._lock = threading.Lock()
        self.ended: str | None = None

    def _send(self, msg: dict[str, Any]) -> None:
        msg["tok"] = self.secret
        with self._lock:
            self._sock.send(msgpack.packb(msg, use_bin_type=True, default=str))

    def _subscribe(self, first: bool) -> None:
        self._send({"type": "subscribe", "io": self.io, "events": self.events,
                    "history": self.history and first})

    def push(self, data: str, ranks: list[int] | None, eof: bool = False) -> None:
        """Send ``data`` to the stdin of ``ranks`` (None: all)."""
        self._send({"type": "stdin", "data": data, "ranks": ranks, "eof": eof})

    def stream(self, duration: float | None = None,
               stop: threading.Event | None = None) -> Iterator[dict[str, Any]]:
        """Yield forwarded messages (bounded; see the class docstring); ``stop`` set by another
        thread ends the stream within 0.1 s."""
        self._subscribe(True)
        start = last_heard = last_sub = time.monotonic()
        while True:
            now = time.monotonic()
            if duration is not None and now - start >= duration:
                self.ended = "duration"
                return
            if stop is not None and stop.is_set():
                self.ended = "stopped"
                return
            if now - last_heard > self.timeout:
                self.ended = "silent"
                raise ToolError(f"the controller of job {self.jd.id} was silent for {self.timeout:g} s")
            if now - last_sub >= 1.0:
                self._subscribe(False)
                last_sub = now
            with self._lock:
                ready = self._sock.poll(100, zmq.POLLIN)
                raw = self._sock.recv(zmq.NOBLOCK) if ready else None
            if raw is None:
                continue
            try:
                msg = msgpack.unpackb(raw, raw=False, strict_map_key=False)
            except Exception:  # noqa: BLE001 - an undecodable message is skipped
                continue
            if not isinstance(msg, dict) or msg.get("tok") != self.secret:
                continue
            last_heard = time.monotonic()
            msg.pop("tok", None)
            mtype = msg.get("type")
            if mtype == "event":
                ev = msg.get("event") or {}
                if ev.get("code") == ev_codes.JOB_END:
                    self.ended = "job end"
                    if self.events:
                        yield msg
                    return
                if self.events:
                    yield msg
            elif mtype == "io":
                yield msg

    def close(self) -> None:
        """Cancel the subscription and close the socket."""
        try:
            self._send({"type": "subscribe", "cancel": True})
        except zmq.ZMQError:
            pass
        self._sock.close()
        self._ctx.term()


def stdin_pump(att: Attach, ranks: list[int] | None, read: Callable[[], str]) -> threading.Thread:
    """Forward lines from ``read`` (e.g. sys.stdin.readline) to ``ranks`` until EOF, then send EOF."""
    def run() -> None:
        while True:
            line = read()
            if not line:
                att.push("", ranks, eof=True)
                return
            att.push(line, ranks)
    t = threading.Thread(target=run, name="planaria-attach-stdin", daemon=True)
    t.start()
    return t
