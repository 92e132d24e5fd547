"""Per-process message log for run-time fault localization ([Gao 2024] §2.2 and §2.3).

When detection is on, the communicators of the process are *recorded*: their own methods
(``comm/base.py``, the ``ulfm`` and ``sim`` backends) keep, behind one test of ``_ml_on``,
the per-communicator count of collectives entered (``_ml_seq``) and the per-peer counts of
point-to-point messages sent and received (``_ml_sent``, ``_ml_recvd``; a status probe answers
"did you post the send I am waiting for?" from them), and report failure errors here
(``failed``; not inside ``base.own_calls``, planaria's recovery protocol); a collective whose
counts must agree on every rank also writes its buffer size and call site into the rank's flight
record (``comm/flight.py``), which outlives a crash. That is all
the hot path does: no wrapper, no clock read.
On ulfm, the rest of mpi4py's calls (thin wrappers generated in ``comm/ulfm.py``) count the same
way: collectives (``COLLECTIVES``, ``NONBLOCKING_COLLECTIVES``; persistent ones when started) on
entry, sends (``SENDS``) when posted, and the communicators they make (``MAKERS``) are recorded
as children; ``Sendrecv_replace`` counts its receive, and so do a message received through a
matched probe (``Mprobe`` then ``Message.Recv``), a persistent receive (``Recv_init``, each
completion after a ``Start``) and ``Isendrecv`` (when its request completes). On sim those calls
are planaria's own and count the same way.

What the application thread is blocked in is read from its stack when somebody asks
(``look``, ``current``): the outermost frame of a communication method of a recorded
communicator (``Comm`` operations, and ``Wait`` of a request, which keeps its peer and tag)
among the frames above the innermost application frame (the walk stops there),
with the method's arguments read from the frame's locals, and the call site (the innermost
application frame) from the same stack. A call's start is estimated by the looks: a call that
a look sees for the first time started after the previous look, and is taken to have started
half-way between the two (at most half of ``resolution``, the service's tick, before it was
first seen); later looks that find the same frame object report the same call. Timers and
slow-message detection are done by the localization service thread, which looks at every tick.
Calls nested inside another planaria call (object collectives built on buffer collectives) are
not reported separately: the outermost call is what the application is blocked in. Every
collective method counts on entry; an object collective counts once, its buffer collectives
(one or two) showing the same number (``Comm._ml_once`` between two), so that ranks in different
halves of one object collective are matched as being in the same call.

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

from planaria.comm import base as _base
from planaria.comm import flight as _flight
from planaria.comm.base import Comm, Request, rehook
from planaria.comm.errors import FailureError
from planaria.util.paths import shown

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any

#: point-to-point operations a thread can block in: name -> (peer parameter, tag parameter)
P2P: dict[str, tuple[str, str]] = {
    "Send": ("dest", "tag"), "send": ("dest", "tag"),
    "Ssend": ("dest", "tag"), "ssend": ("dest", "tag"),
    "Bsend": ("dest", "tag"), "bsend": ("dest", "tag"), "Rsend": ("dest", "tag"),
    "Recv": ("source", "tag"), "recv": ("source", "tag"),
    "Probe": ("source", "tag"), "probe": ("source", "tag"),
    "Mprobe": ("source", "tag"), "mprobe": ("source", "tag"),
    "Sendrecv": ("source", "recvtag"), "sendrecv": ("source", "recvtag"),
    "Sendrecv_replace": ("source", "recvtag"),
}
#: mpi4py's sending calls (blocking or not) whose message the log counts when it is posted
SENDS = frozenset({"Ssend", "ssend", "Bsend", "bsend", "Rsend", "Issend", "issend", "Ibsend",
                   "ibsend", "Irsend", "Sendrecv_replace", "Isendrecv", "Isendrecv_replace"})
#: collectives (counted on entry): name -> the root parameter, or None when not rooted
COLLECTIVES: dict[str, str | None] = {
    "Barrier": None, "barrier": None,
    "Bcast": "root", "bcast": "root",
    "Reduce": "root", "reduce": "root",
    "Allreduce": None, "allreduce": None,
    "Gather": "root", "gather": "root", "Gatherv": "root",
    "Allgather": None, "allgather": None, "Allgatherv": None,
    "Scatter": "root", "scatter": "root", "Scatterv": "root",
    "Alltoall": None, "alltoall": None, "Alltoallv": None, "Alltoallw": None,
    "Scan": None, "scan": None, "Exscan": None, "exscan": None,
    "Reduce_scatter": None, "Reduce_scatter_block": None,
    "Neighbor_allgather": None, "Neighbor_allgatherv": None, "Neighbor_alltoall": None,
    "Neighbor_alltoallv": None, "Neighbor_alltoallw": None,
    "neighbor_allgather": None, "neighbor_alltoall": None,
    "agree": None, "shrink": None, "dup": None, "split": None,
    "Agree": None, "Shrink": None, "Dup": None, "Split": None, "Split_type": None, "Create": None,
    "Create_group": None, "Create_cart": None, "Create_graph": None, "Create_dist_graph": None,
    "Create_dist_graph_adjacent": None, "Sub": None, "Clone": None, "Dup_with_info": None,
}
#: mpi4py's calls that make a communicator from a recorded one (every member calls them): the
#: letter the new communicator's id gets (``child``); the same on both backends
MAKERS: dict[str, str] = {
    "Split_type": "t", "Create": "c", "Create_cart": "cart", "Create_graph": "graph",
    "Create_dist_graph_adjacent": "dga", "Create_dist_graph": "dg", "Sub": "sub",
    "Clone": "d", "Dup_with_info": "d",
}
#: the nonblocking collectives, counted when posted (their persistent ``..._init`` forms: when started)
NONBLOCKING_COLLECTIVES = frozenset(
    ["I" + n[0].lower() + n[1:] for n in COLLECTIVES if n[0].isupper() and n not in MAKERS
     and n not in ("Agree", "Shrink", "Dup", "Split", "Create_group", "Clone", "Dup_with_info")]
    + ["Iagree", "Ishrink", "Idup", "Idup_with_info"])
_WAITS = ("Wait", "wait")       # methods of a request: the operation is "Wait(<what posted it>)"
_now = time.monotonic
HISTORY = 64
MEMBERS_MAX = 4096
RESOLUTION = 0.25               # seconds: default bound on the gap between two looks (the service's tick)


class Call:
    """A call the application thread is blocked in: the method's frame, its name, the estimated start."""

    __slots__ = ("frame", "name", "start")

    def __init__(self, frame: Any, name: str, start: float) -> None:
        self.frame, self.name, self.start = frame, name, start


