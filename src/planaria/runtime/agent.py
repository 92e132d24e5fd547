"""Rank-side control-plane agent: hello, heartbeats, reports, orphan guard, state collection.

When the controller listens on a Unix socket (one host, the default) the agent talks to it
over the agent channel (``planaria.events.channel``): one plain stream socket that any thread
writes its messages into directly (a rank's ``notify`` leaves from the notifying thread) and
that the agent thread reads. Otherwise (a TCP control address) a DEALER socket owned by the
agent thread carries the same messages, handed over by other threads through a queue. The
agent thread also owns the ROUTER on which the collection tree (``planaria.diagnose.collect``)
reaches this rank; a collection request runs in its own short-lived thread so that heartbeats
continue while stacks are sampled and children are waited for. The agent thread blocks without
a timeout (no timer armed per message); a ticker thread wakes it every heartbeat interval.
Events the controller forwards run this rank's handler chain on the agent thread
(``planaria.events``); stdin pushed by a tool is written to a pipe that replaces the rank's
file descriptor 0 on the first push.
"""
from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # (no stubs) the C modules behind signal and socket:
import _socket          # without their imports (their enum conversions: ~2.5 ms of a rank's start)
import itertools
import os
import select
import threading
import time
from collections import deque

from planaria.events.channel import FrameError, Reader, Writer, address_for, connect, frame
from planaria.runtime import nodelink, state
from planaria.events.local import deliver as _deliver
from planaria.util.env import PLANARIA_CONTROL_URI, PLANARIA_ORPHAN_TIMEOUT, PLANARIA_SECRET_FILE
from planaria.util.packlite import packb, unpackb
from planaria.util.procstat import start_ticks

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any

    import zmq

HEARTBEAT_INTERVAL = 0.5
DEFAULT_ORPHAN_TIMEOUT = 15.0
WORK_EVERY = 1.0          # seconds between two looks at a task runtime's counters (``cf`` in a heartbeat)


