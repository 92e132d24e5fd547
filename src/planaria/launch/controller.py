"""The job controller: keeps the rank table, logs rank events, relays events, serves tools.

It is made of parts with one job each: the rank table and its rules (``ranktable``), the sockets
and the way to each rank (``transport``: agent channels and the ZeroMQ ROUTER), the fan-out of
events, knocks and output (``fanout``), the answers to tools (``toolservice``) and the writes to
the job record (``eventlog``). The controller joins them: one server thread reads every message
and hands it on through one dispatch table by its type (``planaria.launch.protocol`` names the
messages and their fields), answers ``ps`` and ``diagnose`` itself, and sends what other threads
queue. It blocks without a timeout unless a merge window or a waiting lookup is due; a ticker
thread wakes it every SWEEP_INTERVAL for the pid/heartbeat sweep.
"""
from __future__ import annotations

import _socket
import os
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import zmq

from planaria.events import codes as ev_codes
from planaria.events.ranges import SESSION, Range
from planaria.launch import protocol
from planaria.launch.channels import ChannelServer, Peer
from planaria.launch.eventlog import MAX_KEPT_RECORDS, RECORD_BATCH, EventLog
from planaria.launch.fanout import IO_HISTORY, Fanout
from planaria.launch.fdlimit import raise_open_files
from planaria.launch.jobdir import JobDir
from planaria.launch.nodecollect import NodeCollections
from planaria.launch.ranktable import ACTIVE, LOST_REASON, PLAIN_AFTER, REACHABLE, UNSETTLED_REASON, RankTable
from planaria.launch.ranktable import summary as _summary
from planaria.launch.relay import SUBSCRIPTION_TTL, FaultMerger, KVStore
from planaria.launch.tcpguard import HandshakeGuard
from planaria.launch.toolservice import ToolService
from planaria.launch.toolservice import parse_signal as _parse_signal
from planaria.launch.transport import MAX_REFUSED_LOGGED, Dest, Routed, Transport, default_address
from planaria.launch.transport import label as _label

HEARTBEAT_SILENCE = 3.0                   # seconds without a heartbeat before a rank counts as lost
SWEEP_INTERVAL = 0.5                      # seconds between pid/heartbeat sweeps (and event-record writes)

# kept importable from here, where they were defined before the parts had modules of their own
__all__ = ["ACTIVE", "Controller", "Dest", "HEARTBEAT_SILENCE", "IO_HISTORY", "LOST_REASON", "MAX_KEPT_RECORDS",
           "MAX_REFUSED_LOGGED", "PLAIN_AFTER", "REACHABLE", "RECORD_BATCH", "Routed", "SUBSCRIPTION_TTL",
           "SWEEP_INTERVAL", "UNSETTLED_REASON", "_label", "_parse_signal", "_summary", "default_address"]