class MsgLog:
    """What this process's application thread is doing in MPI, and what it has exchanged."""

    def __init__(self) -> None:
        self.failures: deque[tuple] = deque(maxlen=HISTORY)  # (time, name, comm_id, failed world ranks, site)
        self.comms: weakref.WeakValueDictionary[str, Comm] = weakref.WeakValueDictionary()
        self.thread_id = threading.get_ident()
        self.slow: deque[tuple] = deque(maxlen=HISTORY)   # (name, comm_id, peer world, tag, seconds, time, site)
        self.slow_after = float("inf")
        self.ioerrors: deque[tuple] = deque(maxlen=HISTORY)   # (time, what, site)
        self.total = {"slow": 0, "io": 0, "fail": 0}     # entries ever appended to slow / ioerrors / failures
        self.resolution = RESOLUTION
        self.injected_hang = ""              # set when the fault plan hangs this rank (status probes say so)
        self.wildcards: deque[tuple] = deque(maxlen=8)   # (comm id, source comm rank, world rank, tag, site)
        self._seen: Call | None = None       # the call the last look found (its frame is kept to know it again)
        self._looked: float | None = None    # when the last look was made (None: no look since a pause)
        self._lock = threading.Lock()

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

    # -- what the application thread is blocked in ---------------------------------------
    def look(self) -> Call | None:
        """The call of a recorded communicator the application thread is blocked in now, or None.

        The same ``Call`` object as at the previous look while it is the same call (same frame).
        """
        frame = sys._current_frames().get(self.thread_id)
        now = _now()
        codes = _codes()
        found = _outermost_above_app(frame, codes)
        del frame
        with self._lock:
            seen, prev = self._seen, self._looked
            self._looked = now
            if found is not None and seen is not None and seen.frame is found:
                return seen
            self._seen = None
            if found is None:
                return None
            name = _name(found, codes[found.f_code])
            if name is None:
                return None
            start = now if prev is None else now - min(now - prev, self.resolution) / 2
            self._seen = call = Call(found, name, start)
            return call

    def forget(self) -> None:
        """Drop the call being followed (detection paused: the next look starts afresh)."""
        with self._lock:
            self._seen = self._looked = None

    def current(self) -> dict[str, Any] | None:
        """The operation the application thread is blocked in, as a state-record ``op`` map (no site)."""
        call = self.look()
        return None if call is None else describe(call)

    def unmatched(self) -> dict[str, Any] | None:
        """A message waiting at this rank that the receive it is blocked in does not match, or None.

        For a global diagnosis only (``runtime/snapshot.py``): while the application thread waits
        in a receive from rank P with tag T, an ``Iprobe`` (any source, any tag; it matches nothing
        away from the application) on the same communicator finds a message from P with another
        tag, or from another rank when the receive names one: the program's mismatch, which the
        message counts alone would call a lost message. ``{"source": world rank, "tag": t}``, with
        ``"wildcard"`` (``took``, ``tag``, ``site``) when an earlier receive from any source on this
        communicator took the awaited rank's message with that tag (an ``ANY_SOURCE`` race)."""
        call = self.look()
        if call is None or call.name.startswith("Wait("):
            return None
        spec = P2P.get(call.name)
        if spec is None or spec[0] == "dest":     # a send waits for no message
            return None
        loc = call.frame.f_locals
        comm, peer, tag = loc.get("self"), loc.get(spec[0]), loc.get(spec[1])
        raw = getattr(comm, "_c", None)
        if raw is None or not isinstance(peer, int) or not isinstance(tag, int):
            return None
        from mpi4py import MPI          # not at the top: the diagnosis imports this module outside MPI
        st = MPI.Status()
        try:
            # the awaited rank's messages first: one of them behind another rank's early message
            # is what the receive does not match (a tag mismatch); none there, with the awaited
            # rank's sends counted, is a lost message, whatever other rank's message waits here
            if not (peer >= 0 and raw.Iprobe(peer, MPI.ANY_TAG, st)) and not raw.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
                return None
        except Exception:  # noqa: BLE001 - revoked or freed: nothing to say
            return None
        src, got = st.Get_source(), st.Get_tag()
        if (peer < 0 or src == peer) and (tag < 0 or got == tag):
            return None        # it matches: about to be received
        out: dict[str, Any] = {"source": _world(comm, src), "tag": got, "bytes": st.Get_count(MPI.BYTE)}
        cid = getattr(comm, "_ml_id", "?")
        for w_cid, w_src, w_world, w_tag, w_site in reversed(self.wildcards):
            if w_cid == cid and w_src == peer and src != peer and w_tag == got:
                # an earlier receive from any source took the awaited rank's message with the tag
                # of the one left over: that receive matched the wrong sender
                out["wildcard"] = {"took": w_world, "tag": w_tag, "site": w_site}
                break
        return out

    # -- state for probes and collection ---------------------------------------------
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
                ranks = c.world_ranks()
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
            return c.world_ranks()
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


