"""The job controller: a ZeroMQ ROUTER that keeps the rank table and logs rank events.

Wire protocol (msgpack maps, every message carries ``tok`` = the job secret):

agent -> controller: ``hello`` {rank, pid, host, role, backend}, ``hb`` {rank, step},
``fail`` {rank, reason, id}, ``inject`` {rank, kind, detail}, ``event`` {rank, ...},
``bye`` {rank, code}, ``incident`` {rank, ...} (a localized fault), ``ps`` {} (returns the rank table),
``diagnose`` {k, hop, rounds, interval} (a tool asks for a global state collection; the reply
``diagnosed`` {state, report, ...} comes when the collection tree has answered or timed out).
controller -> agent: ``ack`` {id} for any message with an ``id``, ``hbok`` {} for heartbeats,
``ps`` {ranks: [rank records], t0} for ``ps``. Replies carry ``tok`` too.
"""
from __future__ import annotations

import hmac
import os
import queue
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq

from planaria.launch.jobdir import JobDir

LOST_REASON = "killed or crashed (no report)"
HEARTBEAT_SILENCE = 3.0
ACTIVE = ("starting", "running")
MAX_REFUSED_LOGGED = 1000
_UNIX_PATH_MAX = 100


def pid_alive(pid: int) -> bool | None:
    """True if ``pid`` exists, False if it is gone, None when that cannot be told."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return None
    return True


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
        self.requested = address or default_address(jobdir)
        self.t0 = time.time() if t0 is None else t0
        self.pid_check = pid_check
        self.uri: str | None = None
        self.ranks: dict[int, dict[str, Any]] = {}
        self.refused = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context | None = None
        self._outbox: queue.Queue[tuple[bytes, dict[str, Any]]] = queue.Queue()
        self._diagnosing = threading.Lock()

    # --- lifecycle -----------------------------------------------------
    def start(self, timeout: float = 10.0) -> str:
        """Bind the socket in the server thread, write ``control.uri``; return the bound URI."""
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
        if self._thread is not None:
            self._thread.join(timeout)
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

    def pids(self) -> list[int]:
        """Pids of all ranks that said hello."""
        with self._lock:
            return [int(v["pid"]) for v in self.ranks.values() if v.get("pid")]

    def sweep(self, final: bool = False, final_ok: bool = False) -> None:
        """Mark active ranks lost when their pid is gone or their heartbeat is silent.

        With ``final`` (mpiexec has exited) every active rank is settled: ``finished`` without
        a bye when ``final_ok`` (mpiexec exited 0), ``lost`` otherwise.
        """
        now = time.time()
        lost: list[dict[str, Any]] = []
        with self._lock:
            for info in self.ranks.values():
                if info["state"] not in ACTIVE:
                    continue
                gone: bool | None = None
                if self.pid_check and info.get("pid"):
                    alive = pid_alive(int(info["pid"]))
                    gone = None if alive is None else not alive
                if gone is None:
                    gone = now - info["last_hb"] > HEARTBEAT_SILENCE
                if final and final_ok:
                    info.update(state="finished", exit_code=0, end_time=now,
                                reason="exited without a bye")
                    continue
                if gone or final:
                    info.update(state="lost", fail_time=now, reason=LOST_REASON)
                    lost.append({"type": "lost", "rank": info["rank"], "pid": info.get("pid"),
                                 "reason": LOST_REASON, "t": now})
        for rec in lost:
            self.jobdir.append_event(rec)

    # --- server loop ----------------------------------------------------
    def _serve(self) -> None:
        ctx = self._ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
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
            sock.close()
            ctx.term()
            return
        self._ready.set()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        next_sweep = time.time() + 0.5
        try:
            while not self._stop.is_set():
                if poller.poll(100):
                    while True:
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._handle(sock, frames)
                while True:
                    try:
                        ident, reply = self._outbox.get_nowait()
                    except queue.Empty:
                        break
                    self._reply(sock, ident, reply)
                if time.time() >= next_sweep:
                    self.sweep()
                    next_sweep = time.time() + 0.5
        finally:
            sock.close(0)
            ctx.term()

    def _refuse(self, ident: bytes, why: str, mtype: Any = None) -> None:
        self.refused += 1
        if self.refused <= MAX_REFUSED_LOGGED:
            self.jobdir.append_event({"type": "refused", "t": time.time(), "peer": ident.hex(),
                                      "why": why, "msg_type": mtype})

    def _reply(self, sock: zmq.Socket, ident: bytes, msg: dict[str, Any]) -> None:
        msg["tok"] = self.secret.decode("utf-8")
        try:
            sock.send_multipart([ident, msgpack.packb(msg, use_bin_type=True)], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def _handle(self, sock: zmq.Socket, frames: list[bytes]) -> None:
        ident, payload = frames[0], frames[-1]
        try:
            msg = msgpack.unpackb(payload, raw=False)
        except Exception:  # noqa: BLE001 - anything undecodable is refused
            self._refuse(ident, "undecodable")
            return
        if not isinstance(msg, dict):
            self._refuse(ident, "not a map")
            return
        tok = msg.pop("tok", None)
        if isinstance(tok, str):
            tok = tok.encode("utf-8")
        if not isinstance(tok, bytes) or not hmac.compare_digest(tok, self.secret):
            self._refuse(ident, "bad token" if tok else "no token", msg.get("type"))
            return
        mtype = msg.get("type")
        now = time.time()
        if mtype == "ps":
            ranks = [v for _, v in sorted(self.table().items())]
            self._reply(sock, ident, {"type": "ps", "ranks": ranks, "t0": self.t0})
            return
        if mtype == "diagnose":
            threading.Thread(target=self._diagnose_for, args=(ident, msg), daemon=True,
                             name="planaria-diagnose").start()
            return
        self._update_table(msg, now)
        if mtype != "hb":
            rec = dict(msg)
            rec.setdefault("t", now)
            rec["t_recv"] = now
            self.jobdir.append_event(rec)
        if "id" in msg:
            self._reply(sock, ident, {"type": "ack", "id": msg["id"]})
        elif mtype == "hb":
            self._reply(sock, ident, {"type": "hbok"})

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
                info["last_hb"] = now
                info["step"] = msg.get("step")
                if info["state"] == "starting":
                    info["state"] = "running"
            elif mtype == "fail":
                if info["state"] != "failed":
                    info.update(state="failed", fail_time=now,
                                reason=str(msg.get("reason") or "failed"))
            elif mtype == "inject":
                info["injected"] = {"kind": msg.get("kind"), "detail": msg.get("detail"), "t": now}
                info["last_hb"] = now
            elif mtype == "bye":
                code = msg.get("code", 0)
                info.update(exit_code=code, end_time=now)
                if info["state"] in ACTIVE:
                    info["state"] = "finished"
            else:
                info["last_hb"] = now

    # --- global diagnosis ------------------------------------------------
    def _diagnose_for(self, ident: bytes, msg: dict[str, Any]) -> None:
        try:
            out = self.diagnose(k=int(msg.get("k") or 8), hop=float(msg.get("hop") or 1.0),
                                rounds=int(msg.get("rounds") or 0), interval=float(msg.get("interval") or 0.2))
            out["type"] = "diagnosed"
        except Exception as exc:  # noqa: BLE001 - the tool gets the reason
            out = {"type": "diagnosed", "error": f"{type(exc).__name__}: {exc}"}
        self._outbox.put((ident, out))

    def diagnose(self, k: int = 8, hop: float = 1.0, rounds: int = 0, interval: float = 0.2) -> dict[str, Any]:
        """Collect every rank's state through the agent tree, write the state file, run the offline analysis.

        ``rounds`` = 0 picks the hang filter's sample count from the number of threads. Returns
        paths and the report; one collection at a time (a second request waits for the first).
        """
        from planaria.diagnose.run import collect_and_analyze
        with self._diagnosing:
            return collect_and_analyze(self.jobdir, self.table(), self.secret.decode("utf-8"),
                                       k=k, hop=hop, rounds=rounds, interval=interval)
