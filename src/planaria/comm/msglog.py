"""Per-process message log for run-time fault localization (paper 000 §2.2 and §2.3).

When detection is on, every ``Comm`` of the process is switched to a *monitored* subclass
whose methods record, before calling the backend, what the application thread is about to
wait for, and count completed point-to-point messages per peer (a status probe answers
"did you post the send I am waiting for?" from these counts).

The hot path is kept to a tuple, two attribute stores, one clock read and a list increment:
the call's arguments are stored as they are and turned into peer, tag and size only when
somebody asks (``current``); the call site is read from the blocked thread's frame, also
only when asked. Each wrapper is compiled with the wrapped method's own parameter list
(``_mirror``, ``_generate``), so no ``*args``/``**kwargs`` are packed and unpacked per call;
a method whose signature cannot be mirrored gets a generic wrapper. Timers and slow-message detection are done by the localization service
thread from what it sees here, not on the hot path. Calls nested inside another planaria
call (object collectives built on buffer collectives) are not recorded separately: the
outermost call is what the application is blocked in.

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

# name -> (kind, peer position, peer keyword, tag position, tag keyword, default tag); positions after self
_SPEC: dict[str, tuple] = {
    "Send": ("p2p", 1, "dest", 2, "tag", 0), "send": ("p2p", 1, "dest", 2, "tag", 0),
    "Recv": ("p2p", 1, "source", 2, "tag", -1), "recv": ("p2p", 0, "source", 1, "tag", -1),
    "Sendrecv": ("p2p", 4, "source", 5, "recvtag", -1), "sendrecv": ("p2p", 3, "source", 4, "recvtag", -1),
    "Wait(Isend)": ("p2p", 1, "dest", 2, "tag", 0), "Wait(isend)": ("p2p", 1, "dest", 2, "tag", 0),
    "Wait(Irecv)": ("p2p", 1, "source", 2, "tag", -1), "Wait(irecv)": ("p2p", 0, "source", 1, "tag", -1),
}
_SENDS = ("Send", "send")
_RECVS = ("Recv", "recv")
_BOTH = ("Sendrecv", "sendrecv")       # receive from argument (4|3), send to argument 1
_NONBLOCKING = {"Isend": (1, "dest", True), "isend": (1, "dest", True),
                "Irecv": (1, "source", False), "irecv": (0, "source", False)}
# collectives: (position, keyword) of the root argument, or None when not rooted
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
_now = time.monotonic
HISTORY = 64
MEMBERS_MAX = 4096


class MsgLog:
    """What this process's application thread is doing in MPI, and what it has exchanged."""

    def __init__(self) -> None:
        self.cur: tuple | None = None          # (name, comm, args, kwargs, t_start)
        self.failures: deque[tuple] = deque(maxlen=HISTORY)  # (time, name, comm_id, failed world ranks, site)
        self.comms: weakref.WeakValueDictionary[str, Comm] = weakref.WeakValueDictionary()
        self.thread_id = threading.get_ident()
        self.slow: deque[tuple] = deque(maxlen=HISTORY)   # (name, comm_id, peer world, tag, seconds, time, site)
        self.slow_after = float("inf")
        self.ioerrors: deque[tuple] = deque(maxlen=HISTORY)   # (time, what, site)
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
        return describe(cur)

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

    def members_of(self, cid: str) -> list[int]:
        """World ranks of the members of communicator ``cid`` (empty when unknown or very large)."""
        c = self.comms.get(cid)
        if c is None or c.size > MEMBERS_MAX:
            return []
        try:
            return [int(c._world_of(r)) for r in range(c.size)]
        except Exception:  # noqa: BLE001 - freed
            return []

    def _per_peer(self, attr: str) -> list[tuple[str, int, int]]:
        out = []
        for cid, c in list(self.comms.items()):
            counts = getattr(c, attr, None) or []
            for r, n in enumerate(counts):
                if n:
                    w = _world(c, r)
                    if w is not None:
                        out.append((cid, w, n))
        return out

    def sent_to(self, world_rank: int) -> list[dict[str, Any]]:
        """Messages this process has sent to ``world_rank``, per communicator."""
        return [{"comm": cid, "count": n} for cid, w, n in self._per_peer("_ml_sent") if w == world_rank]

    def received_from(self, world_rank: int) -> list[dict[str, Any]]:
        """Receives from ``world_rank`` completed so far, per communicator."""
        return [{"comm": cid, "count": n} for cid, w, n in self._per_peer("_ml_recvd") if w == world_rank]

    def p2p_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Point-to-point messages sent to and received from each world rank (keys are str ranks), all communicators."""
        sent: dict[str, int] = {}
        recvd: dict[str, int] = {}
        for attr, out in (("_ml_sent", sent), ("_ml_recvd", recvd)):
            for _cid, w, n in self._per_peer(attr):
                out[str(w)] = out.get(str(w), 0) + int(n)
        return sent, recvd

    def site(self) -> str | None:
        """``file:line in func`` where the application thread called into planaria (or computes)."""
        frame = sys._current_frames().get(self.thread_id)
        return call_site(frame) if frame is not None else None


def describe(cur: tuple) -> dict[str, Any]:
    """A recorded call as a state-record ``op`` map: name, kind, comm, peer (world rank), tag, size, seq, since."""
    name, comm, a, k, t0 = cur
    spec = _SPEC.get(name)
    peer = tag = seq = None
    if spec is not None:
        kind, ppos, pkey, tpos, tkey, deftag = spec
        peer = a[ppos] if len(a) > ppos else k.get(pkey, -1)
        tag = a[tpos] if len(a) > tpos else k.get(tkey, deftag)
    else:
        kind = "coll"
        root = _COLLECTIVES.get(name)
        if root is not None:
            peer = a[root[0]] if len(a) > root[0] else k.get(root[1], 0)
        seq = getattr(comm, "_ml_seq", None)
    return {"name": name, "kind": kind, "comm": getattr(comm, "_ml_id", "?"), "peer": _world(comm, peer),
            "tag": tag if isinstance(tag, int) and tag >= 0 else None, "size": _size(a[0]) if a else 0,
            "seq": seq, "since": round(time.monotonic() - t0, 6)}


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


def set_active(active: bool) -> None:
    """Switch recording on or off for every communicator known so far (their classes are swapped).

    For measuring the cost of detection within one job; communicators created while recording
    is off are not monitored later.
    """
    if _LOG is None:
        return
    for c in list(_LOG.comms.values()):
        cls = type(c)
        if active and not getattr(cls, "_ml_monitored", False):
            c.__class__ = _monitored(cls)
        elif not active and getattr(cls, "_ml_monitored", False):
            c.__class__ = cls.__bases__[0]


def _adopt(comm: Comm, cid: str) -> None:
    comm.__class__ = _monitored(type(comm))
    comm._ml_id = cid
    comm._ml_seq = 0
    comm._ml_kids = 0
    comm._ml_sent = [0] * comm.size      # per destination comm rank
    comm._ml_recvd = [0] * comm.size     # per source comm rank (completed receives)
    if _LOG is not None:
        _LOG.comms[cid] = comm


def _size(buf: Any) -> int:
    """Bytes of a buffer argument (numpy array or mpi4py ``[data, count, type]`` spec); 0 when unknown."""
    n = getattr(buf, "nbytes", None)
    if n is None and isinstance(buf, (list, tuple)) and buf:
        n = getattr(buf[0], "nbytes", None) or (len(buf[0]) if isinstance(buf[0], (bytes, bytearray)) else None)
    return int(n) if isinstance(n, int) else 0


def _world(comm: Any, rank: Any) -> int | None:
    if not isinstance(rank, int) or rank < 0:
        return None
    try:
        return int(comm._world_of(rank))
    except Exception:  # noqa: BLE001 - freed communicator
        return None


def _failed(lg: MsgLog, name: str, comm: Any, exc: FailureError) -> None:
    ranks = sorted(getattr(exc, "ranks", None) or [])
    world = sorted(w for w in (_world(comm, r) for r in ranks) if w is not None)
    lg.push("fail", (time.time(), name, comm._ml_id, world, call_site(sys._getframe(2))))


_NOKW: dict[str, Any] = {}     # the keyword arguments of a call made through a mirrored wrapper (never mutated)


def _mirror(fn: Callable, positions: tuple[tuple[int, str], ...] = ()) -> tuple[str, list[str], dict[str, Any]] | None:
    """The parameter list of ``fn`` after ``self`` as source, its names and its defaults, for a wrapper
    with the same signature (no ``*args``/``**kwargs`` to pack and unpack on every call: about half
    the wrapper's cost). None when ``fn`` has variadic or keyword-only parameters, or when a
    parameter the log reads (``positions``: index, expected name) is not where the spec says."""
    import inspect
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    decl, names, defaults = [], [], {}
    for i, prm in enumerate(params):
        if prm.kind not in (prm.POSITIONAL_ONLY, prm.POSITIONAL_OR_KEYWORD) or not prm.name.isidentifier() \
                or prm.name.startswith("_w_") or prm.name == "self":
            return None
        if prm.default is prm.empty:
            decl.append(prm.name)
        else:
            defaults[f"_w_d{i}"] = prm.default
            decl.append(f"{prm.name}=_w_d{i}")
        names.append(prm.name)
    if any(i >= len(names) or names[i] != want for i, want in positions):
        return None
    return ", ".join(decl), names, defaults


def _generate(name: str, fn: Callable, body: str, mirrored: tuple[str, list[str], dict[str, Any]],
              **bound: Any) -> Callable:
    """Compile a wrapper named ``name`` with ``fn``'s signature; ``body`` uses {args} (the arguments as
    a call list) and {tuple} (as a tuple); ``bound`` and the defaults are closed over."""
    decl, names, defaults = mirrored
    args = ", ".join(names)
    tup = "(" + args + ("," if len(names) == 1 else "") + ")"
    free = dict(bound, **defaults)
    src = (f"def _w_factory({', '.join(free)}):\n"
           f"    def {name}(self{', ' if decl else ''}{decl}):\n"
           + "".join(f"        {ln}\n" for ln in body.format(args=", " + args if args else "", tuple=tup).splitlines())
           + f"    return {name}\n")
    scope: dict[str, Any] = {}
    exec(compile(src, f"<planaria.comm.msglog {name}>", "exec"), globals(), scope)  # noqa: S102 - fixed templates
    call = scope["_w_factory"](**free)
    call.__doc__ = fn.__doc__
    return call


_P2P_BODY = """\
_w_lg = _LOG
if _w_lg.cur is not None:
    return _w_fn(self{args})
