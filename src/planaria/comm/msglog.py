"""Per-process message log for run-time fault localization (paper 000 §2.2 and §2.3).

When detection is on, every ``Comm`` of the process is switched to a *monitored* subclass
whose methods record, before calling the backend, what the application thread is about to
wait for: operation, communicator id, peer and tag, size, start time and, for collectives,
the per-communicator sequence number. Completed operations leave a short history (the
peer's "message log" a status probe asks for) and per-destination send counters ("did you
post the send I am waiting for?").

The recording is a handful of attribute stores per call; the call site is *not* captured
here but read from the blocked thread's frame when somebody asks (``snapshot``), so the
hot path stays cheap. Calls nested inside another planaria call (object collectives built
on buffer collectives) are not recorded separately: the outermost call is what the
application is blocked in.

Communicator ids are identical on every member without communication: ``world`` for the
world communicator, then ``.d<n>`` (n-th dup), ``.k<n>`` (n-th shrink), ``.s<n>c<color>``
(n-th split, color) appended to the parent's id.
"""
from __future__ import annotations

import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from planaria.comm.base import Comm, Request
from planaria.comm.errors import FailureError

# name -> (kind, index of the peer argument after self, keyword of the peer, index of tag, keyword of tag)
_P2P_SEND = {"Send": (1, "dest", 2, "tag"), "send": (1, "dest", 2, "tag")}
_P2P_RECV = {"Recv": (1, "source", 2, "tag"), "recv": (0, "source", 1, "tag")}
_P2P_BOTH = {"Sendrecv": (4, "source", 5, "recvtag"), "sendrecv": (3, "source", 4, "recvtag")}
_NONBLOCKING = {"Isend": (1, "dest", 2, "tag"), "isend": (1, "dest", 2, "tag"),
                "Irecv": (1, "source", 2, "tag"), "irecv": (0, "source", 1, "tag")}
# collectives: index/keyword of the root argument (None: not rooted)
_COLLECTIVES = {
    "Barrier": None, "barrier": None,
    "Bcast": (1, "root"), "bcast": (1, "root"),
    "Reduce": (3, "root"), "reduce": (2, "root"),
    "Allreduce": None, "allreduce": None,
    "Gather": (2, "root"), "gather": (1, "root"), "Gatherv": (2, "root"),
    "Allgather": None, "allgather": None, "Allgatherv": None,
    "Scatter": (2, "root"), "scatter": (1, "root"), "Scatterv": (2, "root"),
    "Alltoall": None, "alltoall": None, "Alltoallv": None,
    "agree": None, "shrink": None, "dup": None, "split": None,
}
_CHILDREN = {"dup": "d", "shrink": "k", "split": "s"}
HISTORY = 64
MEMBERS_MAX = 4096


