"""The job controller: keeps the rank table, logs rank events, relays events, serves tools.

Agents reach it over their agent channels (``planaria.launch.channels``: a Unix stream socket
next to the control socket, length-prefixed frames) when it listens on a Unix socket, tools
(and agents with a TCP control address) over its ZeroMQ ROUTER; one server thread serves both.
It blocks without a timeout unless a merge window or a waiting lookup is due; a ticker thread
wakes it every SWEEP_INTERVAL for the pid/heartbeat sweep.

Wire protocol (msgpack maps, every message carries ``tok`` = the job secret):

agent -> controller: ``hello`` {rank, pid, host, role, backend}, ``hb`` {rank, step},
``fail`` {rank, reason, id}, ``inject`` {rank, kind, detail}, ``event`` {rank, ...},
``bye`` {rank, code}, ``incident`` {rank, ...} (a localized fault), ``ps`` {} (returns the rank table),
``diagnose`` {k, hop, rounds, interval} (a tool asks for a global state collection; the reply
``diagnosed`` {state, report, ...} comes when the collection tree has answered or timed out).
controller -> agent: ``ack`` {id} for any message with an ``id``, ``hbok`` {} for heartbeats,
``ps`` {ranks: [rank records], t0} for ``ps``. Replies carry ``tok`` too.

Events and tools (docs/events.md, docs/tools.md): ``notify`` {code, source, range, info, affected}
from a rank or a tool is relayed as ``event`` {event} to the ranks in range (and to subscribed
tools); ``abort`` {reason} from a rank's default handler asks the launcher to end the job;
``failed-seen`` {ranks} (a rank's communicator reported failed peers), ``fail``, lost pids and
silent heartbeats are merged into one process-failed event (``planaria.launch.relay``).
Tools: ``ctl`` {action, ranks, signal}, ``publish`` {data, replace}, ``lookup`` {keys, wait,
timeout}, ``log`` {message}, ``subscribe`` {events, io, history} (renewed every second; the
controller then sends ``event`` and ``io`` {rank, channel, text, t} messages), ``stdin``
{ranks, data, eof} (forwarded to those ranks' agents).

Node agents (``planaria.launch.nodeagent``, ``planaria run --node-agents``) speak for the ranks of
a host: ``node-hello`` {node, pid, listen}, ``nhb`` {ranks, steps} (their heartbeats, summed up),
``fwd`` {l, p} (a rank's own message ``p``, handled as if it came from ``Routed(node, l)``),
``gone`` {rank, pid, alive} (a rank's connection closed there); the controller sends ``to``
{l: [...], p} to reach ranks behind a node agent, one message per node for an event.
"""
from __future__ import annotations

import itertools
import os
import signal as _signal
import socket
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, NamedTuple

import zmq
from zmq.utils.monitor import recv_monitor_message

from planaria.events import codes as ev_codes
from planaria.events import curve
from planaria.events.channel import address_for, frame
from planaria.events.ranges import SESSION, Range, targets
from planaria.launch.channels import ACCEPT_PAUSE, ChannelServer, Peer
from planaria.launch.fdlimit import raise_open_files
from planaria.launch import protocol, rankfate, tcpguard
from planaria.launch.jobdir import JobDir
from planaria.launch.procs import pid_alive
from planaria.launch.relay import FaultMerger, KVStore

LOST_REASON = "killed or crashed (no report)"
HEARTBEAT_SILENCE = 3.0
ACTIVE = ("starting", "running")
PLAIN_AFTER = 2.0      # seconds after its start with no hello from any rank: a program without the runtime
REACHABLE = ACTIVE + ("paused",)          # ranks events are forwarded to
SUBSCRIPTION_TTL = 5.0                    # seconds a tool subscription lives without renewal
IO_HISTORY = 500                          # output lines kept for tools that attach late
_CTL_SIGNALS = {"kill": _signal.SIGKILL, "pause": _signal.SIGSTOP, "resume": _signal.SIGCONT}
MAX_REFUSED_LOGGED = 1000
_UNIX_PATH_MAX = 100
SWEEP_INTERVAL = 0.5                      # seconds between pid/heartbeat sweeps (and event-record writes)
UNSETTLED_REASON = ("no goodbye and no recorded end when mpiexec ended (its host cut off or unreachable, "
                    "or the process still running there)")
MAX_KEPT_RECORDS = 100_000                # event records kept while the job record cannot be written
RECORD_BATCH = 256                        # event records kept before they are written anyway



class Routed(NamedTuple):
    """A rank reached through its node agent (``planaria.launch.nodeagent``): the node's
    connection and the rank's local connection number there."""

    node: bytes | Peer
    lid: int


Dest = bytes | Peer | Routed              # a ZeroMQ peer identity, an agent channel, or a rank behind a node agent


def default_address(jobdir: JobDir) -> str:
    """``ipc://<jobdir>/control.sock``, or a short private temp dir if that path is too long."""
    path = jobdir.socket_path
    if len(str(path)) > _UNIX_PATH_MAX:
        short = Path(tempfile.mkdtemp(prefix="planaria-"))  # mode 0700
        path = short / "control.sock"
    return f"ipc://{path}"