class Agent:
    """Connection of one rank to the job controller."""

    def __init__(self, uri: str, secret: str, rank: int, size: int, role: str = "worker",
                 backend: str = "ulfm", orphan_timeout: float = DEFAULT_ORPHAN_TIMEOUT,
                 heartbeat: float = HEARTBEAT_INTERVAL) -> None:
        self.uri = uri
        self.rank = int(rank)
        self.size = int(size)
        self.role = role
        self.backend = backend
        self.orphan_timeout = float(orphan_timeout)
        self.heartbeat = float(heartbeat)
        self.step: int | None = None
        self.total: int | None = None         # the step count announced by ``step(i, total=n)``
        self._total_sent: int | None = None   # ... as last told (a heartbeat carries it when it changes)
        self._work_sent: list[int] | None = None   # the task counters as last told
        self._work_at: tuple[float, float] | None = None   # (when, busy seconds) at the last look
        self.logical: int | None = None       # the logical rank this process works as (recovery)
        self._role_news = False               # role/logical changed: the next heartbeat says so
        self.last_reply = time.monotonic()
        self._secret = secret
        self._hbok = packb({"type": "hbok", "tok": secret})   # the controller's answer to a heartbeat
        self._queue: deque[dict[str, Any]] = deque()          # append/popleft are thread-safe
        self._pending: dict[str, threading.Event] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = False                    # set by the ticker: a heartbeat is due
        self._chan_fd, self._chan_mask = -1, 0   # the agent channel's descriptor while polled, its events
        self._IN = self._OUT = self._READ = 0     # the poller's flags (``_open``)
        self._last_turn = 0.0                 # when the loop last went round (a stopped process is not orphaned)
        self._closed = False
        self.dead: str | None = None          # set when this rank has failed (sim zombies keep their agent)
        self._replies: deque[tuple[bytes, dict[str, Any]]] = deque()
        self._answers: dict[str, dict[str, Any]] = {}
        self._stdin_w: int | None = None
        self._spare_r: int | None = None      # the spare's wake pipe (``spare_wake_fd``), made on first use
        self._spare_w: int | None = None
        self._wake_early = b""                # the wakes that came before the pipe was made: the pipe starts with them
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.endpoint: str | None = None
        self._on_knock: Any = None            # called on the agent thread when another rank knocks
        self._knock_early = False             # a knock came before there was anyone to call
        self.on_gone: Any = None              # called on the agent thread with ranks a knock found ended
        self._knock_lock = threading.Lock()
        self._chan: Writer | None = None      # the agent channel, when the controller has one
        self._pid = os.getpid()
        path = address_for(uri)
        chan_sock = nodelink.connect_node(uri)          # this host's node agent, when the job has them
        if chan_sock is None and path is not None:
            chan_sock = connect(path)
        # ZeroMQ only without an agent channel (a TCP control address): the socket to the controller
        # and the collection tree's. On a channel the controller (or the node agent) asks this rank
        # for its state over the channel, and the rank's start saves ZeroMQ's import (~17 ms of CPU)
        self._ctx: Any = None
        self._tree: zmq.Socket | None = None
        if chan_sock is None:
            import zmq
            self._ctx = zmq.Context()
            self._tree = self._bind_tree()    # bound here so that hello can name it; used by the agent thread
        if chan_sock is not None:
            self._chan = Writer(chan_sock)
            self._chan.write(frame(self._pack(self._hello())))     # first, before any other thread writes
        self._thread = threading.Thread(target=self._run, name=f"planaria-agent-{rank}", daemon=True)
        self._thread.start()

    def set_role(self, role: str, logical: int | None) -> None:
        """This process now works as ``role`` (``survivor``, ``recovered``...) for logical rank ``logical``;
        sent with the next heartbeat, so ``planaria ps`` and the summary show it."""
        if (role, logical) == (self.role, self.logical):
            return
        self.role, self.logical = role, logical
        self._role_news = True

    @classmethod
    def from_env(cls, rank: int, size: int, role: str = "worker", backend: str = "ulfm") -> "Agent | None":
        """Agent configured from ``PLANARIA_*`` variables, or None when not under ``planaria run``."""
        uri = os.environ.get(PLANARIA_CONTROL_URI)
        if not uri:
            return None
        secret_file = os.environ.get(PLANARIA_SECRET_FILE)
        if not secret_file:
            return None
        try:
            with open(secret_file, "rb") as fh:      # bytes: no text codec to import
                secret = fh.read().decode("ascii").strip()
        except OSError:
            return None
        try:
            orphan = float(os.environ.get(PLANARIA_ORPHAN_TIMEOUT, DEFAULT_ORPHAN_TIMEOUT))
        except ValueError:
            orphan = DEFAULT_ORPHAN_TIMEOUT
        return cls(uri, secret, rank, size, role=role, backend=backend, orphan_timeout=orphan)

    # --- app-thread API -----------------------------------------------
    def spare_wake_fd(self) -> int:
        """A file descriptor that becomes readable when the controller sends ``wake`` (a working
        rank started a recovery or released the spares): a spare sleeps on it between two tests of
        its MPI receive. Non-blocking; the reader drains it. A wake that came before it was made
        is in it already: a spare still setting up when a recovery started would otherwise sleep
        through it (its first test of the receive may come before the revoke reaches it)."""
        with self._lock:
            if self._spare_r is None:
                r, w = os.pipe()
                os.set_blocking(r, False)
                os.set_blocking(w, False)
                if self._wake_early:
                    os.write(w, self._wake_early)
                self._spare_r, self._spare_w = r, w
            return self._spare_r

    @property
    def on_knock(self) -> Any:
        """What to call when another rank knocks (its localization service wrote to this rank's)."""
        return self._on_knock

    @on_knock.setter
    def on_knock(self, cb: Any) -> None:
        with self._knock_lock:
            self._on_knock = cb
            early, self._knock_early = self._knock_early, False
        if cb is not None and early:      # the knock arrived before the service existed
            cb()

    def report(self, type: str, wait: bool = False, timeout: float = 1.0, **fields: Any) -> bool:
        """Send a ``type`` message; with ``wait`` block until acked (bounded); True if sent/acked."""
        if self._closed:
            return False
        msg: dict[str, Any] = dict(fields)
        msg["type"] = type
        msg.setdefault("rank", self.rank)
        msg.setdefault("t", time.time())
        ev: threading.Event | None = None
        if wait:
            mid = f"{self.rank}-{os.getpid()}-{next(self._ids)}"
            msg["id"] = mid
            ev = threading.Event()
            with self._lock:
                self._pending[mid] = ev
        sent = self._submit(msg)
        if ev is None:
            return sent
        ok = ev.wait(timeout)
        with self._lock:
            self._pending.pop(msg["id"], None)
            self._answers.pop(msg["id"], None)
        return ok

    def request(self, msg: dict[str, Any], timeout: float = 5.0) -> dict[str, Any] | None:
        """Send ``msg`` and return the controller's reply to it (None after ``timeout`` s)."""
        if self._closed:
            return None
        msg = dict(msg)
        mid = f"{self.rank}-{os.getpid()}-{next(self._ids)}"
        msg["id"] = mid
        msg.setdefault("rank", self.rank)
        ev = threading.Event()
        with self._lock:
            self._pending[mid] = ev
        self._submit(msg)
        ev.wait(timeout)
        with self._lock:
            self._pending.pop(mid, None)
            return self._answers.pop(mid, None)

    def _submit(self, msg: dict[str, Any]) -> bool:
        """Hand a message over: into the channel from this thread, or to the agent thread's queue."""
        chan = self._chan
        if chan is not None:
            if os.getpid() != self._pid:
                return False              # a forked child must not write into its parent's stream
            ok = chan.write(frame(self._pack(msg)))
            if chan.pending:
                self._wake()              # the agent thread sends the rest when the socket takes it
            return ok
        self._queue.append(msg)
        self._wake()
        return True

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"w")
        except OSError:          # pipe full (the agent is already due to drain) or closed
            pass

    def close(self, timeout: float = 1.0) -> None:
        """Flush queued messages, stop the thread (bounded); nothing further is sent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake()
        self._thread.join(timeout)

    # --- agent thread ---------------------------------------------------
    def _pack(self, msg: dict[str, Any]) -> bytes:
        msg["tok"] = self._secret
        return packb(msg)             # msgpack is never imported for the usual messages (packlite)

    def _hello(self) -> dict[str, Any]:
        return {"type": "hello", "rank": self.rank, "size": self.size, "pid": os.getpid(),
                "st": start_ticks(os.getpid()), "host": _socket.gethostname(), "role": self.role,
                "backend": self.backend, "t": time.time(), "ep": self.endpoint}

    def _send(self, sock: zmq.Socket | None, msg: dict[str, Any]) -> None:
        if sock is None:
            self._submit(msg)
            return
        import zmq
        try:
            sock.send(self._pack(msg), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def _drain(self, sock: zmq.Socket | None) -> None:
        queued = self._queue
        while queued:
            self._send(sock, queued.popleft())

    def _on_reply(self, payload: bytes) -> None:
        if payload == self._hbok:         # a heartbeat's answer, byte for byte: read without msgpack
            self.last_reply = time.monotonic()
            return
        try:
            msg = unpackb(payload)        # not msgpack's import: the first message may come mid-recovery
        except Exception:  # noqa: BLE001 - an undecodable reply is dropped
            return
        if not isinstance(msg, dict) or msg.get("tok") != self._secret:
            return
        self.last_reply = time.monotonic()
        mtype = msg.get("type")
        if mtype == "event":
            try:
                _deliver(msg.get("event") or {})
            except Exception:  # noqa: BLE001 - a bad event must never stop the agent
                pass
            return
        if mtype == "stdin":
            self._push_stdin(str(msg.get("data") or ""), bool(msg.get("eof")))
            return
        if mtype == "gone":               # ranks this one's service wrote to have ended (a knock's answer)
            cb = self.on_gone
            if cb is not None:
                try:
                    cb([r for r in msg.get("ranks") or () if isinstance(r, int)])
                except Exception:  # noqa: BLE001 - the agent thread must go on
                    pass
            return
        if mtype == "collect":            # a diagnosis through this host's node agent: this rank's part only
            threading.Thread(target=self._collect_here, args=(msg,), daemon=True,
                             name=f"planaria-collect-{self.rank}").start()
            return
        if mtype == "wake":               # a recovery started, or the spares are released: end a spare's sleep
            self._wake_spare(bool(msg.get("warm")))
            return
        if mtype == "knock":              # another rank wrote to this one's localization service
            with self._knock_lock:
                cb = self._on_knock
                if cb is None:
                    self._knock_early = True
            if cb is not None:
                cb()
            return
        mid = msg.get("id")
        if mid is not None:
            with self._lock:
                ev = self._pending.get(mid)
                if ev is not None:
                    self._answers[mid] = msg
            if ev is not None:
                ev.set()

    def _wake_spare(self, warm: bool) -> None:
        """End the spare's sleep on its wake pipe, with the byte that says what woke it
        (``planaria.runtime.sparewake.WARM`` or ``NEWS``); kept for the pipe when there is none yet."""
        from planaria.runtime.sparewake import NEWS, WARM
        byte = WARM if warm else NEWS
        with self._lock:
            fd = self._spare_w
            if fd is None:
                self._wake_early = NEWS if NEWS in self._wake_early + byte else WARM
        if fd is not None:
            try:
                os.write(fd, byte)
            except OSError:               # full (the waiter is already due to wake) or closed
                pass

    def _push_stdin(self, data: str, eof: bool) -> None:
        """Feed text to this rank's standard input (fd 0 becomes a pipe on the first push)."""
        if self._stdin_w is None:
            if not data and eof:
                return
            r, w = os.pipe()
            os.dup2(r, 0)
            os.close(r)
            os.set_blocking(w, False)      # never block the agent: text beyond the pipe's buffer
            self._stdin_w = w              # (64 KiB unread by the rank) is dropped
        try:
            if data:
                os.write(self._stdin_w, data.encode("utf-8"))
            if eof:
                os.close(self._stdin_w)
                self._stdin_w = -1
        except OSError:
            pass

    # --- collection tree ------------------------------------------------
    def _bind_tree(self) -> zmq.Socket | None:
        """The ROUTER the collection tree talks to: next to the controller's socket (ipc) or on TCP."""
        import zmq
        tree = self._ctx.socket(zmq.ROUTER)
        tree.setsockopt(zmq.LINGER, 0)
        try:
            if self.uri.startswith("ipc://"):
                base = os.path.dirname(self.uri[len("ipc://"):])
                tree.bind(f"ipc://{base}/a{self.rank}-{os.getpid()}.sock")
                self.endpoint = tree.getsockopt_string(zmq.LAST_ENDPOINT)
            else:
                from planaria.events import curve   # TCP only: hashlib and z85 stay out of a one-host rank's start
                curve.serve(tree, self._secret)
                port = tree.bind_to_random_port("tcp://*")
                self.endpoint = f"tcp://{_socket.gethostname()}:{port}"
        except zmq.ZMQError:
            tree.close(0)
            return None
        return tree

    def _on_tree(self, tree: zmq.Socket) -> None:
        import zmq
        while True:
            try:
                frames = tree.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = unpackb(frames[-1])
            except Exception:  # noqa: BLE001 - an undecodable request is skipped
                continue
            if not isinstance(msg, dict) or msg.get("tok") != self._secret or msg.get("type") != "collect":
                continue
            threading.Thread(target=self._collect, args=(frames[0], msg), daemon=True,
                             name=f"planaria-collect-{self.rank}").start()

    def _collect(self, ident: bytes, req: dict[str, Any]) -> None:
        """Answer a collection request: this rank's state plus its subtree's (bounded by the request's budget)."""
        from planaria.diagnose import collect
        ranks, eps = list(req.get("ranks") or [self.rank]), list(req.get("eps") or [])
        k, hop = int(req.get("k", collect.DEFAULT_K)), float(req.get("hop", collect.DEFAULT_HOP))
        budget = float(req.get("budget", hop))
        rounds, interval = int(req.get("rounds", 1)), float(req.get("interval", 0.2))
        result: dict[str, list] = {}

        def children() -> None:
            import zmq
            ctx = zmq.Context()
            try:
                result["parts"] = collect.ask_children(ctx, ranks[1:], eps[1:], self._secret, k, hop,
                                                       budget, rounds, interval)
            finally:
                ctx.term()
        t = threading.Thread(target=children, daemon=True, name=f"planaria-collect-{self.rank}-kids")
        t.start()
        own = self._own_part(rounds, interval)
        t.join(max(budget - hop, 0.0) + 0.5)
        parts = [own] + list(result.get("parts") or [{"missing": ranks[1:]}])
        merged = collect.merge_parts(parts)
        self._replies.append((ident, {"type": "part", "id": req.get("id"), "part": merged}))
        self._wake()

    def _own_part(self, rounds: int, interval: float) -> dict[str, Any]:
        """This rank's part of a collection (its state record and stacks), or why it has none."""
        from planaria.runtime import snapshot
        if self.dead is not None:
            return {"missing": [self.rank], "failed": {str(self.rank): self.dead}}
        try:
            return snapshot.take(self.rank, rounds, interval, status={"role": self.role, "backend": self.backend})
        except Exception as exc:  # noqa: BLE001 - report, never die in the agent
            return {"missing": [self.rank], "errors": [f"rank {self.rank}: {exc!r}"]}

    def _collect_here(self, req: dict[str, Any]) -> None:
        """Answer a node agent's collection request with this rank's part, over the agent channel."""
        try:
            rounds, interval = int(req.get("rounds", 1)), float(req.get("interval", 0.2))
        except (TypeError, ValueError):
            rounds, interval = 1, 0.2
        self._submit({"type": "part", "id": req.get("id"), "part": self._own_part(rounds, interval)})

    def _open(self) -> tuple[zmq.Socket | None, Any]:
        """The poller over the agent channel (or the DEALER socket to the controller), the
        collection tree's socket and the wake-up pipe: ``select.poll`` on a channel alone, else
        ZeroMQ's poller (``_IN``, ``_OUT``: its flags)."""
        chan, tree = self._chan, self._tree
        sock: zmq.Socket | None = None
        if self._ctx is None:
            self._IN, self._OUT = select.POLLIN, select.POLLOUT
            self._READ = select.POLLIN | select.POLLHUP | select.POLLERR   # a closed channel reads as EOF
            poller: Any = select.poll()
        else:
            import zmq
            self._IN, self._OUT = zmq.POLLIN, zmq.POLLOUT
            self._READ = zmq.POLLIN
            poller = zmq.Poller()
            if chan is None:
                sock = self._ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 1000)
                sock.setsockopt(zmq.SNDHWM, 100000)
                sock.setsockopt(zmq.RCVHWM, 100000)
                poller.register(sock, self._IN)
        self._chan_fd, self._chan_mask = -1, 0
        if chan is not None:
            self._chan_fd, self._chan_mask = chan.sock.fileno(), self._IN
            poller.register(self._chan_fd, self._chan_mask)
        if tree is not None:
            poller.register(tree, self._IN)
        poller.register(self._wake_r, self._IN)
        return sock, poller

    def _run(self) -> None:
        sock, poller = self._open()
        reader = Reader()
        try:
            if sock is not None:
                from planaria.events import curve   # CurveZMQ only on a TCP control address
                curve.client(sock, self._secret, self.uri)
                sock.connect(self.uri)
                self._send(sock, self._hello())
            self.last_reply = time.monotonic()
            self._last_turn = time.monotonic()
            ticker = threading.Thread(target=self._ticker, name=f"planaria-heartbeat-{self.rank}", daemon=True)
            ticker.start()
            while not self._stop.is_set():
                # block without a timeout (no timer armed per message): the ticker's wake-up
                # every heartbeat interval brings the periodic work
                for what, flags in poller.poll():
                    self._ready(what, flags, sock, poller, reader)
                self._after_poll(sock, poller)
                self._tick(sock)
            self._drain(sock)
        finally:
            self._close(sock)

    def _ready(self, what: Any, flags: int, sock: zmq.Socket | None, poller: Any, reader: Reader) -> None:
        """Serve one ready socket or descriptor of the poll."""
        chan, tree, wake_r = self._chan, self._tree, self._wake_r
        if what == self._chan_fd:
            assert chan is not None
            if flags & self._OUT:
                chan.flush()
            if flags & self._READ and not self._read_chan(chan, reader):
                poller.unregister(self._chan_fd)         # the controller is gone
                self._chan_fd = -1
        elif what is sock:
            assert sock is not None
            self._receive(sock)
        elif what == wake_r:
            try:
                os.read(wake_r, 4096)
            except OSError:
                pass
        elif what is tree:
            assert tree is not None
            self._on_tree(tree)

    def _after_poll(self, sock: zmq.Socket | None, poller: Any) -> None:
        """Send what other threads queued, and watch the channel for writing while it has pending bytes."""
        if self._queue:
            self._drain(sock)
        if self._replies and self._tree is not None:
            self._send_replies(self._tree)
        chan = self._chan
        if self._chan_fd >= 0 and chan is not None:
            want = self._IN | self._OUT if chan.pending else self._IN
            if want != self._chan_mask:
                self._chan_mask = want
                poller.register(self._chan_fd, want)

    def _tick(self, sock: zmq.Socket | None) -> None:
        """The periodic work: a heartbeat when the ticker asked for one, and the orphan check."""
        now = time.monotonic()
        if now - self._last_turn > 2.0:
            # this process was stopped (SIGSTOP, a debugger): the controller was not silent
            self.last_reply = now
        self._last_turn = now
        if not self._beat:
            return
        self._beat = False
        hb: dict[str, Any] = {"type": "hb", "rank": self.rank, "step": self.step, "t": time.time()}
        if self._role_news:
            self._role_news = False
            hb.update(role=self.role, logical=self.logical)
        if self.total != self._total_sent:
            hb["total"] = self._total_sent = self.total
        work = state.RT.work
        if work is not None:
            self._add_work(hb, work, now)
        self._send(sock, hb)
        if self.orphan_timeout > 0 and now - self.last_reply > self.orphan_timeout:
            os.kill(os.getpid(), _signal.SIGKILL)

    def _add_work(self, hb: dict[str, Any], work: Any, now: float) -> None:
        """Put the task runtime's counters in ``hb`` as ``cf`` [done, queued, moved, busy %] when they
        changed, looked at no more than once a second; busy % is the share of the runtime's slots
        busy since the last look (a rank that stays as it was sends nothing)."""
        at = self._work_at
        if at is not None and now - at[0] < WORK_EVERY:
            return
        try:
            done, queued, moved, busy, slots = work()
        except Exception:  # noqa: BLE001 - a provider must never stop the heartbeat
            return
        self._work_at = (now, float(busy))
        pct = 0 if at is None else round(100 * max(0.0, busy - at[1]) / (max(slots, 1) * (now - at[0])))
        row = [int(done), int(queued), int(moved), min(int(pct), 100)]
        if row != self._work_sent:
            hb["cf"] = self._work_sent = row

    def _close(self, sock: zmq.Socket | None) -> None:
        """Close the sockets, the channel and the tree's endpoint; end the ZeroMQ context."""
        chan, tree = self._chan, self._tree
        if sock is not None:
            sock.close()
        if chan is not None:
            self._close_chan(chan)
        if tree is not None:
            tree.close(0)
            if self.endpoint and self.endpoint.startswith("ipc://"):
                try:
                    os.unlink(self.endpoint[len("ipc://"):])
                except OSError:
                    pass
        if self._ctx is not None:
            self._ctx.term()

    def _read_chan(self, chan: Writer, reader: Reader) -> bool:
        """Handle what the controller wrote on the channel; False once the channel is closed."""
        while True:
            try:
                data = chan.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                data = b""
            if not data:
                chan.broken = True
                return False
            try:
                payloads = reader.feed(data)
            except FrameError:
                chan.broken = True
                return False
            for payload in payloads:
                self._on_reply(payload)
            if len(data) < 1 << 16:
                return True

    def _close_chan(self, chan: Writer, linger: float = 1.0) -> None:
        """Send what still waits (bounded, like a ZeroMQ linger), then close the channel."""
        deadline = time.monotonic() + linger
        while not chan.broken and not chan.flush() and time.monotonic() < deadline:
            select.select([], [chan.sock], [], max(0.0, min(0.05, deadline - time.monotonic())))
        chan.close()

    def _ticker(self) -> None:
        """Wake the agent thread every heartbeat interval (heartbeat, orphan guard)."""
        while not self._stop.wait(self.heartbeat):
            self._beat = True
            self._wake()

    def _receive(self, sock: zmq.Socket) -> None:
        """Handle every message waiting on the controller socket (no exception for the last one)."""
        import zmq
        while True:
            try:
                self._on_reply(sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            if not int(sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                return

    def _send_replies(self, tree: zmq.Socket) -> None:
        import zmq
        while self._replies:
            ident, msg = self._replies.popleft()
            try:
                tree.send_multipart([ident, self._pack(msg)], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