class MsgLog:
    """What this process's application thread is doing in MPI, and what it recently did."""

    def __init__(self) -> None:
        self.cur: tuple | None = None          # (name, kind, comm, peer, tag, size, seq, t_start)
        self.sent: dict[tuple[str, int], list] = {}       # (comm_id, dest comm rank) -> [count, last tag, last time]
        self.recvd: dict[tuple[str, int], int] = {}       # (comm_id, source comm rank) -> receives completed
        self.failures: deque[tuple] = deque(maxlen=HISTORY)  # (time, name, comm_id, failed world ranks, site)
        self.comms: weakref.WeakValueDictionary[str, Comm] = weakref.WeakValueDictionary()
        self.thread_id = threading.get_ident()
        self.t_exit = time.monotonic()                     # when the application last left an operation
        self.slow: deque[tuple] = deque(maxlen=HISTORY)   # (name, comm_id, peer world, tag, seconds, time, site)
        self.slow_after = float("inf")
        self.ioerrors: deque[tuple[float, str]] = deque(maxlen=HISTORY)
        self.total = {"slow": 0, "io": 0, "fail": 0}     # entries ever appended to slow / ioerrors / failures

    def push(self, which: str, item: tuple) -> None:
        """Append to ``slow``, ``io`` (ioerrors) or ``fail`` (failures), counting so readers find new entries."""
        {"slow": self.slow, "io": self.ioerrors, "fail": self.failures}[which].append(item)
        self.total[which] += 1

    def since(self, which: str, seen: int) -> tuple[list[tuple], int]:
        """Entries of ``which`` appended after the first ``seen`` ones (those still kept), and the new total."""
        dq = {"slow": self.slow, "io": self.ioerrors, "fail": self.failures}[which]
        total = self.total[which]
        fresh = min(total - seen, len(dq))
        return (list(dq)[len(dq) - fresh:] if fresh > 0 else []), total

    # -- state for probes and collection ---------------------------------------------
    def current(self) -> dict[str, Any] | None:
        """The operation the application thread is blocked in, as a state-record ``op`` map (no site)."""
        cur = self.cur
        if cur is None:
            return None
        name, kind, comm, peer, tag, buf, seq, t0 = cur
        wpeer = None
        if isinstance(peer, int) and peer >= 0:
            try:
                wpeer = comm._world_of(peer)
            except Exception:  # noqa: BLE001 - a freed communicator
                wpeer = None
        return {"name": name, "kind": kind, "comm": getattr(comm, "_ml_id", "?"), "peer": wpeer,
                "tag": tag if isinstance(tag, int) and tag >= 0 else None, "size": _size(buf), "seq": seq,
                "since": round(time.monotonic() - t0, 6)}

    def colls(self) -> dict[str, int]:
        """Per communicator id: collectives entered so far."""
        return {cid: c._ml_seq for cid, c in list(self.comms.items())}

    def members(self) -> dict[str, list[int] | None]:
        """Per communicator id: world ranks of its members; None when they are all ranks in world order."""
        out: dict[str, list[int] | None] = {}
        world = self.comms.get("world")
        nworld = world.size if world is not None else -1
        for cid, c in list(self.comms.items()):
            if c.size > MEMBERS_MAX:
                out[cid] = None
                continue
            try:
                ranks = [int(c._world_of(r)) for r in range(c.size)]
            except Exception:  # noqa: BLE001 - freed
                continue
            out[cid] = None if (c.size == nworld and ranks == list(range(nworld))) else ranks
        return out

    def sent_to(self, world_rank: int) -> list[dict[str, Any]]:
        """What this process has sent to ``world_rank`` (per communicator): count, last tag, seconds ago."""
        out = []
        now = time.monotonic()
        for (cid, dest), (n, tag, t) in list(self.sent.items()):
            c = self.comms.get(cid)
            try:
                w = c._world_of(dest) if c is not None else None
            except Exception:  # noqa: BLE001
                w = None
            if w == world_rank:
                out.append({"comm": cid, "count": n, "tag": tag, "ago": round(now - t, 3)})
        return out

    def received_from(self, world_rank: int) -> list[dict[str, Any]]:
        """Receives from ``world_rank`` completed so far, per communicator."""
        out = []
        for (cid, src), n in list(self.recvd.items()):
            c = self.comms.get(cid)
            if c is not None and _world(c, src) == world_rank:
                out.append({"comm": cid, "count": n})
        return out

    def p2p_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Point-to-point messages sent to and received from each world rank (keys are str ranks), all communicators."""
        sent: dict[str, int] = {}
        recvd: dict[str, int] = {}
        for table, out in ((self.sent, sent), (self.recvd, recvd)):
            for (cid, r), v in list(table.items()):
                c = self.comms.get(cid)
                w = _world(c, r) if c is not None else None
                if w is not None:
                    out[str(w)] = out.get(str(w), 0) + int(v[0] if isinstance(v, list) else v)
        return sent, recvd

    def site(self) -> str | None:
        """``file:line in func`` where the application thread called into planaria, if it is in a call."""
        frame = sys._current_frames().get(self.thread_id)
        return call_site(frame) if frame is not None else None


_INFRA = tuple(f"/planaria/{p}/" for p in ("comm", "runtime", "localize", "inject", "checkpoint",
                                              "recovery", "launch", "diagnose"))


def is_app_file(filename: str) -> bool:
    """True for application code: not planaria's infrastructure (its demo and benchmark programs count as applications)."""
    fn = filename.replace("\\", "/")
    return not fn.startswith("<") and not any(p in fn for p in _INFRA)


def call_site(frame: Any) -> str | None:
    """The innermost application frame (see ``is_app_file``) from ``frame`` outwards, as ``file:line in func``."""
    inside = None
    while frame is not None:
        fn = frame.f_code.co_filename
        if is_app_file(fn):
            return f"{fn}:{frame.f_lineno} in {frame.f_code.co_name}"
        if inside is None and "/planaria/comm/" not in fn.replace("\\", "/"):
            inside = f"{fn}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return inside


_LOG: MsgLog | None = None


def log() -> MsgLog | None:
    """The process's message log, or None when detection is off."""
    return _LOG