def describe(call: Call) -> dict[str, Any]:
    """A call as a state-record ``op`` map: name, kind, comm, peer (world rank), tag, size, seq, since."""
    f = call.frame
    loc = f.f_locals
    obj = loc.get("self")
    name, peer, tag, seq, size = call.name, None, None, None, 0
    if name.startswith("Wait("):
        comm = getattr(obj, "_comm", None)
        if name[5:-1] in NONBLOCKING_COLLECTIVES:
            kind, seq = "coll", getattr(comm, "_ml_seq", None)
        else:
            kind = "p2p"
            peer, tag = getattr(obj, "_peer", None), getattr(obj, "_tag", None)
            size = _flight.size(getattr(obj, "_buf", None))
    else:
        comm = obj
        code = f.f_code
        if code.co_argcount > 1:
            size = _flight.size(loc.get(code.co_varnames[1]))
        elif "args" in loc and "kwargs" in loc:          # a generic wrapper: bind to mpi4py's signature
            loc = arguments(name, loc["args"], loc["kwargs"])
            size = _flight.size(next(iter(loc.values()), None))
        spec = P2P.get(name)
        if spec is not None:
            kind = "p2p"
            peer, tag = loc.get(spec[0]), loc.get(spec[1])
        else:
            kind = "coll"
            root = COLLECTIVES.get(name)
            if root is not None:
                peer = loc.get(root, 0)
            seq = getattr(comm, "_ml_seq", None)
    return {"name": name, "kind": kind, "comm": getattr(comm, "_ml_id", "?"), "peer": _world(comm, peer),
            "tag": tag if isinstance(tag, int) and tag >= 0 else None, "size": size,
            "seq": seq, "since": round(_now() - call.start, 6)}