_w_lg.cur = (_w_name, self, {tuple}, _NOKW, _now())
try:
    _w_out = _w_fn(self{args})
except FailureError as _w_exc:
    _failed(_w_lg, _w_name, self, _w_exc)
    raise
finally:
    _w_lg.cur = None
"""
_COLL_BODY = """\
_w_lg = _LOG
if _w_lg.cur is not None:
    return _w_fn(self{args})
self._ml_seq += 1
_w_lg.cur = (_w_name, self, {tuple}, _NOKW, _now())
try:
    return _w_fn(self{args})
except FailureError as _w_exc:
    _failed(_w_lg, _w_name, self, _w_exc)
    raise
finally:
    _w_lg.cur = None
"""
_NONBLOCKING_BODY = """\
_w_req = _w_fn(self{args})
if _LOG.cur is not None:
    return _w_req
_w_peer = {peer}
if _w_peer.__class__ is not int or _w_peer >= len(self._ml_sent):
    _w_peer = -1
"""


def _wrap_p2p(name: str, fn: Callable) -> Callable:
    # The hot path of every monitored call: a tuple, two stores, one clock read, one increment.
    kind, ppos, pkey, _tpos, _tkey, _deftag = _SPEC[name]
    send, both = name in _SENDS, name in _BOTH
    now = time.monotonic
    mirrored = _mirror(fn, ((ppos, pkey),) + (((1, "dest"),) if both else ()))
    if mirrored is not None:
        # the call succeeded, so the peer is a valid rank, or negative (ANY_SOURCE, PROC_NULL)
        peer = mirrored[1][ppos]
        count = (f"if {peer} >= 0:\n    self._ml_{'sent' if send else 'recvd'}[{peer}] += 1\n"
                 + (f"if {mirrored[1][1]} >= 0:\n    self._ml_sent[{mirrored[1][1]}] += 1\n" if both else ""))
        return _generate(name, fn, _P2P_BODY + count + "return _w_out", mirrored, _w_fn=fn, _w_name=name)

    def call(self, *a, **k):  # type: ignore[no-untyped-def]
        lg = _LOG
        if lg.cur is not None:
            return fn(self, *a, **k)
        lg.cur = (name, self, a, k, now())
        try:
            out = fn(self, *a, **k)
        except FailureError as exc:
            _failed(lg, name, self, exc)
            raise
        finally:
            lg.cur = None
        # the call succeeded, so the peer is a valid rank, or negative (ANY_SOURCE, PROC_NULL)
        peer = a[ppos] if len(a) > ppos else k.get(pkey, -1)
        if send:
            if peer >= 0:
                self._ml_sent[peer] += 1
        else:
            if peer >= 0:
                self._ml_recvd[peer] += 1
            if both:
                dest = a[1] if len(a) > 1 else k.get("dest", -1)
                if dest >= 0:
                    self._ml_sent[dest] += 1
        return out
    call.__name__ = name
    call.__doc__ = fn.__doc__
    return call


def _wrap_nonblocking(name: str, fn: Callable, spec: tuple) -> Callable:
    ppos, pkey, is_send = spec
    wname = "Wait(" + name + ")"
    mirrored = _mirror(fn, ((ppos, pkey),))
    if mirrored is not None:
        tail = ("if _w_peer >= 0:\n    self._ml_sent[_w_peer] += 1\n"
                "return _MonReq(_w_req, self, _w_name, {tuple}, _NOKW, -1)" if is_send else
                "return _MonReq(_w_req, self, _w_name, {tuple}, _NOKW, _w_peer)")
        body = _NONBLOCKING_BODY.replace("{peer}", mirrored[1][ppos]) + tail
        return _generate(name, fn, body, mirrored, _w_fn=fn, _w_name=wname)

    def call(self, *a, **k):  # type: ignore[no-untyped-def]
        req = fn(self, *a, **k)
        if _LOG.cur is not None:
            return req
        peer = a[ppos] if len(a) > ppos else k.get(pkey, -1)
        if peer.__class__ is not int or peer >= len(self._ml_sent):
            peer = -1
        if is_send:
            if peer >= 0:
                self._ml_sent[peer] += 1
            return _MonReq(req, self, wname, a, k, -1)
        return _MonReq(req, self, wname, a, k, peer)
    call.__name__ = name
    call.__doc__ = fn.__doc__
    return call


def _wrap_coll(name: str, fn: Callable) -> Callable:
    child = _CHILDREN.get(name)
    now = time.monotonic
    if child is None:
        root = _COLLECTIVES.get(name)
        mirrored = _mirror(fn, (root,) if root is not None else ())
        if mirrored is not None:
            return _generate(name, fn, _COLL_BODY, mirrored, _w_fn=fn, _w_name=name)

    def call(self, *a, **k):  # type: ignore[no-untyped-def]
        lg = _LOG
        if lg.cur is not None:
            return fn(self, *a, **k)
        self._ml_seq += 1
        lg.cur = (name, self, a, k, now())
        try:
            out = fn(self, *a, **k)
        except FailureError as exc:
            _failed(lg, name, self, exc)
            raise
        finally:
            lg.cur = None
        if child is not None:
            self._ml_kids += 1
            if isinstance(out, Comm):
                suffix = f".{child}{self._ml_kids}"
                if child == "s":
                    suffix += f"c{a[0] if a else k.get('color', 0)}"
                _adopt(out, self._ml_id + suffix)
        return out
    call.__name__ = name
    call.__doc__ = fn.__doc__
    return call


class _MonReq(Request):
    """A request whose ``Wait`` is recorded like a blocking receive/send; a completed receive is counted once."""

    __slots__ = ("_r", "_comm", "_name", "_a", "_k", "_peer")

    def __init__(self, req: Request, comm: Comm, name: str, a: tuple, k: dict, peer: int) -> None:
        # peer: the source (communicator rank) a receive counts when it completes; -1 for sends,
        # wildcard sources and receives already counted
        self._r, self._comm, self._name, self._a, self._k, self._peer = req, comm, name, a, k, peer

    def Test(self) -> bool:
        done = self._r.Test()
        if done and self._peer >= 0:
            self._received()
        return done

    def Wait(self) -> None:
        lg = _LOG
        if lg is None or lg.cur is not None:
            self._r.Wait()
        else:
            lg.cur = (self._name, self._comm, self._a, self._k, _now())
            try:
                self._r.Wait()
            except FailureError as exc:
                _failed(lg, self._name, self._comm, exc)
                raise
            finally:
                lg.cur = None
        if self._peer >= 0:
            self._received()

    def _received(self) -> None:
        self._comm._ml_recvd[self._peer] += 1
        self._peer = -1

    def test(self) -> tuple[bool, Any]:
        done, value = self._r.test()
        if done and self._peer >= 0:
            self._received()
        return done, value

    def wait(self) -> Any:
        self.Wait()
        return self._r._value()

    def _value(self) -> Any:
        return self._r._value()

    def Cancel(self) -> None:
        self._r.Cancel()


_CLASSES: dict[type, type] = {}


def _monitored(cls: type) -> type:
    """``cls`` with every communication method recorded in the message log (cached)."""
    if getattr(cls, "_ml_monitored", False):
        return cls
    sub = _CLASSES.get(cls)
    if sub is not None:
        return sub
    ns: dict[str, Any] = {"_ml_monitored": True, "__doc__": cls.__doc__}
    for name in _SENDS + _RECVS + _BOTH:
        ns[name] = _wrap_p2p(name, getattr(cls, name))
    for name, spec in _NONBLOCKING.items():
        ns[name] = _wrap_nonblocking(name, getattr(cls, name), spec)
    for name in _COLLECTIVES:
        ns[name] = _wrap_coll(name, getattr(cls, name))
    sub = type(cls.__name__, (cls,), ns)
    sub.__module__ = cls.__module__
    _CLASSES[cls] = sub
    return sub