def enable(comm: Comm, slow_after: float = float("inf")) -> MsgLog:
    """Start logging: ``comm`` (the world communicator) and every communicator derived from it."""
    global _LOG
    if _LOG is None:
        _LOG = MsgLog()
    _LOG.slow_after = slow_after
    _adopt(comm, "world")
    return _LOG


def _adopt(comm: Comm, cid: str) -> None:
    comm.__class__ = _monitored(type(comm))
    comm._ml_id = cid
    comm._ml_seq = 0
    comm._ml_kids = 0
    if _LOG is not None:
        _LOG.comms[cid] = comm


def _size(buf: Any) -> int:
    """Bytes of a buffer argument (numpy array or mpi4py ``[data, count, type]`` spec); 0 when unknown."""
    n = getattr(buf, "nbytes", None)
    if n is None and isinstance(buf, (list, tuple)) and buf:
        n = getattr(buf[0], "nbytes", None) or (len(buf[0]) if isinstance(buf[0], (bytes, bytearray)) else None)
    return int(n) if isinstance(n, int) else 0


def _arg(a: tuple, k: dict, pos: int, key: str, default: Any) -> Any:
    if len(a) > pos:
        return a[pos]
    return k.get(key, default)


def _world(comm: Any, rank: Any) -> int | None:
    if not isinstance(rank, int) or rank < 0:
        return None
    try:
        return int(comm._world_of(rank))
    except Exception:  # noqa: BLE001
        return None


def _slow(lg: MsgLog, name: str, comm: Any, peer: Any, tag: Any, dt: float) -> None:
    """Record a completed operation that took longer than ``slow_after`` (rare path: the call site is read here)."""
    lg.push("slow", (name, comm._ml_id, _world(comm, peer), tag, dt, time.time(), call_site(sys._getframe(2))))


def _failed(lg: MsgLog, name: str, comm: Any, exc: FailureError) -> None:
    ranks = sorted(getattr(exc, "ranks", None) or [])
    world = sorted(w for w in (_world(comm, r) for r in ranks) if w is not None)
    lg.push("fail", (time.time(), name, comm._ml_id, world, call_site(sys._getframe(2))))


def _count_send(lg: MsgLog, cid: str, dest: Any, tag: Any, t: float) -> None:
    ent = lg.sent.get((cid, dest))
    if ent is None:
        lg.sent[(cid, dest)] = [1, tag, t]
    else:
        ent[0] += 1
        ent[1] = tag
        ent[2] = t


def _wrap_p2p(name: str, fn: Callable, kind: str, spec: tuple) -> Callable:
    # The hot path of every monitored call: kept to attribute stores and one clock read on each side.
    ppos, pkey, tpos, tkey = spec
    is_send = name in _P2P_SEND
    both = name in _P2P_BOTH          # Sendrecv sends too: dest is argument 1, sendtag 2
    deftag = 0 if is_send else -1
    now = time.monotonic

    def call(self, *a, **k):  # type: ignore[no-untyped-def]
        lg = _LOG
        if lg.cur is not None:
            return fn(self, *a, **k)
        peer = a[ppos] if len(a) > ppos else k.get(pkey, -1)
        tag = a[tpos] if len(a) > tpos else k.get(tkey, deftag)
        t0 = now()
        lg.cur = (name, kind, self, peer, tag, a[0] if a else None, None, t0)
        try:
            out = fn(self, *a, **k)
        except FailureError as exc:
            _failed(lg, name, self, exc)
            raise
        finally:
            lg.cur = None
        lg.t_exit = t1 = now()
        if is_send:
            key = (self._ml_id, peer)
            ent = lg.sent.get(key)
            if ent is None:
                lg.sent[key] = [1, tag, t0]
            else:
                ent[0] += 1
                ent[1] = tag
                ent[2] = t0
        else:
            if both:
                _count_send(lg, self._ml_id, a[1] if len(a) > 1 else k.get("dest", -1),
                            a[2] if len(a) > 2 else k.get("sendtag", 0), t0)
            if peer.__class__ is int and peer >= 0:
                key = (self._ml_id, peer)
                lg.recvd[key] = lg.recvd.get(key, 0) + 1
        if t1 - t0 > lg.slow_after:
            _slow(lg, name, self, peer, tag, t1 - t0)
        return out
    call.__name__ = name
    call.__doc__ = fn.__doc__
    return call