class Controller:
    """Control-plane server of one job, running in a background thread."""

    def __init__(self, jobdir: JobDir, address: str | None = None, t0: float | None = None,
                 pid_check: bool = True, listener: _socket.socket | None = None) -> None:
        self.jobdir = jobdir
        self.secret = jobdir.secret().encode("utf-8")
        self._tok = self.secret.decode("utf-8")
        self.requested = address or default_address(jobdir)
        self.t0 = time.time() if t0 is None else t0
        self.host = socket.gethostname()
        self.uri: str | None = None
        self.abort_request: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._outbox: deque[tuple[Dest | None, dict[str, Any]]] = deque()   # from other threads
        self._wake_r, self._wake_w = os.pipe()            # wakes the server thread (outbox, ticker, stop)
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()
        self._wake_closed = False
        self._sweep_due = False                           # set by the ticker every SWEEP_INTERVAL
        self._diagnosing = threading.Lock()
        self.gathering = NodeCollections()                  # collections through node agents
        self._errors: list[float] = []                    # when the server loop caught errors (last second)
        self._errors_seen: set[str] = set()
        self._incident_feed: deque[tuple[dict[str, Any], Any]] = deque()   # for the launcher's console
        self._make_parts(pid_check, listener)
        # message type -> handler; any other type is a rank's report (``_from_rank``)
        self._dispatch = {"ps": self._on_ps, "diagnose": self._on_diagnose, "knock": self.fanout.on_knock,
                          "wake-spares": self.fanout.on_wake_spares, "part": self._on_part,
                          **{t: self.tools.handle for t in protocol.TOOL_TYPES}}

    def _make_parts(self, pid_check: bool, listener: _socket.socket | None) -> None:
        """The parts, and their state under the names the launcher and the tests use (``listener``:
        the agent channel's, bound before, see ``planaria.launch.address``)."""
        self.log = EventLog(self.jobdir)
        self.rank_table = RankTable(self.host, pid_check)
        self.transport = Transport(self.requested, self._tok, self.log, listener)
        self.fanout = Fanout(self.rank_table, self.transport, self.log, self._tok, self.host)
        self.tools = ToolService(self.rank_table, self.transport, self.fanout, self.log, self._outbox, self._tok)
        self.ranks: dict[int, dict[str, Any]] = self.rank_table.ranks
        self.nodes: dict[str, dict[str, Any]] = self.rank_table.nodes    # node agents that said hello
        self._lock: threading.Lock = self.rank_table.lock
        self.merger: FaultMerger = self.rank_table.merger
        self.ctl_killed: set[int] = self.rank_table.ctl_killed   # recorder-only ranks killed by planaria ctl
        self.ctl_paused: set[int] = self.rank_table.ctl_paused   # ... and paused by it
        self.idents: dict[int, Dest] = self.transport.idents     # rank -> where its agent is reached
        self._unknocked: set[int] = self.fanout.unknocked        # knocked before their agent said hello
        self.kv: KVStore = self.tools.kv

    # --- the parts' settings and counters ------------------------------
    @property
    def fates_dir(self) -> Path | None:
        """Where rankfate records how each rank's process ended (None: no recorders)."""
        return self.rank_table.fates_dir

    @fates_dir.setter
    def fates_dir(self, path: Path | None) -> None:
        self.rank_table.fates_dir = path

    @property
    def pid_check(self) -> bool:
        """Whether ranks' pids on this host are looked at (sweep, ``holds_up``)."""
        return self.rank_table.pid_check

    @pid_check.setter
    def pid_check(self, on: bool) -> None:
        self.rank_table.pid_check = on

    @property
    def open_files(self) -> tuple[int, int]:
        """The open-file limit before and after start."""
        return self.transport.open_files

    @property
    def channels(self) -> ChannelServer | None:
        """The agent channels' server (None before start, or when agents use the ROUTER)."""
        return self.transport.channels

    @property
    def guard(self) -> HandshakeGuard | None:
        """Refused TCP connections (CurveZMQ), on a TCP address."""
        return self.transport.guard

    @property
    def refused(self) -> int:
        """Messages refused (bad token, undecodable, oversized frame)."""
        return self.transport.refused

    @property
    def relayed(self) -> int:
        """Events relayed so far."""
        return self.fanout.relayed

    @property
    def subscribers(self) -> dict[Any, dict[str, Any]]:
        """Tools subscribed to events or output."""
        return self.fanout.subscriptions.subs

    # --- lifecycle -----------------------------------------------------
    def start(self, timeout: float = 10.0, open_files: tuple[int, int] | None = None) -> str:
        """Bind the socket in the server thread, write ``control.uri``; return the bound URI.

        ``open_files``: the open-file limit before and after the launcher raised it (raised here
        when not given: one descriptor per agent connection)."""
        self.transport.open_files = open_files or raise_open_files()
        self._thread = threading.Thread(target=self._serve, name="planaria-controller", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("controller did not start")
        if self._error is not None:
            raise RuntimeError(f"controller cannot bind {self.requested}: {self._error}")
        assert self.uri is not None
        self.jobdir.write_control_uri(self.uri)
        return self.uri

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server thread and close the socket (bounded)."""
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)
            if not self._thread.is_alive():
                with self._wake_lock:         # no later _wake() writes into a reused descriptor
                    if not self._wake_closed:     # (a second stop closes nothing again)
                        self._wake_closed = True
                        for fd in (self._wake_r, self._wake_w):
                            os.close(fd)
        if self.uri and self.uri.startswith("ipc://"):
            path = Path(self.uri[len("ipc://"):])
            try:
                path.unlink()
                if path.parent.name.startswith("planaria-") and path.parent != self.jobdir.path:
                    path.parent.rmdir()
            except OSError:
                pass

    # --- table access (any thread) ---------------------------------------
    def table(self) -> dict[int, dict[str, Any]]:
        """A copy of the rank table."""
        return self.rank_table.copy()

    def plain_ranks(self) -> dict[int, dict[str, Any]]:
        """Ranks the rank recorder started that have not said hello (``RankTable.plain_rows``)."""
        return self.rank_table.plain_rows()

    def view(self) -> dict[int, dict[str, Any]]:
        """Every rank a tool can see: the rank table, plus the ranks of a program without the runtime."""
        return self.rank_table.view()

    def _ps_reply(self, only: Any = None, summary: bool = False) -> bytes:
        """``ps``'s reply, packed (``RankTable.ps_reply``): rows, or with ``summary`` the counts."""
        return self.rank_table.ps_reply(only, summary, self.t0, self._tok)

    def note_crash(self, rank: int, site: str | None, error: str) -> None:
        """What a rank's own traceback (uncaught exception) or fatal-error trace said: where and what."""
        self.rank_table.note_crash(rank, site, error)

    def holds_up(self, ranks: list[int]) -> bool:
        """True when peers waiting for ``ranks`` will get no error: each has finished normally, or
        runs as far as the launcher can tell (active in the table, not failed, lost or paused by a
        tool, and, on this host, its process exists). A rank that its peers cannot reach while it
        still runs (stopped, cut off), or that has finished, hangs the job."""
        return self.rank_table.holds_up(ranks)

    def finished_note(self, ranks: list[int]) -> str | None:
        """What the launcher knows and the ranks may not: those of ``ranks`` that have finished, and
        where (``rank 3 has finished (exit 0 at a.py:9 in <module>)``); None when none has."""
        return self.rank_table.finished_note(ranks)

    def pids(self) -> list[int]:
        """Pids of all ranks that said hello."""
        return self.rank_table.pids()

    def processes(self) -> list[tuple[int, int]]:
        """(pid, start ticks) of all ranks that said hello: a process, not just a pid number."""
        return self.rank_table.processes()

    def failures_known(self) -> bool:
        """Whether the controller knows of any failed or lost rank of this job."""
        return self.rank_table.failures_known()

    def _update_table(self, msg: dict[str, Any], now: float) -> None:
        """A rank's message applied to its row; a ``recovered`` record kept for the job record."""
        rec = self.rank_table.update(msg, now)
        if rec is not None:
            self.log.add(rec)

    def sweep(self, final: bool = False, final_ok: bool = False,
              fates: dict[int, dict[str, Any]] | None = None) -> None:
        """Mark active ranks lost when their pid is gone or their heartbeat has been silent for
        HEARTBEAT_SILENCE s; with ``final`` (mpiexec has exited) settle every active rank, by
        ``fates`` (``planaria.launch.rankfate`` records) where they tell (``RankTable.sweep``)."""
        lost = self.rank_table.sweep(time.time(), HEARTBEAT_SILENCE, final, final_ok, fates, self._routed)
        if not lost:
            return
        if threading.current_thread() is self._thread:
            self.log.extend(lost)
            self.log.flush()
        else:
            self.jobdir.append_events(lost)
            self._wake()                  # the merge window starts now: let the server thread time it

    def _routed(self, rank: int) -> bool:
        """Whether ``rank`` is reached through a node agent (its pid is looked at there)."""
        return isinstance(self.idents.get(rank), Routed)

    # --- server loop ----------------------------------------------------
    def _serve(self) -> None:
        """The server thread: bind, then read and answer until stopped; close."""
        transport = self.transport
        transport.prepare()
        try:
            self.uri = transport.bind()
        except zmq.ZMQError as exc:
            self._error = exc
            self._ready.set()
            transport.close()
            return
        self._ready.set()
        poller = zmq.Poller()
        transport.watch(poller, self._wake_r)
        ticker = threading.Thread(target=self._ticker, name="planaria-controller-ticker", daemon=True)
        ticker.start()
        try:
            while not self._stop.is_set():
                try:
                    self._turn(poller)
                except Exception as exc:  # noqa: BLE001 - the controller outlives any one message or write
                    self._survived(exc)
            self._tick(force=True)
            self._drain_outbox()
        finally:
            self.log.extend(transport.refusals_due(final=True))
            self.log.flush()
            transport.close(200)   # let the last messages (job end to attached tools) leave

    def _turn(self, poller: zmq.Poller) -> None:
        """One turn of the server loop: what is readable, then what is due."""
        # no timeout unless a merge window or a lookup is due: the ticker brings the sweep
        for what, _ in poller.poll(self._poll_ms()):
            if not self.transport.read(what, self._handle):
                try:
                    os.read(self._wake_r, 4096)
                except OSError:
                    pass
        if self._outbox:
            self._drain_outbox()
        self._tick()
        if self._sweep_due:
            self._sweep_due = False
            self.transport.resume_accepting()
            self.sweep()
            self.fanout.expire()
            self.log.extend(self.transport.refusals_due())
            self.log.flush()

    def _survived(self, exc: Exception) -> None:
        """An error the server loop caught: kept in the job record (once per kind and message),
        then the loop goes on; a burst of them is slowed down rather than spun through."""
        key = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        self._errors = [t for t in self._errors if now - t < 1.0] + [now]
        if key not in self._errors_seen and len(self._errors_seen) < 100:
            self._errors_seen.add(key)
            self.log.add({"type": "controller-error", "error": key, "t": time.time()})
        if len(self._errors) > 50:
            time.sleep(0.01)

    def _ticker(self) -> None:
        """Wake the server thread every SWEEP_INTERVAL for the pid/heartbeat sweep."""
        while not self._stop.wait(SWEEP_INTERVAL):
            self._sweep_due = True
            self._wake()

    def _wake(self) -> None:
        """Wake the server thread (any thread)."""
        with self._wake_lock:
            if self._wake_closed:
                return
            try:
                os.write(self._wake_w, b"w")
            except OSError:      # pipe full: the server thread is due to drain it
                pass

    def _poll_ms(self) -> int | None:
        """How long the loop may block: until a merge window or a waiting lookup is due (None: no bound)."""
        due = [d for d in (self.merger.next_due(), self.kv.next_deadline()) if d is not None]
        if not due:
            return None
        return max(0, int((min(due) - time.time()) * 1000) + 1)

    def _drain_outbox(self) -> None:
        """Send what other threads queued: replies, output lines for tools, the controller's events."""
        while self._outbox:
            dest, reply = self._outbox.popleft()
            if dest is not None:
                self.transport.reply(dest, reply)
            elif reply.get("type") == "io":
                self.fanout.to_subscribers(reply, "io")
            elif reply.get("type") == "emit":
                self.fanout.emit(reply["code"], None, Range(reply.get("range", SESSION)),
                                 reply.get("info") or {}, reply.get("affected") or (), "rm")

    def _tick(self, force: bool = False) -> None:
        """Emit a merged failure event whose window has passed; answer due lookups."""
        if self.merger.next_due() is not None or force:
            merged = self.rank_table.take_merged(time.time(), force=force)
            if merged is not None:
                self.fanout.emit(merged["code"], None, Range(), merged["info"], merged["affected"], "rm")
        self.tools.answer_lookups()

    # --- from other threads --------------------------------------------
    def notify(self, code: int, info: dict[str, Any] | None = None, affected: Any = (),
               range_kind: int = SESSION) -> None:
        """Raise an event from the controller itself (e.g. job end); sent by the server thread."""
        self._outbox.append((None, {"type": "emit", "code": int(code), "info": info or {},
                                    "affected": list(affected), "range": range_kind}))
        self._wake()

    def take_incidents(self) -> list[tuple[dict[str, Any], Any]]:
        """The incidents reported since the last call, with the rank that found each (any thread)."""
        out = []
        while self._incident_feed:
            out.append(self._incident_feed.popleft())
        return out

    def io(self, rank: int, channel: str, text: str) -> None:
        """One line of a rank's output, for attached tools (kept in a bounded history)."""
        rec = {"type": "io", "rank": rank, "channel": channel, "text": text, "t": time.time()}
        if self.fanout.keep_io(rec):
            self._outbox.append((None, rec))
            self._wake()

    # --- messages (server thread) --------------------------------------
    def _handle(self, ident: Dest, payload: bytes) -> bool:
        """Act on one message from a peer (``_dispatch`` by its type; a rank's report otherwise);
        False when it was refused."""
        msg, why = protocol.unpack(payload, self.secret)
        if why is not None:
            self.transport.refuse(ident, why, msg.get("type") if msg is not None else None)
            return False
        assert msg is not None
        mtype: Any = msg.get("type")
        now = time.time()
        if mtype in protocol.NODE_TYPES:
            if not isinstance(ident, Routed):     # (a rank cannot speak for a node)
                self._from_node(ident, msg, now)
            return True
        self._dispatch.get(mtype, self._from_rank)(ident, msg, now)
        return True

    def _on_ps(self, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """``ps``: the rank table's rows (or their summary) to the asking tool."""
        self.transport.send_packed(ident, self._ps_reply(msg.get("ranks"), bool(msg.get("summary"))))

    def _on_diagnose(self, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """``diagnose``: a collection in a thread of its own, answered through the outbox."""
        threading.Thread(target=self._diagnose_for, args=(ident, msg), daemon=True,
                         name="planaria-diagnose").start()

    def _on_part(self, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """A rank's state for a collection over its agent channel (``diagnose``): to the collection."""
        self.gathering.deliver(msg)

    def _from_rank(self, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """A rank's report: the rank table, failure signals, incidents, an abort request; recorded
        (but heartbeats) and answered (``ack`` for an ``id``, ``hbok`` for a heartbeat)."""
        mtype: Any = msg.get("type")
        if mtype in ("hello", "hb") and isinstance(msg.get("rank"), int):
            self.idents[msg["rank"]] = ident
            # a knock or events that came before this agent: delivered now
            self.fanout.arrived(msg["rank"], ident, msg.get("host"))
        self._update_table(msg, now)
        self._note_report(msg, now)
        if mtype != "hb":
            rec = dict(msg)
            rec.setdefault("t", now)
            rec["t_recv"] = now
            self.log.write(rec)
        if "id" in msg:
            ack: dict[str, Any] = {"type": "ack", "id": msg["id"]}
            if mtype == "bye":           # the rank bounds its MPI_Finalize tighter after a failure
                ack["failures"] = self.failures_known()
            self.transport.reply(ident, ack)
        elif mtype == "hb":
            self.transport.reply(ident, {"type": "hbok"})

    def _note_report(self, msg: dict[str, Any], now: float) -> None:
        """What a rank's report tells beyond its row: a failure signal, an incident, an abort request."""
        mtype: Any = msg.get("type")
        if mtype == "fail" and isinstance(msg.get("rank"), int):
            self.rank_table.signal_fail(msg["rank"], str(msg.get("reason") or ""), now)
        elif mtype == "failed-seen":
            self.rank_table.signal_seen(msg.get("rank"), msg.get("ranks"), now)
        elif mtype == "incident" and isinstance(msg.get("incident"), dict):
            self._announce_incident(msg["incident"], msg.get("by"))
        elif mtype == "abort" and self.abort_request is None:
            self.abort_request = {"rank": msg.get("rank"), "reason": str(msg.get("reason") or "abort"),
                                  "event": msg.get("event"), "t": now}

    def _announce_incident(self, inc: dict[str, Any], by: Any) -> None:
        """A localized fault (one root cause from a responsible rank) as an event to the ranks and
        attached tools: its kind, verdict and blamed ranks, without the evidence records."""
        info = {k: inc.get(k) for k in ("kind", "verdict", "host", "status", "first", "last", "count")}
        info["by"] = by
        ranks = [r for r in inc.get("ranks") or () if isinstance(r, int)]
        self.notify(ev_codes.FAULT_LOCALIZED, info, affected=ranks)
        self._incident_feed.append((dict(info, ranks=ranks), inc.get("responsible", by)))

    def _from_node(self, ident: bytes | Peer, msg: dict[str, Any], now: float) -> None:
        """A node agent's message: a rank's message forwarded, the node's heartbeat summary, a rank
        whose connection closed there, or the node's hello."""
        mtype = msg["type"]
        if mtype == "fwd":
            inner, lid = msg.get("p"), msg.get("l")
            if isinstance(inner, bytes) and isinstance(lid, int):
                self._handle(Routed(ident, lid), inner)
        elif mtype == "nhb":            # ranks and their steps, two columns (16 k rows a second per 8 k ranks)
            if isinstance(ident, bytes):            # over ZeroMQ the node agent has no other sign of us
                self.transport.reply(ident, {"type": "hbok"})
            self.log.extend(self.rank_table.node_beats(msg.get("ranks"), msg.get("steps"), now))
        elif mtype == "gone":
            if self.rank_table.mark_gone(msg.get("rank"), msg.get("alive")):
                self._sweep_due = True       # looked at on its node: the next sweep settles it
        elif mtype == "npart":                  # its ranks' parts of a collection, merged
            self.gathering.deliver(msg)
        elif mtype == "node-hello":             # a node agent (maybe through its tree parent, ``ident``)
            name = str(msg.get("node") or "?")
            self.rank_table.node_hello(name, msg.get("pid"), now)
            self.log.write({"type": "node-hello", "t": now, "node": name, "pid": msg.get("pid")})

    # --- global diagnosis ------------------------------------------------
    def _diagnose_for(self, ident: Dest, msg: dict[str, Any]) -> None:
        """Run a tool's ``diagnose`` request (its own thread); the answer goes out through the outbox."""
        try:
            out = self.diagnose(k=int(msg.get("k") or 8), hop=float(msg.get("hop") or 1.0),
                                rounds=int(msg.get("rounds") or 0), interval=float(msg.get("interval") or 0.2))
            out["type"] = "diagnosed"
        except Exception as exc:  # noqa: BLE001 - the tool gets the reason
            out = {"type": "diagnosed", "error": f"{type(exc).__name__}: {exc}"}
        self._send_later(ident, out)

    def diagnose(self, k: int = 8, hop: float = 1.0, rounds: int = 0, interval: float = 0.2) -> dict[str, Any]:
        """Collect every rank's state through the agent tree, write the state file, run the offline analysis.

        ``rounds`` = 0 picks the hang filter's sample count from the number of threads. Returns
        paths and the report; one collection at a time (a second request waits for the first).
        """
        from planaria.diagnose.online import collect_and_analyze
        with self._diagnosing:          # the routes as they are once this collection's turn has come
            view = self.view()
            idents = list(self.idents.items())
            where: dict[int, tuple[Any, int]] = {r: (d.node, d.lid) for r, d in idents if isinstance(d, Routed)}
            # a rank on an agent channel binds no collection-tree socket (no ZeroMQ in its start):
            # asked over its channel, as a node agent asks its ranks, each rank answering for itself
            where.update((r, (d, r)) for r, d in idents if isinstance(d, Peer) and not (view.get(r) or {}).get("ep"))

            def via_nodes(ranks: list[int], rounds: int, interval: float, hop: float) -> dict[str, Any]:
                return self.gathering.collect(where, ranks, rounds, interval, hop, self._send_later)
            return collect_and_analyze(self.jobdir, view, self.secret.decode("utf-8"),
                                       k=k, hop=hop, rounds=rounds, interval=interval,
                                       behind=set(where), via_nodes=via_nodes)

    def _send_later(self, dest: Dest, msg: dict[str, Any]) -> None:
        """Have the server thread send ``msg`` to ``dest`` (another thread's message)."""
        self._outbox.append((dest, msg))
        self._wake()