_SIGNATURES: dict[str, Any] = {}


def arguments(name: str, args: Any, kwargs: Any) -> dict[str, Any]:
    """The arguments of mpi4py's method ``name`` as ``{parameter: value}`` (without ``self``); {} when they do not bind."""
    sig = _SIGNATURES.get(name)
    if sig is None:
        from mpi4py import MPI          # not at the top: the diagnosis imports this module outside MPI
        for cls in (MPI.Intracomm, MPI.Cartcomm, MPI.Graphcomm, MPI.Distgraphcomm, MPI.Intercomm):
            fn = getattr(cls, name, None)
            if fn is not None:
                try:
                    import inspect      # on first use: ast and dis stay out of a rank's start
                    sig = _SIGNATURES[name] = inspect.signature(fn)
                except (TypeError, ValueError):
                    return {}
                break
        else:
            return {}
    try:
        bound = sig.bind(None, *args, **kwargs)
    except TypeError:
        return {}
    bound.apply_defaults()
    out = dict(bound.arguments)
    out.pop(next(iter(sig.parameters)), None)
    return out


# -- reading the stack ----------------------------------------------------------------------
_CODES: tuple[int, dict[Any, str]] = (-1, {})


def _subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def _codes() -> dict[Any, str]:
    """Code object -> method name, for the operation methods of every loaded ``Comm`` and ``Request`` class.

    Rebuilt only when a class has been defined since the last build (``base.CLASSES_DEFINED``).
    """
    global _CODES
    epoch = _base.CLASSES_DEFINED
    if epoch == _CODES[0]:
        return _CODES[1]
    comms, reqs = _subclasses(Comm), _subclasses(Request)
    out: dict[Any, str] = {}
    for classes, names in ((comms, tuple(P2P) + tuple(COLLECTIVES)), (reqs, _WAITS)):
        for cls in classes:
            for name in names:
                fn = cls.__dict__.get(name)
                code = getattr(fn, "__code__", None)
                if code is not None:
                    out[code] = name
    _CODES = (epoch, out)
    return out


_APP_CODE: dict[Any, bool] = {}      # code object -> is_app_file of its file (a look's walk asks per frame)
_APP_CODE_MAX = 1 << 14


def _outermost_above_app(frame: Any, codes: dict[Any, str]) -> Any:
    """The outermost operation frame between ``frame`` and the innermost application frame, or None.

    Operation methods do not call application code, so the call the thread is blocked in sits
    above (inside) its innermost application frame: the walk stops there instead of going down
    the whole stack (each frame it visits is materialized, which made the full walk most of a
    service tick's cost). One exception, by design: inside a user function that an object
    reduction calls, the thread is computing, and is reported so.
    """
    return _walk_to_app(frame, codes)[0]


def _walk_to_app(frame: Any, codes: dict[Any, str]) -> tuple[Any, Any]:
    """From ``frame`` outwards to the innermost application frame: (the outermost operation frame
    on the way or None, that application frame or None when there is none)."""
    found = None
    app = _APP_CODE
    while frame is not None:
        code = frame.f_code
        if code in codes:
            found = frame
        else:
            is_app = app.get(code)
            if is_app is None:
                if len(app) >= _APP_CODE_MAX:
                    app.clear()
                is_app = app[code] = is_app_file(code.co_filename)
            if is_app:
                return found, frame
        frame = frame.f_back
    return found, None


def _op_and_site(frame: Any, codes: dict[Any, str]) -> tuple[Any, str | None]:
    """What a failure record names, in one walk from ``frame`` outwards that stops at the innermost
    application frame: the outermost operation frame below it (``_outermost_above_app``) and the
    call site (``call_site``), instead of a walk of the whole stack and a second one for the site."""
    op, app = _walk_to_app(frame, codes)
    if app is None:                       # no application frame: the innermost one outside comm
        return op, call_site(frame)
    code = app.f_code
    return op, f"{shown(code.co_filename)}:{app.f_lineno} in {code.co_name}"


def _name(frame: Any, method: str) -> str | None:
    """The operation of an operation frame (``Wait(Irecv)`` for a request), None when its communicator is not recorded."""
    obj = frame.f_locals.get("self")
    if method in _WAITS:
        op = getattr(obj, "_op", None)
        comm = getattr(obj, "_comm", None)
        return f"Wait({op})" if op is not None and getattr(comm, "_ml_on", False) else None
    return method if getattr(obj, "_ml_on", False) else None