def _wrap_nonblocking(name: str, fn: Callable, spec: tuple) -> Callable:
    ppos, pkey, tpos, tkey = spec
    is_send = name.lower() == "isend"

    wname = "Wait(" + name + ")"
    now = time.monotonic

    def call(self, *a, **k):  # type: ignore[no-untyped-def]
        req = fn(self, *a, **k)
        if _LOG.cur is not None:
            return req
        peer = a[ppos] if len(a) > ppos else k.get(pkey, -1)
        tag = a[tpos] if len(a) > tpos else k.get(tkey, 0 if is_send else -1)
        if is_send:
            _count_send(_LOG, self._ml_id, peer, tag, now())
        return _MonReq(req, self, wname, peer, tag)
    call.__name__ = name
    call.__doc__ = fn.__doc__
    return call


def _wrap_coll(name: str, fn: Callable, spec: tuple | None) -> Callable:
    child = _CHILDREN.get(name)

    rpos, rkey = spec if spec is not None else (None, None)
    now = time.monotonic

    def call(self, *a, **k):  # type: ignore[no-untyped-def]
        lg = _LOG
        if lg.cur is not None:
            return fn(self, *a, **k)
        root = -1 if rpos is None else (a[rpos] if len(a) > rpos else k.get(rkey, 0))
        self._ml_seq += 1
        t0 = now()
        lg.cur = (name, "coll", self, root, None, a[0] if a else None, self._ml_seq, t0)
        try:
            out = fn(self, *a, **k)
        except FailureError as exc:
            _failed(lg, name, self, exc)
            raise
        finally:
            lg.cur = None
        lg.t_exit = t1 = now()
        if child is not None and isinstance(out, Comm):
            self._ml_kids += 1
            suffix = f".{child}{self._ml_kids}"
            if child == "s":
                color = _arg(a, k, 0, "color", 0)
                suffix += f"c{color}"
            _adopt(out, self._ml_id + suffix)
        elif child is not None:
            self._ml_kids += 1
        dt = t1 - t0
        if dt > lg.slow_after:
            _slow(lg, name, self, root, None, dt)
        return out
    call.__name__ = name
    call.__doc__ = fn.__doc__
    return call


class _MonReq(Request):
    """A request whose ``Wait`` is recorded like a blocking receive/send."""

    __slots__ = ("_r", "_comm", "_name", "_peer", "_tag")

    def __init__(self, req: Request, comm: Comm, name: str, peer: Any, tag: Any) -> None:
        self._r, self._comm, self._name, self._peer, self._tag = req, comm, name, peer, tag

    def Test(self) -> bool:
        return self._r.Test()

    def Wait(self) -> None:
        lg = _LOG
        if lg is None or lg.cur is not None:
            self._r.Wait()
            return
        t0 = time.monotonic()
        lg.cur = (self._name, "p2p", self._comm, self._peer, self._tag, None, None, t0)
        try:
            self._r.Wait()
        except FailureError as exc:
            _failed(lg, self._name, self._comm, exc)
            raise
        finally:
            lg.cur = None
        lg.t_exit = t1 = time.monotonic()
        dt = t1 - t0
        if self._name in _RECV_WAITS and isinstance(self._peer, int) and self._peer >= 0:
            key = (self._comm._ml_id, self._peer)
            lg.recvd[key] = lg.recvd.get(key, 0) + 1
        if dt > lg.slow_after:
            _slow(lg, self._name, self._comm, self._peer, self._tag, dt)

    def test(self) -> tuple[bool, Any]:
        return self._r.test()

    def wait(self) -> Any:
        self.Wait()
        return self._r._value()

    def _value(self) -> Any:
        return self._r._value()

    def Cancel(self) -> None:
        self._r.Cancel()


_RECV_WAITS = ("Wait(Irecv)", "Wait(irecv)")
_CLASSES: dict[type, type] = {}


def _monitored(cls: type) -> type:
    """``cls`` with every communication method recorded in the message log (cached)."""
    if getattr(cls, "_ml_monitored", False):
        return cls
    sub = _CLASSES.get(cls)
    if sub is not None:
        return sub
    ns: dict[str, Any] = {"_ml_monitored": True, "__doc__": cls.__doc__}
    for table in (_P2P_SEND, _P2P_RECV, _P2P_BOTH):
        for name, spec in table.items():
            ns[name] = _wrap_p2p(name, getattr(cls, name), "p2p", spec)
    for name, spec in _NONBLOCKING.items():
        ns[name] = _wrap_nonblocking(name, getattr(cls, name), spec)
    for name, spec in _COLLECTIVES.items():
        ns[name] = _wrap_coll(name, getattr(cls, name), spec)
    sub = type(cls.__name__, (cls,), ns)
    sub.__module__ = cls.__module__
    _CLASSES[cls] = sub
    return sub