class Controller:
    """Control-plane server of one job, running in a background thread."""

    def __init__(self, jobdir: JobDir, address: str | None = None, t0: float | None = None,
                 pid_check: bool = True) -> None:
        self.jobdir = jobdir
        self.secret = jobdir.secret().encode("utf-8")
        self._tok = self.secret.decode("utf-8")
        self.requested = address or default_address(jobdir)
        self.t0 = time.time() if t0 is None else t0
        self.pid_check = pid_check
        self.fates_dir: Path | None = None     # where rankfate records how each rank's process ended
        self.ctl_killed: set[int] = set()       # ranks known from their recorder only, killed by planaria ctl
        self.ctl_paused: set[int] = set()       # ... and paused by it (SIGSTOP, until a resume)
        self.uri: str | None = None
        self.ranks: dict[int, dict[str, Any]] = {}
        self.refused = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context | None = None
        self._outbox: deque[tuple[Dest | None, dict[str, Any]]] = deque()   # from other threads
        self._wake_r, self._wake_w = os.pipe()            # wakes the server thread (outbox, ticker, stop)
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()
        self._wake_closed = False
        self._sweep_due = False                           # set by the ticker every SWEEP_INTERVAL
        self._diagnosing = threading.Lock()
        self.idents: dict[int, Dest] = {}                 # rank -> where its agent is reached
        self.nodes: dict[str, dict[str, Any]] = {}        # node agents that said hello, by node name
        self._unknocked: set[int] = set()                 # knocked before their agent said hello
        self.channels: ChannelServer | None = None
        self._records: list[dict[str, Any]] = []          # event records not yet written
        self._errors: list[float] = []                      # when the server loop caught errors (last second)
        self._errors_seen: set[str] = set()
        self._exhausted_seen = 0
        self.open_files = (0, 0)                            # open-file limit before and after start
        self.guard: tcpguard.HandshakeGuard | None = None   # refused TCP connections (CurveZMQ)
        self._monitor: zmq.Socket | None = None
        self.merger = FaultMerger()
        self._incident_feed: deque[tuple[dict[str, Any], Any]] = deque()   # for the launcher's console
        self.kv = KVStore()
        self.subscribers: dict[Dest, dict[str, Any]] = {}
        self.abort_request: dict[str, Any] | None = None
        self.relayed = 0
        self.host = socket.gethostname()
        self._crashes: dict[int, dict[str, str]] = {}     # rank -> its traceback's site and error (note_crash)
        self._eids = itertools.count(1)
        self._io_history: list[dict[str, Any]] = []
        # message type -> handler; any other type is a rank's report (``_from_rank``)
        self._dispatch = {"ps": self._on_ps, "diagnose": self._on_diagnose, "knock": self._on_knock,
                          **{t: self._on_tool for t in protocol.TOOL_TYPES}}

    # --- lifecycle -----------------------------------------------------
    def start(self, timeout: float = 10.0) -> str:
        """Bind the socket in the server thread, write ``control.uri``; return the bound URI."""
        self.open_files = raise_open_files()     # one descriptor per agent connection
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

    # --- table access ------------------------------------------------
    def table(self) -> dict[int, dict[str, Any]]:
        """A copy of the rank table."""
        with self._lock:
            return {r: dict(v) for r, v in self.ranks.items()}

    def plain_ranks(self) -> dict[int, dict[str, Any]]:
        """Ranks the rank recorder started that have not said hello. Rows like ``table()``'s, no
        heartbeat, role or step. ``runtime`` is False (a program without planaria's runtime) once
        no rank of the job has said hello ``PLAIN_AFTER`` seconds after its start; until then, or
        when other ranks did, a live one is ``starting`` and ``runtime`` None (not known yet)."""
        if self.fates_dir is None:
            return {}
        with self._lock:
            known = set(self.ranks)
        fates = rankfate.read_fates(self.fates_dir, skip=known)    # a rank that said hello has its row
        now = time.time()
        out: dict[int, dict[str, Any]] = {}
        for r, rec in fates.items():
            if r in known:
                continue
            ended = "end" in rec
            plain = not known and (ended or now - float(rec.get("start") or now) >= PLAIN_AFTER)
            state = ("finished" if rec.get("exit_code") == 0 else "failed") if ended else \
                "paused" if r in self.ctl_paused else "running" if plain else "starting"
            out[r] = {"rank": r, "state": state, "pid": rec.get("pid"), "host": rec.get("host"), "role": None,
                      "backend": None, "last_hb": None, "step": None, "runtime": False if plain else None,
                      "start_time": rec.get("start"), "end_time": rec.get("end"), "exit_code": rec.get("exit_code"),
                      "reason": rankfate.describe(rec) if ended else None, **self._crashes.get(r, {})}
        return out

    def view(self) -> dict[int, dict[str, Any]]:
        """Every rank a tool can see: the rank table, plus the ranks of a program without the runtime."""
        rows = self.plain_ranks()
        rows.update(self.table())
        return dict(sorted(rows.items()))

    def _ps_reply(self, only: Any = None, summary: bool = False) -> bytes:
        """``ps``'s reply, packed: ``view()``'s rows (of the ranks in ``only`` when it is a list), the
        table's packed under the lock rather than copied first (at 16 k ranks the copy cost as much
        as the packing); with ``summary``, no rows but the counts per state and host and the steps'
        range, which stay small at any size."""
        plain = self.plain_ranks()
        want = set(r for r in only if isinstance(r, int)) if isinstance(only, list) else None
        reply: dict[str, Any] = {"type": "ps", "t0": self.t0}
        with self._lock:
            ranks = sorted(set(plain) | set(self.ranks))
            if want is not None:
                ranks = [r for r in ranks if r in want]
            rows = [plain[r] if r in plain and r not in self.ranks else self.ranks[r] for r in ranks]
            if summary:
                reply["summary"] = _summary(rows, len(self.nodes))
            else:
                reply["ranks"] = rows
            return protocol.pack(reply, self._tok)

    def note_crash(self, rank: int, site: str | None, error: str) -> None:
        """What a rank's own traceback (uncaught exception) or fatal-error trace said: where and what."""
        said = {"error": error[:300], **({"site": site[:300]} if site else {})}
        with self._lock:
            self._crashes[rank] = said           # a rank without the runtime: merged into its plain row
            info = self.ranks.get(rank)
            if info is not None:
                info.update(said)

    def holds_up(self, ranks: list[int]) -> bool:
        """True when peers waiting for ``ranks`` will get no error: each has finished normally, or
        runs as far as the launcher can tell (active in the table, not failed, lost or paused by a
        tool, and, on this host, its process exists). A rank that its peers cannot reach while it
        still runs (stopped, cut off), or that has finished, hangs the job."""
        with self._lock:
            infos = [self.ranks.get(r) for r in ranks]
        if not ranks or any(i is None or i["state"] not in (*ACTIVE, "finished") for i in infos):
            return False
        if not self.pid_check:
            return True
        return all(pid_alive(int(i["pid"])) is not False for i in infos
                   if i["state"] in ACTIVE and i.get("pid") and i.get("host") in (None, self.host))

    def finished_note(self, ranks: list[int]) -> str | None:
        """What the launcher knows and the ranks may not: those of ``ranks`` that have finished, and
        where (``rank 3 has finished (exit 0 at a.py:9 in <module>)``); None when none has."""
        with self._lock:
            done = [(r, self.ranks[r]) for r in ranks if r in self.ranks and self.ranks[r]["state"] == "finished"]
        if not done:
            return None
        return "; ".join(f"rank {r} has finished (exit {i.get('exit_code') or 0}"
                         + (f" at {i['site']})" if i.get("site") else ")") for r, i in done)

    def pids(self) -> list[int]:
        """Pids of all ranks that said hello."""
        with self._lock:
            return [int(v["pid"]) for v in self.ranks.values() if v.get("pid")]

    def sweep(self, final: bool = False, final_ok: bool = False,
              fates: dict[int, dict[str, Any]] | None = None) -> None:
        """Mark active ranks lost when their pid is gone or their heartbeat is silent.

        With ``final`` (mpiexec has exited) every active rank is settled: by how its process
        ended when ``fates`` (``planaria.launch.rankfate`` records) says so (an exit code:
        ``finished`` without a bye; a signal: ``lost``); a rank with neither a bye nor a recorded
        end is ``lost`` (``UNSETTLED_REASON``: mpiexec's exit 0 does not make a cut-off host's
        ranks finished). Only without recorders (``fates_dir`` None) does ``final_ok`` (mpiexec
        exited 0) count such a rank as ``finished`` without a bye.
        """
        now = time.time()
        lost: list[dict[str, Any]] = []
        with self._lock:
            for info in self.ranks.values():
                fate = (fates or {}).get(info["rank"]) if final else None
                if fate is not None and fate.get("ended_by") and info["state"] not in ("finished", "failed"):
                    # the launcher itself ended it (timeout, Ctrl-C, the job abort, a detected hang): say
                    # so, not "killed by signal 15", even when an earlier sweep saw it go
                    info.update(state="lost", ended_by=fate["ended_by"], reason=rankfate.describe(fate),
                                fail_time=fate.get("end") or fate.get("ended_at") or now)
                    continue
                if info["state"] not in ACTIVE:
                    continue
                if fate is not None and "exit_code" in fate:
                    info.update(state="finished", exit_code=fate["exit_code"],
                                end_time=fate.get("end") or now, reason="exited without a bye")
                    continue
                gone: bool | None = True if info.get("pid_gone") else None   # its node agent saw it go
                # a rank behind a node agent has its pid looked at there (a silent one whose process
                # lives is in the node's summary), not here: the pid may be another host's
                local = not isinstance(self.idents.get(info["rank"]), Routed)
                if gone is None and self.pid_check and info.get("pid") and local:
                    alive = pid_alive(int(info["pid"]))
                    gone = None if alive is None else not alive
                by_silence = gone is None
                if by_silence:
                    gone = now - info["last_hb"] > HEARTBEAT_SILENCE
                if fate is None and gone and self.fates_dir is not None:
                    fate = rankfate.read_one(self.fates_dir, info["rank"])
                    if fate is not None and "end" not in fate and not final:
                        continue        # its recorder is writing how it ended: next sweep
                killed = fate is not None and "signal" in fate
                if final and final_ok and not killed and self.fates_dir is None:
                    # no recorders (--no-rank-fates): mpiexec's 0 is all there is to go by
                    info.update(state="finished", exit_code=0, end_time=now,
                                reason="exited without a bye")
                    continue
                if gone or final or killed:
                    why = f"{rankfate.describe(fate)} (no report)" if killed else LOST_REASON
                    if final and not killed and self.fates_dir is not None and (fate is None or "end" not in fate):
                        # neither a goodbye nor a recorded end: still running where the launcher cannot
                        # see it (a host cut off), or its host's record is out of reach; never success
                        why = UNSETTLED_REASON
                    when = (fate or {}).get("end") or now
                    info.update(state="lost", fail_time=when, reason=why)
                    if by_silence and not (killed or final):
                        info["lost_by"] = "silence"       # a later heartbeat brings it back (``_beat``)
                    lost.append({"type": "lost", "rank": info["rank"], "pid": info.get("pid"),
                                 "reason": why, "t": now})
                    silent = not (self.pid_check and info.get("pid")) and not killed
                    self.merger.add(info["rank"], "lost-connection" if silent else "exited", now,
                                    pid=info.get("pid"))
        if not lost:
            return
        if threading.current_thread() is self._thread:
            self._records.extend(lost)
            self._flush_records()
        else:
            self.jobdir.append_events(lost)
            self._wake()                  # the merge window starts now: let the server thread time it

    # --- server loop ----------------------------------------------------
    def _serve(self) -> None:
        ctx = self._ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 200000)     # a ROUTER drops what exceeds it: bursts of events
        sock.setsockopt(zmq.RCVHWM, 200000)
        monitor = None
        if curve.is_tcp(self.requested):         # other hosts: CurveZMQ, refusals watched
            curve.serve(sock, self.secret.decode("utf-8"))
            monitor = sock.get_monitor_socket(tcpguard.EVENTS)
            self.guard = tcpguard.HandshakeGuard("tcp control socket")
        try:
            sock.bind(self.requested)
            self.uri = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            if self.uri.startswith("ipc://"):
                try:
                    os.chmod(self.uri[len("ipc://"):], 0o600)
                except OSError:
                    pass
        except zmq.ZMQError as exc:
            self._error = exc
            self._ready.set()
            if monitor is not None:
                sock.disable_monitor()
                monitor.close(0)
            sock.close()
            ctx.term()
            return
        path = address_for(self.uri)
        if path is not None:
            try:
                self.channels = ChannelServer(path)
            except OSError:               # agents then use the ZeroMQ socket for everything
                self.channels = None
        self._ready.set()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        chan_fd = -1
        if self.channels is not None:
            chan_fd = self.channels.fileno()
            poller.register(chan_fd, zmq.POLLIN)
        self._monitor = monitor
        if monitor is not None:
            poller.register(monitor, zmq.POLLIN)
        ticker = threading.Thread(target=self._ticker, name="planaria-controller-ticker", daemon=True)
        ticker.start()
        try:
            while not self._stop.is_set():
                try:
                    self._turn(sock, poller, chan_fd)
                except Exception as exc:  # noqa: BLE001 - the controller outlives any one message or write
                    self._survived(exc)
            self._tick(sock, force=True)
            self._drain_outbox(sock)
        finally:
            if self.guard is not None:
                self._records.extend(self.guard.flush())
            self._flush_records()
            if self.channels is not None:
                self.channels.close()
            if monitor is not None:
                sock.disable_monitor()
                monitor.close(0)
            sock.close(200)   # let the last messages (job end to attached tools) leave
            ctx.term()

    def _turn(self, sock: zmq.Socket, poller: zmq.Poller, chan_fd: int) -> None:
        """One turn of the server loop: what is readable, then what is due."""
        # no timeout unless a merge window or a lookup is due: the ticker brings the sweep
        for what, _ in poller.poll(self._poll_ms()):
            if what == chan_fd:
                self._on_channels(sock)
            elif what is self._monitor:
                self._on_monitor()
            elif what is sock:
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._handle(sock, frames[0], frames[-1])
                    if not sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                        break
            else:
                try:
                    os.read(self._wake_r, 4096)
                except OSError:
                    pass
        if self._outbox:
            self._drain_outbox(sock)
        self._tick(sock)
        if self._sweep_due:
            self._sweep_due = False
            if self.channels is not None:
                self.channels.resume()
            self.sweep()
            self._expire_subscribers()
            if self.guard is not None:
                self._records.extend(self.guard.due())
            self._flush_records()

    def _on_monitor(self) -> None:
        """Connection events of the TCP socket: refused handshakes are counted (``tcpguard``)."""
        assert self._monitor is not None and self.guard is not None
        while self._monitor.poll(0):
            self.guard.feed(recv_monitor_message(self._monitor, zmq.NOBLOCK))
        self._records.extend(self.guard.due())

    def _survived(self, exc: Exception) -> None:
        """An error the server loop caught: kept in the job record (once per kind and message),
        then the loop goes on; a burst of them is slowed down rather than spun through."""
        key = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        self._errors = [t for t in self._errors if now - t < 1.0] + [now]
        if key not in self._errors_seen and len(self._errors_seen) < 100:
            self._errors_seen.add(key)
            self._records.append({"type": "controller-error", "error": key, "t": time.time()})
        if len(self._errors) > 50:
            time.sleep(0.01)

    def _on_channels(self, sock: zmq.Socket) -> None:
        """Messages from agents on their channels; a refused or broken connection is closed."""
        assert self.channels is not None
        for peer, frames, why in self.channels.ready():
            for payload in frames:
                if not self._handle(sock, peer, payload):
                    self.channels.close_peer(peer)
                    break
            if why is not None and why != "closed" and not why.startswith("connection error"):
                self._refuse(peer, f"bad frame: {why}")         # an oversized frame
        if self.channels.exhausted > self._exhausted_seen:
            self._exhausted_seen = self.channels.exhausted
            self._records.append({"type": "controller-error", "t": time.time(),
                                  "error": f"out of descriptors accepting agent connections: "
                                           f"{self.channels.last_error}; accepting again in {ACCEPT_PAUSE:g} s "
                                           f"(open-file limit {self.open_files[1]})"})

    def _flush_records(self) -> None:
        """Write the event records kept so far (server thread only). When the write fails (no
        descriptor, a full disk) they stay kept, in order, for the next flush."""
        if self._records:
            records, self._records = self._records, []
            try:
                self.jobdir.append_events(records)
            except OSError:
                self._records = records + self._records
                if len(self._records) > MAX_KEPT_RECORDS:
                    del self._records[:len(self._records) - MAX_KEPT_RECORDS]

    def _record(self, rec: dict[str, Any]) -> None:
        """Append a record to the job record after the event records still kept (server thread)."""
        self._records.append(rec)
        self._flush_records()

    def _ticker(self) -> None:
        """Wake the server thread every SWEEP_INTERVAL for the pid/heartbeat sweep."""
        while not self._stop.wait(SWEEP_INTERVAL):
            self._sweep_due = True
            self._wake()

    def _wake(self) -> None:
        with self._wake_lock:
            if self._wake_closed:
                return
            try:
                os.write(self._wake_w, b"w")
            except OSError:      # pipe full: the server thread is due to drain it
                pass

    def _poll_ms(self) -> int | None:
        due = [d for d in (self.merger.next_due(), self.kv.next_deadline()) if d is not None]
        if not due:
            return None
        return max(0, int((min(due) - time.time()) * 1000) + 1)

    def _drain_outbox(self, sock: zmq.Socket) -> None:
        while self._outbox:
            dest, reply = self._outbox.popleft()
            if dest is not None:
                self._reply(sock, dest, reply)
            elif reply.get("type") == "io":
                self._to_subscribers(sock, reply, "io")
            elif reply.get("type") == "emit":
                self._emit(sock, reply["code"], None, Range(reply.get("range", SESSION)),
                           reply.get("info") or {}, reply.get("affected") or (), "rm")

    def _tick(self, sock: zmq.Socket, force: bool = False) -> None:
        """Emit a merged failure event whose window has passed; answer due lookups."""
        if self.merger.next_due() is not None or force:
            now = time.time()
            with self._lock:
                merged = self.merger.take(now, force=force)
            if merged is not None:
                self._emit(sock, merged["code"], None, Range(), merged["info"], merged["affected"], "rm")
        if self.kv.waiting():
            for ident, reply in self.kv.ready(time.time()):
                self._reply(sock, ident, reply)

    def _expire_subscribers(self) -> None:
        """Forget tools whose subscription was not renewed."""
        if self.subscribers:
            now = time.time()
            for ident in [i for i, sub in self.subscribers.items() if sub["until"] < now]:
                del self.subscribers[ident]

    def _send_packed(self, sock: zmq.Socket, dest: Dest, payload: bytes, framed: bytes | None = None) -> bool:
        """Send a packed message to a ZeroMQ peer or down an agent channel (``framed``: already framed)."""
        if isinstance(dest, Routed):
            return self._send_packed(sock, dest.node, self._to_node([dest.lid], payload))
        if isinstance(dest, Peer):
            assert self.channels is not None
            return self.channels.send(dest, framed if framed is not None else frame(payload))
        try:
            sock.send_multipart([dest, payload], zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    def _to_node(self, lids: list[int], payload: bytes) -> bytes:
        """A node agent's ``to``: ``payload`` (packed once) for its ranks at ``lids``."""
        return protocol.pack({"type": "to", "l": lids, "p": payload}, self._tok)

    def _to_subscribers(self, sock: zmq.Socket, msg: dict[str, Any], what: str) -> None:
        subs = [i for i, sub in self.subscribers.items() if sub.get(what)]
        if not subs:
            return
        if what == "events" and msg.get("event"):
            wanted = [i for i in subs if self.subscribers[i].get("codes") is None
                      or msg["event"]["code"] in self.subscribers[i]["codes"]]
            subs = wanted
        payload = protocol.pack(msg, self._tok)
        for ident in subs:
            self._send_packed(sock, ident, payload)

    def _emit(self, sock: zmq.Socket, code: int, source: int | None, rng: Range, info: dict[str, Any],
              affected: Any, origin: str, t: float | None = None, source_host: str | None = None,
              cache: bool = True) -> dict[str, Any]:
        """Forward one event to the ranks in range (and to subscribed tools); log it."""
        now = time.time()
        with self._lock:
            live = {r: v.get("host") for r, v in self.ranks.items()
                    if v["state"] in REACHABLE and r in self.idents}
            if source is not None and source_host is None and source in self.ranks:
                source_host = self.ranks[source].get("host")
            if source is not None and source not in live and source in self.ranks:
                live_src = dict(live)
                live_src[source] = self.ranks[source].get("host")
            else:
                live_src = live
        tg = targets(rng, source, live_src, source_host if source is not None else self.host) & set(live)
        ev = {"code": int(code), "source": source, "range": rng.to_wire(), "info": info,
              "affected": sorted(int(r) for r in affected or ()), "id": next(self._eids),
              "t": now if t is None else t, "source_host": source_host, "origin": origin,
              "cache": cache}
        payload = protocol.pack({"type": "event", "event": ev}, self._tok)
        framed = frame(payload)                  # packed and framed once for every target
        behind: dict[bytes | Peer, list[int]] = {}
        for r in sorted(tg):
            dest = self.idents[r]
            if isinstance(dest, Routed):          # one message per node agent, not per rank
                behind.setdefault(dest.node, []).append(dest.lid)
            else:
                self._send_packed(sock, dest, payload, framed)
        for node, lids in behind.items():
            self._send_packed(sock, node, self._to_node(lids, payload))
        if self.subscribers:
            self._to_subscribers(sock, {"type": "event", "event": ev}, "events")
        self.relayed += 1
        # written in batches (SWEEP_INTERVAL, RECORD_BATCH, before any other record, at stop):
        # a file append per event would take the CPU the receiving ranks need right now
        self._records.append({"type": "event", "t": now, "id": ev["id"], "code": ev["code"],
                              "name": ev_codes.name_of(ev["code"]), "source": source,
                              "origin": origin, "range": rng.name, "targets": sorted(tg),
                              "affected": ev["affected"], "info": info})
        if len(self._records) >= RECORD_BATCH:
            self._flush_records()
        return ev

    def notify(self, code: int, info: dict[str, Any] | None = None, affected: Any = (),
               range_kind: int = SESSION) -> None:
        """Raise an event from the controller itself (e.g. job end); sent by the server thread."""
        self._outbox.append((None, {"type": "emit", "code": int(code), "info": info or {},
                                    "affected": list(affected), "range": range_kind}))
        self._wake()

    def _announce_incident(self, inc: dict[str, Any], by: Any) -> None:
        """A localized fault (one root cause from a responsible rank) as an event to the ranks and
        attached tools: its kind, verdict and blamed ranks, without the evidence records."""
        info = {k: inc.get(k) for k in ("kind", "verdict", "host", "status", "first", "last", "count")}
        info["by"] = by
        ranks = [r for r in inc.get("ranks") or () if isinstance(r, int)]
        self.notify(ev_codes.FAULT_LOCALIZED, info, affected=ranks)
        self._incident_feed.append((dict(info, ranks=ranks), inc.get("responsible", by)))

    def take_incidents(self) -> list[tuple[dict[str, Any], Any]]:
        """The incidents reported since the last call, with the rank that found each (any thread)."""
        out = []
        while self._incident_feed:
            out.append(self._incident_feed.popleft())
        return out

    def io(self, rank: int, channel: str, text: str) -> None:
        """One line of a rank's output, for attached tools (kept in a bounded history)."""
        rec = {"type": "io", "rank": rank, "channel": channel, "text": text, "t": time.time()}
        self._io_history.append(rec)
        if len(self._io_history) > IO_HISTORY:
            del self._io_history[:len(self._io_history) - IO_HISTORY]
        if self.subscribers:
            self._outbox.append((None, rec))
            self._wake()

    def _refuse(self, dest: Dest, why: str, mtype: Any = None) -> None:
        self.refused += 1
        if self.refused <= MAX_REFUSED_LOGGED:
            self._record({"type": "refused", "t": time.time(),
                          "peer": _label(dest),
                          "why": why, "msg_type": mtype})

    def _reply(self, sock: zmq.Socket, dest: Dest, msg: dict[str, Any]) -> None:
        self._send_packed(sock, dest, protocol.pack(msg, self._tok))

    def _knock(self, sock: Any, dest: Dest) -> None:
        """Wake a rank's localization service: another rank wrote to it on the service communicator."""
        self._send_packed(sock, dest, protocol.pack({"type": "knock"}, self._tok))

    def _handle(self, sock: zmq.Socket, ident: Dest, payload: bytes) -> bool:
        """Act on one message from a peer (``_dispatch`` by its type; a rank's report otherwise);
        False when it was refused."""
        msg, why = protocol.unpack(payload, self.secret)
        if why is not None:
            self._refuse(ident, why, msg.get("type") if msg is not None else None)
            return False
        assert msg is not None
        mtype = msg.get("type")
        now = time.time()
        if mtype in protocol.NODE_TYPES:
            if not isinstance(ident, Routed):     # (a rank cannot speak for a node)
                self._from_node(sock, ident, msg, now)
            return True
        self._dispatch.get(mtype, self._from_rank)(sock, ident, msg, now)
        return True

    def _on_ps(self, sock: zmq.Socket, ident: Dest, msg: dict[str, Any], now: float) -> None:
        self._send_packed(sock, ident, self._ps_reply(msg.get("ranks"), bool(msg.get("summary"))))

    def _on_diagnose(self, sock: zmq.Socket, ident: Dest, msg: dict[str, Any], now: float) -> None:
        threading.Thread(target=self._diagnose_for, args=(ident, msg), daemon=True,
                         name="planaria-diagnose").start()

    def _on_knock(self, sock: zmq.Socket, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """A rank's localization service wrote to these ranks: wake theirs (``gone``: those ended)."""
        ended = []
        for r in msg.get("ranks") or ():
            if not isinstance(r, int):
                continue
            with self._lock:
                state = (self.ranks.get(r) or {}).get("state")
            if state in ("finished", "failed", "lost"):
                ended.append(r)                  # nobody there to wake: the sender analyses itself
                continue
            dest = self.idents.get(r)
            if dest is None:
                self._unknocked.add(r)           # kept until the agent says hello, never dropped
            else:
                self._knock(sock, dest)
        if ended:
            self._reply(sock, ident, {"type": "gone", "ranks": ended})

    def _on_tool(self, sock: zmq.Socket, ident: Dest, msg: dict[str, Any], now: float) -> None:
        self._tool(sock, ident, msg["type"], msg, now)

    def _from_rank(self, sock: zmq.Socket, ident: Dest, msg: dict[str, Any], now: float) -> None:
        """A rank's report: the rank table, failure signals, incidents, an abort request; recorded
        (but heartbeats) and answered (``ack`` for an ``id``, ``hbok`` for a heartbeat)."""
        mtype = msg.get("type")
        if mtype in ("hello", "hb") and isinstance(msg.get("rank"), int):
            self.idents[msg["rank"]] = ident
            if msg["rank"] in self._unknocked:      # a knock came before this agent: deliver it now
                self._unknocked.discard(msg["rank"])
                self._knock(sock, ident)
        self._update_table(msg, now)
        if mtype == "fail" and isinstance(msg.get("rank"), int):
            with self._lock:
                if (self.ranks.get(msg["rank"]) or {}).get("backend") == "sim":   # a zombie, not killed
                    self.merger.add(msg["rank"], "aborted", now, reason=str(msg.get("reason") or ""))
                else:                    # fail-stop: the rank SIGKILLs itself after this report
                    self.merger.add(msg["rank"], "signal", now, signal=int(_signal.SIGKILL),
                                    reason=str(msg.get("reason") or ""))
        elif mtype == "failed-seen":
            with self._lock:
                for r in msg.get("ranks") or ():
                    if isinstance(r, int) and r != msg.get("rank"):
                        self.merger.add(r, "unreachable", now, by=msg.get("rank"))
        elif mtype == "incident" and isinstance(msg.get("incident"), dict):
            self._announce_incident(msg["incident"], msg.get("by"))
        elif mtype == "abort" and self.abort_request is None:
            self.abort_request = {"rank": msg.get("rank"), "reason": str(msg.get("reason") or "abort"),
                                  "event": msg.get("event"), "t": now}
        if mtype != "hb":
            rec = dict(msg)
            rec.setdefault("t", now)
            rec["t_recv"] = now
            self._record(rec)
        if "id" in msg:
            ack: dict[str, Any] = {"type": "ack", "id": msg["id"]}
            if mtype == "bye":           # the rank bounds its MPI_Finalize tighter after a failure
                ack["failures"] = self.failures_known()
            self._reply(sock, ident, ack)
        elif mtype == "hb":
            self._reply(sock, ident, {"type": "hbok"})


    def _from_node(self, sock: zmq.Socket, ident: bytes | Peer, msg: dict[str, Any], now: float) -> None:
        """A node agent's message: a rank's message forwarded, the node's heartbeat summary, a rank
        whose connection closed there, or the node's hello."""
        mtype = msg["type"]
        if mtype == "fwd":
            inner, lid = msg.get("p"), msg.get("l")
            if isinstance(inner, bytes) and isinstance(lid, int):
                self._handle(sock, Routed(ident, lid), inner)
        elif mtype == "nhb":            # ranks and their steps, two columns (16 k rows a second per 8 k ranks)
            if isinstance(ident, bytes):            # over ZeroMQ the node agent has no other sign of us
                self._reply(sock, ident, {"type": "hbok"})
            ranks, steps = msg.get("ranks"), msg.get("steps")
            if isinstance(ranks, list) and isinstance(steps, list) and len(ranks) == len(steps):
                table = self.ranks
                with self._lock:
                    for rank, step in zip(ranks, steps):
                        info = table.get(rank)
                        if info is None:
                            continue
                        if info["state"] == "running":      # the common case, inline (16 k rows a second)
                            info["last_hb"] = now
                            info["step"] = step
                        else:
                            self._beat(info, step, now)
        elif mtype == "gone":
            rank = msg.get("rank")
            with self._lock:
                info = self.ranks.get(rank) if isinstance(rank, int) else None
                if info is not None and msg.get("alive") is False:
                    info["pid_gone"] = True          # looked at on its node: the next sweep settles it
            if info is not None and msg.get("alive") is False:
                self._sweep_due = True
        elif mtype == "node-hello":             # a node agent (maybe through its tree parent, ``ident``)
            name = str(msg.get("node") or "?")
            self.nodes[name] = {"node": name, "pid": msg.get("pid"), "t": now}
            self._record({"type": "node-hello", "t": now, "node": name, "pid": msg.get("pid")})

    def _beat(self, info: dict[str, Any], step: Any, now: float) -> None:
        """A heartbeat of a rank (its own or in its node's summary). A rank lost only because it was
        silent, and not known dead since, is running again: the silence was late news, not a loss
        (recorded as ``recovered``; the failure event already sent stays sent)."""
        silent_for = now - info["last_hb"]
        info["last_hb"] = now
        info["step"] = step
        if info["state"] == "starting":
            info["state"] = "running"
        elif info["state"] == "lost" and info.get("lost_by") == "silence" and not info.get("pid_gone"):
            info.update(state="running", fail_time=None, reason=None, lost_by=None)
            self._records.append({"type": "recovered", "rank": info["rank"], "t": now,
                                  "silent_s": round(silent_for, 3)})

    def _tool(self, sock: zmq.Socket, ident: Dest, mtype: str, msg: dict[str, Any], now: float) -> None:
        """Requests of tools (and of ranks' event API): relay, job control, key-values, I/O."""
        mid = msg.get("id")
        reply: dict[str, Any] | None = {"type": mtype}
        if mtype == "notify":
            try:
                code = ev_codes.parse_code(msg.get("code"))
                rng = Range.from_wire(msg.get("range"))
            except (ValueError, TypeError) as exc:
                reply["error"] = str(exc)
            else:
                src = msg.get("source") if isinstance(msg.get("source"), int) else None
                ev = self._emit(sock, code, src, rng, dict(msg.get("info") or {}), msg.get("affected") or (),
                                "rank" if isinstance(msg.get("rank"), int) else "tool", t=msg.get("t"),
                                source_host=msg.get("source_host"), cache=bool(msg.get("cache", True)))
                reply["event"] = ev["id"]
                with self._lock:     # ranks with an agent that handles events (none in a plain program)
                    reply["agents"] = sum(1 for v in self.ranks.values() if v["state"] in REACHABLE)
            if mid is None and isinstance(msg.get("rank"), int):
                reply = None                 # a rank's notify is fire-and-forget
        elif mtype == "ctl":
            reply.update(self._ctl(msg, now))
        elif mtype == "publish":
            stored, err = self.kv.publish(msg.get("data") or {}, bool(msg.get("replace")), msg.get("rank"))
            reply.update(stored=stored, error=err)
            if stored:
                self._record({"type": "publish", "t": now, "rank": msg.get("rank"), "keys": stored})
        elif mtype == "lookup":
            keys = [str(k) for k in msg.get("keys") or ()]
            found = self.kv.lookup(keys)
            if msg.get("wait") and len(found) < len(keys):
                timeout = min(max(float(msg.get("timeout") or 0.0), 0.0), 3600.0)
                self.kv.wait(ident, mid, keys, now + timeout)
                return
            reply.update(data=found, missing=[k for k in keys if k not in found])
        elif mtype == "subscribe":
            if msg.get("cancel"):
                self.subscribers.pop(ident, None)
            else:
                new = ident not in self.subscribers
                cs = msg.get("codes")
                self.subscribers[ident] = {"until": now + SUBSCRIPTION_TTL, "io": bool(msg.get("io")),
                                           "events": bool(msg.get("events")),
                                           "codes": None if cs is None else {int(c) for c in cs}}
                if new and msg.get("history") and msg.get("io"):
                    for rec in list(self._io_history):
                        self._reply(sock, ident, dict(rec))
        elif mtype == "stdin":
            sent = []
            payload = protocol.pack({"type": "stdin", "data": str(msg.get("data") or ""),
                                     "eof": bool(msg.get("eof"))}, self._tok)
            with self._lock:
                want = msg.get("ranks")
                ranks = sorted(r for r, v in self.ranks.items() if v["state"] in REACHABLE
                               and (want is None or r in want))
            for r in ranks:
                if r in self.idents and self._send_packed(sock, self.idents[r], payload):
                    sent.append(r)
            reply["ranks"] = sent
        if reply is not None:
            if mid is not None:
                reply["id"] = mid
            self._reply(sock, ident, reply)

    def _ctl(self, msg: dict[str, Any], now: float) -> dict[str, Any]:
        """kill | signal | pause | resume the given ranks (all when none named)."""
        action = str(msg.get("action") or "")
        if action == "signal":
            try:
                sig = _parse_signal(msg.get("signal"))
            except ValueError as exc:
                return {"error": str(exc)}
        elif action in _CTL_SIGNALS:
            sig = _CTL_SIGNALS[action]
        else:
            return {"error": f"unknown action {action!r} (kill, signal, pause, resume)"}
        want = msg.get("ranks")
        done: list[int] = []
        by_node: list[int] = []                    # signalled by their node agent
        errors: dict[str, str] = {}
        rows = {r: v for r, v in self.view().items() if want is None or r in want}
        for r in sorted(set(want or ()) - set(rows)):
            errors[str(r)] = "no such rank"
        for r, info in sorted(rows.items()):
            pid = info.get("pid")
            if info["state"] not in REACHABLE or not pid:
                errors[str(r)] = f"not running ({info['state']})"
                continue
            dest = self.idents.get(r)
            if isinstance(dest, Routed):           # its node agent signals it, on its host
                self._outbox.append((dest.node, {"type": "signal", "l": [dest.lid], "sig": int(sig)}))
                by_node.append(r)
            else:
                try:
                    os.kill(int(pid), sig)
                except OSError as exc:
                    errors[str(r)] = exc.strerror or str(exc)
                    continue
            done.append(r)
            with self._lock:
                row = self.ranks.get(r)
                if row is None:           # known from its recorder only, which records how it ends
                    if action == "kill":
                        self.ctl_killed.add(r)
                    elif action == "pause":
                        self.ctl_paused.add(r)
                    elif action == "resume":
                        self.ctl_paused.discard(r)
                    continue
                if action == "pause":
                    row["state"] = "paused"
                elif action == "resume" and row["state"] == "paused":
                    row["state"], row["last_hb"] = "running", now
                elif action == "kill":
                    row.update(state="lost", fail_time=now, reason="killed by command (planaria ctl)")
                    self.merger.add(r, "killed-by-cmd", now, signal=int(sig))
        self._record({"type": "ctl", "t": now, "action": action, "signal": int(sig),
                      "ranks": done, "errors": errors, "by_node_agent": by_node})
        return {"action": action, "signal": int(sig), "ranks": done, "errors": errors, "by_node_agent": by_node}

    def failures_known(self) -> bool:
        """Whether the controller knows of any failed or lost rank of this job."""
        with self._lock:
            return self.merger.any_failure() or any(r["state"] in ("failed", "lost") for r in self.ranks.values())

    def _update_table(self, msg: dict[str, Any], now: float) -> None:
        mtype = msg.get("type")
        rank = msg.get("rank")
        if not isinstance(rank, int):
            return
        with self._lock:
            info = self.ranks.get(rank)
            if info is None:
                info = self.ranks[rank] = {
                    "rank": rank, "state": "starting", "pid": None, "host": None, "role": None,
                    "backend": None, "last_hb": now, "step": None, "fail_time": None,
                    "reason": None, "exit_code": None, "end_time": None, "hello_time": None,
                }
            if mtype == "hello":
                info.update(pid=msg.get("pid"), host=msg.get("host"), role=msg.get("role"),
                            backend=msg.get("backend"), hello_time=now, last_hb=now,
                            ep=msg.get("ep"), size=msg.get("size"))
                if info["state"] not in ("failed", "finished", "lost"):
                    info["state"] = "starting"
            elif mtype == "hb":
                if "role" in msg:           # the recovery driver changed it (a spare took over a rank)
                    info["role"], info["logical"] = msg.get("role"), msg.get("logical")
                self._beat(info, msg.get("step"), now)
            elif mtype == "fail":
                if info["state"] != "failed":
                    info.update(state="failed", fail_time=now,
                                reason=str(msg.get("reason") or "failed"))
            elif mtype == "inject":
                info["injected"] = {"kind": msg.get("kind"), "detail": msg.get("detail"), "t": now}
                info["last_hb"] = now
            elif mtype == "bye":
                if "role" in msg:
                    info["role"], info["logical"] = msg.get("role"), msg.get("logical")
                code = msg.get("code", 0)
                info.update(exit_code=code, end_time=now)
                if msg.get("reason") and code:      # why the rank chose a non-zero status
                    info["reason"] = f"exit {code}: {str(msg['reason'])[:300]}"
                if msg.get("site"):                 # where the program called sys.exit
                    info["site"] = str(msg["site"])[:300]
                if info["state"] in ACTIVE:
                    info["state"] = "finished"
            else:
                info["last_hb"] = now

    # --- global diagnosis ------------------------------------------------
    def _diagnose_for(self, ident: Dest, msg: dict[str, Any]) -> None:
        try:
            out = self.diagnose(k=int(msg.get("k") or 8), hop=float(msg.get("hop") or 1.0),
                                rounds=int(msg.get("rounds") or 0), interval=float(msg.get("interval") or 0.2))
            out["type"] = "diagnosed"
        except Exception as exc:  # noqa: BLE001 - the tool gets the reason
            out = {"type": "diagnosed", "error": f"{type(exc).__name__}: {exc}"}
        self._outbox.append((ident, out))
        self._wake()

    def diagnose(self, k: int = 8, hop: float = 1.0, rounds: int = 0, interval: float = 0.2) -> dict[str, Any]:
        """Collect every rank's state through the agent tree, write the state file, run the offline analysis.

        ``rounds`` = 0 picks the hang filter's sample count from the number of threads. Returns
        paths and the report; one collection at a time (a second request waits for the first).
        """
        from planaria.diagnose.run import collect_and_analyze
        with self._diagnosing:
            return collect_and_analyze(self.jobdir, self.view(), self.secret.decode("utf-8"),
                                       k=k, hop=hop, rounds=rounds, interval=interval)


def _label(dest: Dest) -> str:
    """How a refusal names the peer: an agent channel, a ZeroMQ identity, or a rank behind a node agent."""
    if isinstance(dest, Routed):
        return f"via node agent ({_label(dest.node)}), connection {dest.lid}"
    return dest.label if isinstance(dest, Peer) else dest.hex()


def _summary(rows: list[dict[str, Any]], node_agents: int) -> dict[str, Any]:
    """``ps --summary``: ranks per state and per host, the lowest and highest step, the node agents."""
    states: dict[str, int] = {}
    hosts: dict[str, int] = {}
    steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    for r in rows:
        states[str(r.get("state"))] = states.get(str(r.get("state")), 0) + 1
        hosts[str(r.get("host") or "?")] = hosts.get(str(r.get("host") or "?"), 0) + 1
    return {"ranks": len(rows), "states": states, "hosts": hosts, "node_agents": node_agents,
            "step_min": min(steps) if steps else None, "step_max": max(steps) if steps else None}


def _parse_signal(value: Any) -> int:
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