_INFRA = tuple(f"/planaria/{p}/" for p in ("comm", "runtime", "localize", "inject", "checkpoint",
                                              "recovery", "launch", "diagnose"))


def is_app_file(filename: str) -> bool:
    """True for application code: not planaria's infrastructure (its demo and benchmark programs count as applications)."""
    fn = filename.replace("\\", "/")
    # a Cython source (.pyx: mpi4py's methods) is never the program's own
    return not fn.startswith("<") and not fn.endswith(".pyx") and not any(p in fn for p in _INFRA)


def call_site(frame: Any) -> str | None:
    """The innermost application frame (see ``is_app_file``) from ``frame`` outwards, as ``file:line in func``."""
    inside = None
    while frame is not None:
        fn = frame.f_code.co_filename
        if is_app_file(fn):
            return f"{shown(fn)}:{frame.f_lineno} in {frame.f_code.co_name}"
        if inside is None and "/planaria/comm/" not in fn.replace("\\", "/"):
            inside = f"{shown(fn)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return inside


# -- recording ------------------------------------------------------------------------------
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
    _flight.open_here()
    _adopt(comm, "world")
    return _LOG


def set_active(active: bool) -> None:
    """Switch recording on or off for every communicator known so far.

    For measuring the cost of detection within one job: off, the communicators' methods do no
    more than in a job without detection (one test of ``_ml_on``). Communicators created while
    recording is off are not recorded later.
    """
    if _LOG is None:
        return
    for c in list(_LOG.comms.values()):
        c._ml_on = active
        rehook(c)
    if not active:
        _LOG.forget()


def failed(comm: Any, exc: BaseException) -> None:
    """Record a failure error a recorded communicator is about to raise (called by the backends)."""
    lg = _LOG
    if lg is None or not isinstance(exc, FailureError):
        return
    frame = sys._getframe(1)
    codes = _codes()
    op, site = _op_and_site(frame, codes)
    name = (_name(op, codes[op.f_code]) if op is not None else None) or _method(frame)
    ranks = sorted(getattr(exc, "ranks", None) or [])
    world = sorted(w for w in (_world(comm, r) for r in ranks) if w is not None)
    lg.push("fail", (time.time(), name, getattr(comm, "_ml_id", "?"), world, site))


def wildcard(comm: Comm, source: int, tag: int) -> None:
    """Record a completed receive from any source on a recorded communicator: the sender it took,
    the tag, and the program's call site (a source mismatch may start there)."""
    lg = _LOG
    if lg is not None:
        lg.wildcards.append((getattr(comm, "_ml_id", "?"), source, _world(comm, source), tag,
                             call_site(sys._getframe(1))))


def child(parent: Comm, new: Comm | None, kind: str, color: Any = None) -> None:
    """Record ``new``, made by ``parent``'s dup (``d``), shrink (``k``) or split (``s``; None for no color)."""
    parent._ml_kids += 1
    if new is not None and _LOG is not None:
        suffix = f".{kind}{parent._ml_kids}" + (f"c{color}" if kind == "s" else "")
        _adopt(new, parent._ml_id + suffix)


def _method(frame: Any) -> str:
    """The first public method name from ``frame`` outwards (a failure outside an operation method)."""
    while frame is not None:
        name = frame.f_code.co_name
        if name.isidentifier() and not name.startswith("_"):
            return name
        frame = frame.f_back
    return "?"


def _adopt(comm: Comm, cid: str) -> None:
    comm._ml_id = cid
    comm._ml_seq = 0
    comm._ml_kids = 0
    comm._ml_sent = [0] * comm.size      # per destination comm rank
    comm._ml_recvd = [0] * comm.size     # per source comm rank (completed receives)
    comm._fl = _flight.slot(cid)         # its flight-record slot (0: none)
    comm._ml_on = True
    rehook(comm)
    if _LOG is not None:
        _LOG.comms[cid] = comm


def _world(comm: Any, rank: Any) -> int | None:
    if not isinstance(rank, int) or rank < 0:
        return None
    try:
        return int(comm._world_of(rank))
    except Exception:  # noqa: BLE001 - freed communicator
        return None


class _Recorder:
    """This module's recording functions, as ``base.Recorder`` (``base`` cannot import this module)."""

    failed = staticmethod(failed)
    wildcard = staticmethod(wildcard)
    child = staticmethod(child)


_base.recorder = _Recorder()
