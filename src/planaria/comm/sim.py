"""Simulated process failures with ULFM semantics on any MPI-3 library ([Bondarenko 2015]).

Each process carries an alive/failed attribute. A process that "fails" stops running
application code but stays inside MPI as a *zombie* until the job ends: it announces its
failure, swallows messages sent to it, and finalizes with everyone else, so a library
without fault tolerance never sees a real death.

How survivors learn of failures: every operation is posted non-blocking and progressed
in a loop that also drains a control channel (a private duplicate of COMM_WORLD, one
tag). The channel carries failure notices (F), revoke notices (R), end-of-job notices (B)
and agreement messages (A). One channel and one tag keep every pair of processes FIFO,
which the agreement below relies on.

Agreement (used by ``agree`` and ``shrink``): the lowest living member coordinates;
members send it their flag and what they know of failures; it decides and sends the
decision to all members in one burst. Failures are only ever injected at the entry of
a call (never inside an agreement or between agreement and group creation), and a dying
process sends its failure notice after anything it sent before, so a decision is seen
by everyone or by no one, and the next coordinator takes over cleanly.

Each method also keeps the message log's counters when its communicator is recorded (one test
of ``_ml_on`` otherwise; see ``comm/base.py``).

mpi4py's communicator API beyond planaria's own calls:

* Nonblocking collectives (``Iallreduce``, ``Iscan``, ``Ineighbor_*``...) and point-to-point
  calls (``Issend``, ``Ibsend``, ``Irsend``, ``Isendrecv``...) post the MPI call and return a
  request that *is* the MPI request (an ``MPI.Request`` subclass), so mpi4py's class calls take
  it and a completed one is falsy; its own ``Wait``/``Test``/``wait``/``test`` are failure-safe.
* Blocking collectives (``Scan``, ``Reduce_scatter``, ``Neighbor_*``...) and sends (``Ssend``,
  ``ssend``...) post the nonblocking form and wait in the failure-checking poll; ``Probe`` and
  ``Mprobe`` poll ``Iprobe``/``Improbe``. Persistent requests check at each ``Start``.
* Calls that make a communicator (``Clone``, ``Create``, ``Split_type``, ``Create_cart``,
  ``Create_graph``, ``Create_dist_graph(_adjacent)``, ``Sub``) and the persistent collectives'
  initializations block in MPI, so they first meet in a failure-safe barrier during which no
  failure is injected (``SimComm._sync``): either everyone raises, or everyone reaches the MPI
  call. ``Create_group``, called by the group's members only, meets in an agreement among them
  instead. A topology communicator is a SimComm answering its local queries (``Shift``, ``coords``...).
* The object ``neighbor_allgather``/``neighbor_alltoall`` are built from the buffer forms, as
  ``comm/base.py`` builds the other object collectives.
* Local calls (``Get_info``, ``Get_attr``, ``Cart_map``...) are the underlying communicator's.
  ``Set_errhandler`` is accepted and not applied (planaria's errors are raised whatever it is).

Refused (one-line ``NotImplementedError``), because they cannot be made failure-safe here:
``Create_intercomm``, ``Accept``, ``Connect``, ``Join``, ``Spawn``, ``Spawn_multiple``,
``Disconnect`` and ``Create_from_group`` (intercommunicators, processes or sessions beyond the
simulated world), ``Psend_init``/``Precv_init`` (partitioned requests), and the raw handle
(``handle``, ``fromhandle``, ``f2py``, ``fromint``: an MPI communicator rebuilt from it would
skip every check; ``toint`` and ``py2f`` answer -1, mpi4py's "no handle").

A SimComm is an ``MPI.Intracomm`` sharing its underlying communicator's handle, so mpi4py's
class-level calls take it (``MPI.Comm(comm)``, ``MPI.Comm.Compare(comm, ...)``). Those run
mpi4py's C code on the handle: local ones are exact, but one that waits for other processes
(``MPI.Comm.Barrier(comm)``, ``MPI.Message.probe(comm)``) skips the failure checks and can wait
for a zombie forever, as a call on the underlying communicator would. The method forms
(``comm.Barrier()``) are the failure-safe ones.
"""
from __future__ import annotations

import inspect
import time
import warnings
import weakref
import zlib
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from planaria._lazy import np
from mpi4py import MPI

from planaria.comm.base import Comm, Receiving, Request, _dumps, _offsets, _split, named
from planaria.comm.matched import Matched
from planaria.comm import errors as _errors
from planaria.comm import flight as _flight
from planaria.comm import recorded
from planaria.comm.errors import ProcFailedError, RevokedError

CTL_TAG = 32001
_PENDING = object()


def _backoff(n: int) -> None:
    """Spin for about a millisecond, then sleep a little longer each round (ranks often share cores).

    The spin is what lets a nonblocking collective of several rounds (Open MPI's ``Ireduce`` of
    1 MiB: about a thousand tests) complete at the library's pace: each round moves on only when
    the request is tested, so a 50 µs sleep between tests made a 0.3 ms reduction take 18 ms."""
    if n < 500:
        return
    time.sleep(5e-5 if n < 700 else (2e-4 if n < 2500 else 1e-3))


class SimWorld:
    """Process-wide simulation state: who failed, what is revoked, the control channel."""

    def __init__(self) -> None:
        self.ctl = MPI.COMM_WORLD.Dup()
        self.wrank = self.ctl.Get_rank()
        self.wsize = self.ctl.Get_size()
        self.failed: set[int] = set()          # world ranks
        self.revoked: set[str] = set()         # communicator ids
        self.bye: set[int] = set()
        self.sends: list[Any] = []             # control sends still in flight
        self.orphans: list[Any] = []           # requests given up after a failure (kept alive)
        self.boxes: dict[tuple[str, int], list[tuple]] = defaultdict(list)
        self.decided: set[tuple[str, int]] = set()     # member agreements this process coordinated and decided
        self.comms: dict[str, Any] = {}        # every communicator we are in: the zombie drains them
        self.pending: list[weakref.ref[_SimObjRecv]] = []   # object receives not yet matched, in posting order
        self.dead = False
        self.check: Callable[[], None] | None = None   # injection point (time triggers)

    # -- control channel -----------------------------------------------------------
    def post(self, dst: int, msg: tuple) -> None:
        self.sends.append(self.ctl.isend(msg, dst, CTL_TAG))

    def progress(self) -> None:
        """Drain the control channel and complete finished control sends."""
        ctl = self.ctl
        while True:
            m = ctl.improbe(MPI.ANY_SOURCE, CTL_TAG)
            if m is None:
                break
            msg = m.recv()
            kind = msg[0]
            if kind == "F":
                self.failed.add(msg[1])
            elif kind == "R":
                self.revoked.add(msg[1])
            elif kind == "B":
                self.bye.add(msg[1])
            elif kind == "A" and msg[3] == "X":
                self._withdrawn((msg[1], msg[2]), msg[5])
            elif kind == "A":
                self.boxes[(msg[1], msg[2])].append(msg[3:])
        if self.sends:
            self.sends = [r for r in self.sends if not r.Test()]

    def _withdrawn(self, key: tuple[str, int], members: tuple[int, ...]) -> None:
        """A member of a ``Create_group`` agreement saw its communicator revoked while it waited: if
        this process coordinates that agreement and has not decided it, decide "revoked" now for every
        member (itself included, should it enter later), since waiting could be for a member that
        never comes; once decided "go", the member gets that decision and joins the creation."""
        alive = [wr for wr in members if wr not in self.failed]
        if key in self.decided or not alive or alive[0] != self.wrank:
            return
        self.decided.add(key)
        decision = ("D", self.wrank, 0, tuple(sorted(f for f in self.failed if f in members)), False)
        for wr in members:
            if wr != self.wrank:
                self.post(wr, ("A", key[0], key[1]) + decision)
        self.boxes[key].append(decision)

    def match_pending(self, upto: _SimObjRecv | None = None, status: Any = None) -> None:
        """Match the pending object receives of every communicator, in posting order (``status``
        is ``upto``'s), as MPI matches posted receives while any call waits; forget the matched,
        cancelled and dropped ones."""
        keep = []
        for ref in self.pending:
            r = ref()
            if r is None or r._done:
                continue
            r._match(status if r is upto else None)
            if not r._done:
                keep.append(ref)
        self.pending = keep

    # -- failure and end of job ------------------------------------------------------
    def die(self) -> None:
        """Become a failed process: announce it, then serve MPI until the job ends (never returns to the app)."""
        if self.dead:
            return
        self.dead = True
        self.failed.add(self.wrank)
        for r in range(self.wsize):
            if r != self.wrank:
                self.post(r, ("F", self.wrank))
        self.wait_for_end(sink=True)

    def say_bye(self) -> None:
        """A living process has finished: tell the others, then wait until every process has finished or failed."""
        if self.dead:
            return
        for r in range(self.wsize):
            if r != self.wrank:
                self.post(r, ("B", self.wrank))
        self.bye.add(self.wrank)
        self.wait_for_end(sink=False)

    def wait_for_end(self, sink: bool) -> None:
        n = 0
        everyone = set(range(self.wsize))
        while True:
            self.progress()
            if sink:
                self._sink()
            if everyone <= (self.failed | self.bye) and not self.sends:
                return
            n += 1
            time.sleep(1e-4 if n < 100 else 2e-3)

    def _sink(self) -> None:
        """Receive and drop application messages sent to this failed process, so senders never block."""
        st = MPI.Status()
        for c in list(self.comms.values()):
            while True:
                m = c.improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, st)
                if m is None:
                    break
                m.Recv([bytearray(max(st.Get_count(MPI.BYTE), 1)), MPI.BYTE])


class _SimReq(Request, MPI.Request):
    """A request of a sim communicator: it *is* the MPI request (an ``MPI.Request`` subclass sharing its handle).

    Being the MPI request, mpi4py's class calls (``MPI.Request.Waitall``, ``waitany``, ``Testall``...)
    accept it and a completed request is falsy, as in mpi4py. Its own ``Test``/``Wait``/``test``/``wait``
    are the failure-safe ones: they progress the control channel and raise ``ProcFailedError`` or
    ``RevokedError`` instead of waiting for a zombie. mpi4py's class calls go straight to MPI: they
    work, but wait forever if a peer fails meanwhile (the request's own ``Wait`` does not).
    ``keep``: buffers held if the request is given up after a failure (see ``SimComm._orphan``).
    """

    __slots__ = ("_comm", "_peer", "_status", "_keep")

    def __new__(cls, req: Any, *args: Any, **kwargs: Any) -> _SimReq:
        return MPI.Request.__new__(cls, req)

    def __init__(self, req: Any, comm: SimComm, peer: int | None, status: Any = None, keep: tuple = ()) -> None:
        self._comm, self._peer, self._status, self._keep = comm, peer, status, keep

    def Test(self, status: Any = None) -> bool:
        if MPI.Request.Test(self, status if status is not None else self._status):
            return True
        self._comm._raise_if_broken(self._peer, self, self._keep)
        return False

    def Wait(self, status: Any = None) -> Literal[True]:
        self._comm._wait(self, self._peer, status if status is not None else self._status, self._keep)
        return True

    def test(self, status: Any = None) -> tuple[bool, Any]:
        """mpi4py's ``test``: (done, the received object of an object receive, else None)."""
        done, obj = MPI.Request.test(self, status)
        if not done:
            self._comm._raise_if_broken(self._peer, self, self._keep)
        return done, obj

    def wait(self, status: Any = None) -> Any:
        """mpi4py's ``wait``: the received object of an object receive, else None (failure-safe)."""
        def test() -> Any:
            done, obj = MPI.Request.test(self, status)
            return obj if done else _PENDING
        return self._comm._poll(test, self._peer, self, self._keep)

    def Cancel(self) -> None:
        try:
            MPI.Request.Cancel(self)
        except MPI.Exception:
            pass


class _SimLReq(_SimReq):
    """A request of a recorded communicator: what its ``Wait`` waits for, and a receive counted once done."""

    __slots__ = ("_op", "_tag", "_buf", "_count")

    def __init__(self, req: Any, comm: SimComm, peer: int | None, op: str, tag: int, buf: Any, count: int) -> None:
        # count: the source (communicator rank) a receive adds to when it completes; -1 for sends and wildcards
        self._comm, self._peer, self._status, self._keep = comm, peer, None, ()
        self._op, self._tag, self._buf, self._count = op, tag, buf, count

    def _counted(self) -> None:
        if self._count >= 0:
            self._comm._ml_recvd[self._count] += 1
            self._count = -1

    def Test(self, status: Any = None) -> bool:
        done = _SimReq.Test(self, status)
        if done:
            self._counted()
        return done

    def Wait(self, status: Any = None) -> Literal[True]:
        self._comm._wait(self, self._peer, status, self._keep)
        self._counted()
        return True

    def test(self, status: Any = None) -> tuple[bool, Any]:
        out = _SimReq.test(self, status)
        if out[0]:
            self._counted()
        return out

    def wait(self, status: Any = None) -> Any:
        obj = _SimReq.wait(self, status)
        self._counted()
        return obj


class _SimPreq(Receiving, _SimReq, MPI.Prequest):
    """A persistent request (``Send_init``, ``Recv_init``, ``Allreduce_init``...): ``Start`` is a call
    entry (injection point and failure checks); the waits are ``_SimReq``'s (peer None: a
    collective). A recorded communicator counts a send when started, a receive when completed,
    and a collective in ``_ml_seq`` when started."""

    __slots__ = ("_send", "_count")

    def __init__(self, req: Any, comm: SimComm, peer: int | None, send: bool, keep: tuple) -> None:
        self._comm, self._peer, self._status, self._keep = comm, peer, None, keep
        self._send, self._count = send, -1

    def Start(self) -> None:
        """Start the operation; a send that an injected message fault drops is not started (its
        waits then return at once, as for an inactive persistent request)."""
        comm, peer = self._comm, self._peer
        if comm._ml_on and peer is None:
            comm._ml_seq += 1
        comm._enter(peer)
        if not (self._send and comm._msgfault is not None and peer is not None and not comm._outgoing(peer)):
            MPI.Prequest.Start(self)
        if comm._ml_on and peer is not None and peer >= 0:
            if self._send:
                comm._ml_sent[peer] += 1
            else:
                self._count = peer

    def _received(self) -> None:
        if self._count >= 0:
            self._comm._ml_recvd[self._count] += 1
            self._count = -1


class _SimDone(_SimReq):
    """A request for work the call already did (``Idup``, ``Ishrink``): truthy until tested or
    waited, like a fresh mpi4py request."""

    __slots__ = ("_fresh",)

    def __new__(cls, *args: Any, **kwargs: Any) -> _SimDone:
        return MPI.Request.__new__(cls, MPI.REQUEST_NULL)

    def __init__(self, comm: SimComm) -> None:
        self._comm, self._peer, self._status, self._keep, self._fresh = comm, None, None, (), True

    def __bool__(self) -> bool:
        return self._fresh

    def Test(self, status: Any = None) -> bool:
        self._fresh = False
        return True

    def Wait(self, status: Any = None) -> Literal[True]:
        self._fresh = False
        return True

    def test(self, status: Any = None) -> tuple[bool, Any]:
        self._fresh = False
        return True, None

    def wait(self, status: Any = None) -> Any:
        self._fresh = False
        return None


class _SimAgree(Request):
    """``Iagree``'s request: the agreement advanced one step per ``Test``; the result written into the caller's flag."""

    __slots__ = ("_comm", "_step", "_flag", "_done")

    def __init__(self, comm: SimComm, step: Callable[[], Any], flag: memoryview) -> None:
        self._comm, self._step, self._flag, self._done = comm, step, flag, False

    def __bool__(self) -> bool:
        return not self._done

    def Test(self, status: Any = None) -> bool:
        if self._done:
            return True
        out = self._step()
        if out is _PENDING:
            return False
        self._done = True
        value, failed, err = out
        self._flag[0] = value
        if err:
            raise self._comm._agree_error(failed)
        return True

    def Wait(self, status: Any = None) -> bool:
        n = 0
        while not self.Test():
            n += 1
            _backoff(n)
        return True

    def Cancel(self) -> None:
        return None


class _SimObjRecv(Request):
    """``irecv_matched(source, tag)``: matched with a matched probe, so a message of any size is received.

    Not an MPI request (nothing is posted before the message is matched): mpi4py's class calls
    (``MPI.Request.waitany``...) do not take it; mpi4py's spelling ``irecv(buf, source, tag)`` gives
    one that is (``SimComm.irecv``, mpi4py's). The pending ones are matched in posting order whenever
    any communicator checks an operation (``SimWorld.match_pending``), as MPI matches posted
    receives: a message goes to the earliest posted receive that matches it, and a synchronous
    (or long) send to this process completes while the receive waits to be tested.
    """

    __slots__ = ("_comm", "_peer", "_tag", "_done", "_obj")
    _op = "irecv"

    def __init__(self, comm: SimComm, source: int, tag: int) -> None:
        self._comm, self._peer, self._tag = comm, source, tag
        self._done, self._obj = False, None
        comm._w.pending.append(weakref.ref(self))

    def __bool__(self) -> bool:
        return not self._done

    def _match(self, status: Any = None) -> None:
        """Receive the message if one matches now (never waits)."""
        comm = self._comm
        m = comm._c.improbe(self._peer, self._tag, status)
        if m is not None:
            self._obj, self._done = m.recv(status), True
            if comm._ml_on and self._peer >= 0:
                comm._ml_recvd[self._peer] += 1

    def _matched(self, status: Any) -> bool:
        if not self._done:
            self._comm._w.match_pending(self, status)
        return self._done

    def Test(self, status: Any = None) -> bool:
        if not self._matched(status):
            self._comm._raise_if_broken(self._peer, None)
        return self._done

    def Wait(self, status: Any = None) -> bool:
        if not self._done:
            self._comm._poll(lambda: True if self._matched(status) else _PENDING, self._peer, None)
        return True

    def test(self, status: Any = None) -> tuple[bool, Any]:
        done = self.Test(status)
        return done, (self._obj if done else None)

    def wait(self, status: Any = None) -> Any:
        self.Wait(status)
        return self._obj

    def _value(self) -> Any:
        return self._obj

    def Cancel(self) -> None:
        self._done = True


def _posted_rooted(post: Callable[..., Any]) -> Callable[[SimComm, Any, Any, int], None]:
    """How a recorded rooted collective completes on sim: the call entry, then mpi4py's nonblocking
    form ``post`` (``MPI.Comm.Igather``...) waited for with failure checks."""
    def complete(self: SimComm, sendbuf: Any, recvbuf: Any, root: int) -> None:
        self._enter(None)
        self._coll(post(self._c, sendbuf, recvbuf, root), sendbuf, recvbuf)
    return complete


def _posted(post: Callable[..., Any]) -> Callable[[SimComm, Any, Any], None]:
    """``_posted_rooted`` for a collective without a root."""
    def complete(self: SimComm, sendbuf: Any, recvbuf: Any) -> None:
        self._enter(None)
        self._coll(post(self._c, sendbuf, recvbuf), sendbuf, recvbuf)
    return complete


def _nonblocking(name: str) -> Callable[..., _SimReq]:
    """A SimComm method posting mpi4py's nonblocking collective ``name`` as a sim request.

    The request holds the call's arguments (its buffers) in case it is given up after a
    failure: mpi4py does not hold every nonblocking collective's buffers itself."""
    def call(self: SimComm, *args: Any, **kwargs: Any) -> _SimReq:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        req = getattr(self._c, name)(*args, **kwargs)
        if self._ml_on:              # the log reads what its Wait waits for (``Wait(Iallreduce)``)
            r = _SimLReq(req, self, None, name, -1, None, -1)
            r._keep = (args, kwargs)
            return r
        return _SimReq(req, self, None, keep=(args, kwargs))
    named(call, name)
    call.__doc__ = f"mpi4py's ``{name}``, failure-safe: its request raises instead of waiting for a failed member."
    return call


def _persistent(name: str, send: bool) -> Callable[..., _SimPreq]:
    """A SimComm method for mpi4py's persistent point-to-point ``name`` (``Send_init``...): a ``_SimPreq``."""
    key = "dest" if send else "source"

    def call(self: SimComm, buf: Any, *args: Any, **kwargs: Any) -> _SimPreq:
        got = dict(zip((key, "tag"), args, strict=False))   # fewer positional arguments than names
        for k, v in kwargs.items():
            if k in got or k not in (key, "tag"):
                raise TypeError(f"{name}() got an unexpected or repeated argument {k!r}")
            got[k] = v
        if send and key not in got:
            raise TypeError(f"{name}() missing required argument 'dest'")
        peer = got.get(key, MPI.ANY_SOURCE)
        tag = got.get("tag", 0 if send else MPI.ANY_TAG)
        return _SimPreq(getattr(self._c, name)(buf, peer, tag), self, peer, send, (buf,))
    named(call, name)
    call.__doc__ = f"mpi4py's ``{name}``: a persistent request whose ``Start`` and waits are failure-safe."
    return call


def _persistent_collective(name: str) -> Callable[..., _SimPreq]:
    """A SimComm method for mpi4py's persistent collective ``name`` (``Allreduce_init``...).

    MPI lets the initialization synchronize the members, so it comes after ``_sync`` (as the
    calls that make communicators do); its ``Start`` and waits are then failure-safe."""
    def call(self: SimComm, *args: Any, **kwargs: Any) -> _SimPreq:
        self._sync()
        return _SimPreq(getattr(self._c, name)(*args, **kwargs), self, None, False, (args, kwargs))
    named(call, name)
    call.__doc__ = f"mpi4py's ``{name}``: a persistent collective request whose ``Start`` and waits are failure-safe."
    return call


def _blocking(iname: str) -> Callable[..., None]:
    """A SimComm method for the blocking collective whose nonblocking form is ``iname``: posted, then waited for."""
    name = iname[1].upper() + iname[2:]

    def call(self: SimComm, *args: Any, **kwargs: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(getattr(self._c, iname)(*args, **kwargs), args, kwargs)
    named(call, name)
    call.__doc__ = f"mpi4py's ``{name}``: ``{iname}`` waited for with failure checks."
    return call


class SimComm(Comm, MPI.Intracomm):
    """Fault-tolerant communicator whose failures are simulated (works on any MPI-3 library).

    An ``MPI.Intracomm`` sharing the handle of the MPI communicator underneath, so mpi4py's
    class-level calls take it (``MPI.Comm(c)``, ``MPI.Comm.Compare(c, ...)``, its lock table);
    every public name of mpi4py's class that planaria does not implement is masked
    (``_mask_mpi_names``) so that it goes through ``__getattr__``'s choice, local or refused,
    never to an MPI call that would wait for a zombie."""

    backend = "sim"
    _freed = False

    if TYPE_CHECKING:
        # The names both bases define, as the type checker is to see them here: mpi4py's stubs
        # call group/is_inter/is_intra attributes (read-only properties in mpi4py, as in
        # base.Comm), and Dup/Shrink give this class, both a planaria and an mpi4py communicator.
        group: MPI.Group
        is_inter: bool
        is_intra: bool

        def Dup(self, info: Any = None) -> SimComm: ...

        def Shrink(self) -> SimComm: ...

    def __new__(cls, world: Any = None, mpi_comm: Any = None, *rest: Any, **kwargs: Any) -> SimComm:
        return MPI.Intracomm.__new__(cls, mpi_comm if isinstance(mpi_comm, MPI.Intracomm) else None)

    def __getattr__(self, name: str) -> Any:
        """The rest of mpi4py's communicator API.

        Local calls that never wait for another process (``_LOCAL``; on a topology communicator
        also its queries, ``_TOPO_LOCAL``) are the underlying communicator's. Any other name of
        mpi4py's communicator classes is a call that raises one line: handing it to the MPI
        library would wait forever for a zombie after a failure (see the module docstring)."""
        c = self.__dict__.get("_c", MPI.COMM_NULL)
        if name.startswith("_") or not (hasattr(MPI.Intracomm, name) or hasattr(type(c), name)):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
        if name in _LOCAL or name in _TOPO_LOCAL:
            return getattr(c, name)
        why = (f"Comm.{name} is not available on the sim backend (it cannot be made failure-safe there); "
               f"use the ulfm backend")
        if not inspect.isroutine(getattr(type(c), name, None) or getattr(MPI.Intracomm, name, None)):
            raise NotImplementedError(why)          # a property: refused on access

        def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(why)
        unavailable.__name__ = name
        return unavailable

    def __eq__(self, other: object) -> bool:
        """mpi4py's: the same MPI handle; a freed communicator equals ``MPI.COMM_NULL`` only."""
        if other is self:
            return True
        if not isinstance(other, MPI.Comm):
            return NotImplemented
        if self._freed or getattr(other, "_freed", False):
            return other == MPI.COMM_NULL if self._freed else False
        return MPI.Comm.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __bool__(self) -> bool:
        """False once freed, as mpi4py's communicators (the MPI handle is kept: see ``free``)."""
        return not self._freed

    __hash__ = object.__hash__

    def __init__(self, world: SimWorld, mpi_comm: Any, cid: str, members: list[int]) -> None:
        super().__init__(mpi_comm)
        self._w = world
        self._cid = cid
        self._members = members                       # world rank of each rank
        self._pos = {wr: i for i, wr in enumerate(members)}
        self._acked: set[int] = set()
        self._seq = 0                                  # agreement instances
        self._children = 0                             # dup/shrink counter, for child ids
        self._group_seq: dict[str, int] = {}           # Create_group calls per group, for their ids
        world.comms[cid] = mpi_comm

    def _world_of(self, rank: int) -> int:
        return self._members[rank]

    # -- failure checks ------------------------------------------------------------------
    def _dead(self) -> set[int]:
        failed = self._w.failed
        if not failed:
            return set()
        pos = self._pos
        return {pos[f] for f in failed if f in pos}

    def _raise_if_broken(self, peer: int | None, req: Any, keep: tuple = ()) -> None:
        """Raise RevokedError/ProcFailedError if the operation can no longer complete (ULFM rules)."""
        w = self._w
        if w.pending:
            w.match_pending()
        w.progress()
        if self._cid in w.revoked:
            self._orphan(req, peer is None, keep)
            raise self._ml_noted(RevokedError())
        if not w.failed:
            return
        dead = self._dead()
        if not dead:
            return
        if peer is None:                      # collective: any dead member breaks it ...
            if req is not None and MPI.Request.Test(req):
                return                        # ... unless its last part arrived before the death
            self._orphan(req, True, keep)
            raise self._failed(dead)
        if peer == MPI.ANY_SOURCE:
            unacked = dead - self._acked
            if unacked:
                self._orphan(req, False, keep)
                raise self._failed(unacked)
        elif peer in dead:
            self._orphan(req, False, keep)
            raise self._failed({peer})

    def _failed(self, ranks: set[int]) -> ProcFailedError:
        """The error to raise; observers (the runtime's relay) hear of the failed world ranks."""
        if _errors._observers:
            _errors.saw_failed(self._world_of(r) for r in ranks)
        return self._ml_noted(ProcFailedError(ranks))

    def _orphan(self, req: Any, collective: bool = False, keep: tuple = ()) -> None:
        """Give up on a request but keep it and its buffers alive; point-to-point ones are cancelled too.

        A given-up request may still complete later and write into its receive buffer, and
        mpi4py does not hold the buffers of every nonblocking collective (Iallgatherv with
        counts, for one), so ``keep`` holds them here. Cancelling a nonblocking collective is
        erroneous in MPI, so a collective request is only parked.
        """
        if req is None:
            return
        if not collective:
            try:
                MPI.Request.Cancel(req)
            except MPI.Exception:
                pass
        self._w.orphans.append((req, keep))

    def _enter(self, peer: int | None) -> None:
        """Entry of every operation: injection point, then ULFM checks."""
        w = self._w
        if w.check is not None:
            w.check()
        self._raise_if_broken(peer, None)

    def _poll(self, test: Callable[[], Any], peer: int | None, req: Any, keep: tuple = (),
              inject: bool = True) -> Any:
        """Call ``test`` until it returns something else than _PENDING, raising when the operation is broken.

        ``inject=False``: time-triggered failures are not fired while waiting (see ``_sync``)."""
        n = 0
        w = self._w
        while True:
            out = test()
            if out is not _PENDING:
                return out
            self._raise_if_broken(peer, req, keep)
            if inject and w.check is not None:
                w.check()
            n += 1
            _backoff(n)

    def _wait(self, req: Any, peer: int | None, status: Any = None, keep: tuple = ()) -> None:
        """Wait for an MPI request (or a ``_SimReq``: its MPI part is tested, not its failure-safe ``Test``)."""
        self._poll(lambda: None if MPI.Request.Test(req, status) else _PENDING, peer, req, keep)

    def _coll(self, req: Any, *keep: Any) -> None:
        """Wait for a nonblocking collective; ``keep``: its buffers, held if the request is given up."""
        self._wait(req, None, keep=keep)

    # -- point-to-point --------------------------------------------------------------------
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._enter(dest)
        if self._msgfault is None or self._outgoing(dest):
            self._wait(self._c.Isend(buf, dest, tag), dest)
        if self._ml_on and dest >= 0:           # a dropped message too
            self._ml_sent[dest] += 1

    def Recv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> None:
        self._enter(source)
        if source < 0 and self._ml_on and status is None:
            status = MPI.Status()               # the log counts a wildcard receive by its sender
        self._wait(self._c.Irecv(buf, source, tag), source, status, keep=(buf,))
        if self._ml_on:
            if source >= 0:
                self._ml_recvd[source] += 1
            else:
                self._ml_wildcard(status)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> _SimReq:
        self._enter(dest)
        if self._msgfault is not None and not self._outgoing(dest):
            req: Any = MPI.REQUEST_NULL
        else:
            req = self._c.Isend(buf, dest, tag)
        if self._ml_on:
            if dest >= 0:                       # counted when posted (a dropped message too)
                self._ml_sent[dest] += 1
            return _SimLReq(req, self, dest, "Isend", tag, buf, -1)
        return _SimReq(req, self, dest)

    def Irecv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> _SimReq:
        self._enter(source)
        req = self._c.Irecv(buf, source, tag)
        if self._ml_on:
            return _SimLReq(req, self, source, "Irecv", tag, buf, source if source >= 0 else -1)
        return _SimReq(req, self, source)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG, status: Any = None) -> None:
        self._enter(dest)
        rreq = self._c.Irecv(recvbuf, source, recvtag)
        if self._msgfault is None or self._outgoing(dest):
            self._wait(self._c.Isend(sendbuf, dest, sendtag), dest)
        self._wait(rreq, source, status, keep=(recvbuf,))
        if self._ml_on:
            self._ml_exchanged(dest, source)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._enter(dest)
        if self._msgfault is None or self._outgoing(dest):
            self._wait(self._c.isend(obj, dest, tag), dest)
        if self._ml_on and dest >= 0:
            self._ml_sent[dest] += 1

    def recv(self, buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
             status: Any = None) -> Any:
        """mpi4py's ``recv``: an object of any size (``buf`` is not needed here and not used; one
        other than None gives mpi4py's own deprecation warning)."""
        if buf is not None:
            warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=2)
        self._enter(source)
        c = self._c
        if source < 0 and self._ml_on and status is None:
            status = MPI.Status()

        def test() -> Any:
            m = c.improbe(source, tag, status)
            return _PENDING if m is None else m.recv(status)
        obj = self._poll(test, source, None)
        if self._ml_on:
            self._ml_received(source, status)
        return obj

    def isend(self, obj: Any, dest: int, tag: int = 0) -> _SimReq:
        self._enter(dest)
        if self._msgfault is not None and not self._outgoing(dest):
            req: Any = MPI.REQUEST_NULL
        else:
            req = self._c.isend(obj, dest, tag)
        if self._ml_on:
            if dest >= 0:
                self._ml_sent[dest] += 1
            return _SimLReq(req, self, dest, "isend", tag, None, -1)
        return _SimReq(req, self, dest)

    def irecv(self, buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> _SimReq:
        """mpi4py's ``irecv``: a receive posted at once into ``buf`` (None: mpi4py's default, a
        message of at most 32 KiB), an ``MPI.Request`` that mpi4py's class calls accept; its own
        ``Wait``/``Test`` are failure-safe. ``irecv_matched`` receives any size instead."""
        self._enter(source)
        req = self._c.irecv(buf, source, tag)
        if self._ml_on:
            return _SimLReq(req, self, source, "irecv", tag, None, source if source >= 0 else -1)
        return _SimReq(req, self, source, keep=(buf,))

    def irecv_matched(self, source: int | None = None, tag: int | None = None) -> Request:
        """Object receive of any size, matched by a probe (see ``_SimObjRecv`` and ``Comm.irecv_matched``)."""
        source = MPI.ANY_SOURCE if source is None else source
        self._enter(source)
        return _SimObjRecv(self, source, MPI.ANY_TAG if tag is None else tag)

    # -- buffer collectives: non-blocking MPI-3 collectives, progressed with failure checks --
    def Barrier(self) -> None:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        self._coll(self._c.Ibarrier())

    def Bcast(self, buf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
            _flight.note(self._fl, self._ml_seq, _flight.BCAST, buf)
        self._enter(None)
        self._coll(self._c.Ibcast(buf, root), buf)

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = None, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
            _flight.note(self._fl, self._ml_seq, _flight.REDUCE, sendbuf, recvbuf)
        self._enter(None)
        self._coll(self._c.Ireduce(sendbuf, recvbuf, MPI.SUM if op is None else op, root), sendbuf, recvbuf)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None:
        if self._ml_on:
            self._ml_seq += 1
            _flight.note(self._fl, self._ml_seq, _flight.ALLREDUCE, sendbuf, recvbuf)
        self._enter(None)
        self._coll(self._c.Iallreduce(sendbuf, recvbuf, MPI.SUM if op is None else op), sendbuf, recvbuf)

    Gather = recorded.rooted("Gather", _posted_rooted(MPI.Comm.Igather), _flight.GATHER)
    Gatherv = recorded.rooted("Gatherv", _posted_rooted(MPI.Comm.Igatherv))
    Allgather = recorded.to_all("Allgather", _posted(MPI.Comm.Iallgather), _flight.ALLGATHER)
    Allgatherv = recorded.to_all("Allgatherv", _posted(MPI.Comm.Iallgatherv))
    Scatter = recorded.rooted("Scatter", _posted_rooted(MPI.Comm.Iscatter), _flight.SCATTER, noted_recv=True)
    Scatterv = recorded.rooted("Scatterv", _posted_rooted(MPI.Comm.Iscatterv))
    Alltoall = recorded.to_all("Alltoall", _posted(MPI.Comm.Ialltoall), _flight.ALLTOALL)
    Alltoallv = recorded.to_all("Alltoallv", _posted(MPI.Comm.Ialltoallv))

    # -- the rest of mpi4py's point-to-point calls -------------------------------------------
    # Each posts the nonblocking MPI call and, for the blocking forms, waits for it in the
    # failure-checking poll, like Send/Recv above.
    def _send_nb(self, post: str, buf: Any, dest: int, tag: int) -> _SimReq:
        """Post ``self._c.<post>(buf, dest, tag)`` (a nonblocking send) as a sim request."""
        self._enter(dest)
        if self._msgfault is not None and not self._outgoing(dest):
            req: Any = MPI.REQUEST_NULL
        else:
            req = getattr(self._c, post)(buf, dest, tag)
        if self._ml_on:
            if dest >= 0:                       # counted when posted (a dropped message too)
                self._ml_sent[dest] += 1
            return _SimLReq(req, self, dest, post, tag, buf, -1)
        return _SimReq(req, self, dest, keep=(buf,))

    def _send_b(self, post: str, buf: Any, dest: int, tag: int) -> None:
        """A blocking send: ``self._c.<post>`` (its nonblocking form) waited for with failure checks."""
        self._enter(dest)
        if self._msgfault is None or self._outgoing(dest):
            self._wait(getattr(self._c, post)(buf, dest, tag), dest, keep=(buf,))
        if self._ml_on and dest >= 0:
            self._ml_sent[dest] += 1

    def Ssend(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._send_b("Issend", buf, dest, tag)

    def Bsend(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._send_b("Ibsend", buf, dest, tag)

    def Rsend(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._send_b("Irsend", buf, dest, tag)

    def ssend(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._send_b("issend", obj, dest, tag)

    def bsend(self, obj: Any, dest: int, tag: int = 0) -> None:
        self._send_b("ibsend", obj, dest, tag)

    def Issend(self, buf: Any, dest: int, tag: int = 0) -> _SimReq:
        return self._send_nb("Issend", buf, dest, tag)

    def Ibsend(self, buf: Any, dest: int, tag: int = 0) -> _SimReq:
        return self._send_nb("Ibsend", buf, dest, tag)

    def Irsend(self, buf: Any, dest: int, tag: int = 0) -> _SimReq:
        return self._send_nb("Irsend", buf, dest, tag)

    def issend(self, obj: Any, dest: int, tag: int = 0) -> _SimReq:
        return self._send_nb("issend", obj, dest, tag)

    def ibsend(self, obj: Any, dest: int, tag: int = 0) -> _SimReq:
        return self._send_nb("ibsend", obj, dest, tag)

    def Isendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                  source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG) -> _SimReq:
        """Nonblocking Sendrecv; its request waits on ``source`` (a send to a zombie is drained by it)."""
        self._enter(dest)
        self._raise_if_broken(source, None)
        if self._msgfault is not None and not self._outgoing(dest):
            req = self._c.Irecv(recvbuf, source, recvtag)          # the send is dropped
        else:
            req = self._c.Isendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag)
        if self._ml_on:
            if dest >= 0:
                self._ml_sent[dest] += 1
            return _SimLReq(req, self, source, "Isendrecv", recvtag, recvbuf, source if source >= 0 else -1)
        return _SimReq(req, self, source, keep=(sendbuf, recvbuf))

    def Isendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0, source: int = MPI.ANY_SOURCE,
                          recvtag: int = MPI.ANY_TAG) -> _SimReq:
        """Nonblocking Sendrecv_replace; its request waits on ``source``, like ``Isendrecv``'s."""
        self._enter(dest)
        self._raise_if_broken(source, None)
        req = self._post_sendrecv_replace(buf, dest, sendtag, source, recvtag)
        if self._ml_on:
            if dest >= 0:
                self._ml_sent[dest] += 1
            return _SimLReq(req, self, source, "Isendrecv_replace", recvtag, buf, source if source >= 0 else -1)
        return _SimReq(req, self, source, keep=(buf,))

    def Sendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0, source: int = MPI.ANY_SOURCE,
                         recvtag: int = MPI.ANY_TAG, status: Any = None) -> None:
        """MPI-4's Isendrecv_replace waited for with failure checks (MPI does the in-place copy)."""
        self._enter(dest)
        self._raise_if_broken(source, None)
        self._wait(self._post_sendrecv_replace(buf, dest, sendtag, source, recvtag), source, status, keep=(buf,))
        if self._ml_on:
            self._ml_exchanged(dest, source)

    def _post_sendrecv_replace(self, buf: Any, dest: int, sendtag: int, source: int, recvtag: int) -> Any:
        """MPI-4's Isendrecv_replace, or only its receive when an injected message fault drops the send."""
        if self._msgfault is not None and not self._outgoing(dest):
            return self._c.Irecv(buf, source, recvtag)
        return self._c.Isendrecv_replace(buf, dest, sendtag, source, recvtag)

    def Iprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> bool:
        self._enter(source)
        return bool(self._c.Iprobe(source, tag, status))

    def iprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> bool:
        return self.Iprobe(source, tag, status)

    def Probe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Literal[True]:
        """Wait for a matching message: Iprobe polled with failure checks."""
        self._enter(source)
        c = self._c
        return self._poll(lambda: True if c.Iprobe(source, tag, status) else _PENDING, source, None)

    def probe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Literal[True]:
        return self.Probe(source, tag, status)

    def Improbe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        """Matched probe: an ``MPI.Message`` or None. Receiving a matched message does not wait for
        its sender (a zombie keeps progressing MPI), so the message is mpi4py's own (a ``Matched``,
        which counts its receive, when the communicator is recorded)."""
        self._enter(source)
        st = status if status is not None or not self._ml_on else MPI.Status()
        return self._matched(self._c.Improbe(source, tag, st), st)

    def improbe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        self._enter(source)
        st = status if status is not None or not self._ml_on else MPI.Status()
        return self._matched(self._c.improbe(source, tag, st), st)

    def Mprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        """Wait for a matching message and match it: Improbe polled with failure checks."""
        self._enter(source)
        c = self._c
        st = status if status is not None or not self._ml_on else MPI.Status()

        def test() -> Any:
            m = c.Improbe(source, tag, st)
            return _PENDING if m is None else m
        return self._matched(self._poll(test, source, None), st)

    def mprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        self._enter(source)
        c = self._c
        st = status if status is not None or not self._ml_on else MPI.Status()

        def test() -> Any:
            m = c.improbe(source, tag, st)
            return _PENDING if m is None else m
        return self._matched(self._poll(test, source, None), st)

    def _matched(self, msg: Any, status: Any) -> Any:
        """A matched probe's message, counted when received if this communicator is recorded."""
        if msg is None or not self._ml_on or not msg:
            return msg
        return Matched(msg, self, status.Get_source())

    # -- persistent requests, the rest of mpi4py's collectives (made by the factories above) ----
    # Nonblocking collectives return a sim request (peer None: any failed member breaks it);
    # blocking ones post the nonblocking form and wait for it like Allreduce above.
    Send_init = _persistent("Send_init", True)
    Ssend_init = _persistent("Ssend_init", True)
    Bsend_init = _persistent("Bsend_init", True)
    Rsend_init = _persistent("Rsend_init", True)
    Recv_init = _persistent("Recv_init", False)

    Barrier_init = _persistent_collective("Barrier_init")
    Bcast_init = _persistent_collective("Bcast_init")
    Gather_init = _persistent_collective("Gather_init")
    Gatherv_init = _persistent_collective("Gatherv_init")
    Scatter_init = _persistent_collective("Scatter_init")
    Scatterv_init = _persistent_collective("Scatterv_init")
    Allgather_init = _persistent_collective("Allgather_init")
    Allgatherv_init = _persistent_collective("Allgatherv_init")
    Alltoall_init = _persistent_collective("Alltoall_init")
    Alltoallv_init = _persistent_collective("Alltoallv_init")
    Alltoallw_init = _persistent_collective("Alltoallw_init")
    Reduce_init = _persistent_collective("Reduce_init")
    Allreduce_init = _persistent_collective("Allreduce_init")
    Reduce_scatter_init = _persistent_collective("Reduce_scatter_init")
    Reduce_scatter_block_init = _persistent_collective("Reduce_scatter_block_init")
    Scan_init = _persistent_collective("Scan_init")
    Exscan_init = _persistent_collective("Exscan_init")
    Neighbor_allgather_init = _persistent_collective("Neighbor_allgather_init")
    Neighbor_allgatherv_init = _persistent_collective("Neighbor_allgatherv_init")
    Neighbor_alltoall_init = _persistent_collective("Neighbor_alltoall_init")
    Neighbor_alltoallv_init = _persistent_collective("Neighbor_alltoallv_init")
    Neighbor_alltoallw_init = _persistent_collective("Neighbor_alltoallw_init")

    Ibarrier = _nonblocking("Ibarrier")
    Ibcast = _nonblocking("Ibcast")
    Igather = _nonblocking("Igather")
    Igatherv = _nonblocking("Igatherv")
    Iscatter = _nonblocking("Iscatter")
    Iscatterv = _nonblocking("Iscatterv")
    Iallgather = _nonblocking("Iallgather")
    Iallgatherv = _nonblocking("Iallgatherv")
    Ialltoall = _nonblocking("Ialltoall")
    Ialltoallv = _nonblocking("Ialltoallv")
    Ialltoallw = _nonblocking("Ialltoallw")
    Ireduce = _nonblocking("Ireduce")
    Iallreduce = _nonblocking("Iallreduce")
    Ireduce_scatter = _nonblocking("Ireduce_scatter")
    Ireduce_scatter_block = _nonblocking("Ireduce_scatter_block")
    Iscan = _nonblocking("Iscan")
    Iexscan = _nonblocking("Iexscan")
    Ineighbor_allgather = _nonblocking("Ineighbor_allgather")
    Ineighbor_allgatherv = _nonblocking("Ineighbor_allgatherv")
    Ineighbor_alltoall = _nonblocking("Ineighbor_alltoall")
    Ineighbor_alltoallv = _nonblocking("Ineighbor_alltoallv")
    Ineighbor_alltoallw = _nonblocking("Ineighbor_alltoallw")
    Scan = _blocking("Iscan")
    Exscan = _blocking("Iexscan")
    Reduce_scatter = _blocking("Ireduce_scatter")
    Reduce_scatter_block = _blocking("Ireduce_scatter_block")
    Alltoallw = _blocking("Ialltoallw")
    Neighbor_allgather = _blocking("Ineighbor_allgather")
    Neighbor_allgatherv = _blocking("Ineighbor_allgatherv")
    Neighbor_alltoall = _blocking("Ineighbor_alltoall")
    Neighbor_alltoallv = _blocking("Ineighbor_alltoallv")
    Neighbor_alltoallw = _blocking("Ineighbor_alltoallw")

    def neighbor_allgather(self, sendobj: Any) -> list[Any]:
        """Object neighbor allgather of a topology communicator, built from the buffer forms (lengths,
        then pickled bytes), as ``comm/base.py`` builds the object collectives: mpi4py's own runs
        on a hidden duplicate communicator that no failure check reaches."""
        indegree, _ = self._degrees("neighbor_allgather")
        data = _dumps(sendobj)
        lengths = np.zeros(indegree, dtype=np.int64)
        self.Neighbor_allgather(np.array([len(data)], dtype=np.int64), lengths)
        self._ml_once()
        buf = bytearray(int(lengths.sum()))
        self.Neighbor_allgatherv([data, len(data), MPI.BYTE], [buf, (lengths, _offsets(lengths)), MPI.BYTE])
        return _split(self, buf, lengths)

    def neighbor_alltoall(self, sendobj: Any) -> list[Any]:
        """Object neighbor alltoall (``sendobj[i]`` to the i-th out-neighbor), built like ``neighbor_allgather``."""
        indegree, outdegree = self._degrees("neighbor_alltoall")
        if len(sendobj) != outdegree:
            raise ValueError(f"neighbor_alltoall needs a sequence of {outdegree} items (one per out-neighbor)")
        parts = [_dumps(x) for x in sendobj]
        slen = np.array([len(x) for x in parts], dtype=np.int64)
        rlen = np.zeros(indegree, dtype=np.int64)
        self.Neighbor_alltoall(slen, rlen)
        self._ml_once()
        buf = bytearray(int(rlen.sum()))
        self.Neighbor_alltoallv([b"".join(parts), (slen, _offsets(slen)), MPI.BYTE],
                                [buf, (rlen, _offsets(rlen)), MPI.BYTE])
        return _split(self, buf, rlen)

    def _degrees(self, name: str) -> tuple[int, int]:
        """(in-degree, out-degree) of a topology communicator; AttributeError on any other."""
        if not getattr(self._c, "is_topo", False):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r} "
                                 f"(not a topology communicator)")
        indegree, outdegree = self._c.degrees
        return int(indegree), int(outdegree)

    # not an MPI.Request, unlike mpi4py's: the agreement is a protocol of messages advanced by each
    # Test, no one MPI request; so the override is incompatible in type, and documented
    def Iagree(self, flag: Any) -> _SimAgree:  # type: ignore[override]
        """Nonblocking agreement on a one-int buffer: each ``Test`` advances the agreement without
        waiting; on completion the buffer holds the AND (``agree``'s rules and errors)."""
        view = memoryview(flag)                            # an int is not a buffer: TypeError, as mpi4py
        if view.nbytes != 4:
            raise ValueError(f"Iagree: the flag must be a buffer of one C int (4 bytes), not {view.nbytes}")
        view = view.cast("B").cast("i")
        if self._ml_on:
            self._ml_seq += 1
        if self._w.check is not None:
            self._w.check()
        return _SimAgree(self, self._agreement_steps(int(view[0])), view)

    def Ishrink(self) -> tuple[SimComm, _SimDone]:
        """``shrink`` done at once (an agreement: no MPI request to wait for), and a done request."""
        return self.shrink(), _SimDone(self)

    # -- communicators made by mpi4py's calls --------------------------------------------------
    def _sync(self) -> None:
        """A rendezvous before a blocking MPI call that makes a communicator.

        Every member has entered (past its injection point) once the barrier completes anywhere,
        and no failure is injected while waiting for it, so after it every member reaches the
        blocking call. A failure before it makes everyone raise: the barrier cannot complete.
        """
        self._enter(None)
        req = self._c.Ibarrier()
        self._poll(lambda: None if MPI.Request.Test(req) else _PENDING, None, req, inject=False)

    def _made(self, newc: Any, kind: str) -> Any:
        """Wrap a communicator that an mpi4py call made from this one (``MPI.COMM_NULL`` stays)."""
        cid = self._child_id(kind)
        if newc == MPI.COMM_NULL:
            return MPI.COMM_NULL
        g, wg = newc.Get_group(), self._w.ctl.Get_group()
        members = [int(x) for x in MPI.Group.Translate_ranks(g, list(range(g.Get_size())), wg)]
        g.Free()
        wg.Free()
        new = SimComm(self._w, newc, f"{cid}m{members[0]}", members)
        new._msgfault = self._msgfault
        return new

    def _create(self, kind: str, make: Callable[[], Any]) -> Any:
        """A communicator-making collective: ``_sync``, then ``make()`` (the blocking MPI call)."""
        if self._ml_on:
            self._ml_seq += 1
        self._sync()
        new = self._made(make(), kind)
        if self._ml_on:                  # every member of this communicator made it: the log records it
            self._ml_child(new if isinstance(new, SimComm) else None, kind)
        return new

    def Clone(self) -> SimComm:
        return self.dup()

    def Dup_with_info(self, info: Any) -> SimComm:
        new = self.dup()
        if info is not None and info != MPI.INFO_NULL:
            new._c.Set_info(info)
        return new

    def Idup(self, info: Any = None) -> tuple[SimComm, _SimDone]:
        """``Dup_with_info`` done at once, and a done request (mpi4py's ``Idup`` gives (comm, request))."""
        return self.Dup_with_info(info), _SimDone(self)

    def Idup_with_info(self, info: Any) -> tuple[SimComm, _SimDone]:
        return self.Idup(info)

    def Create(self, group: Any) -> Any:
        return self._create("c", lambda: self._c.Create(group))

    def Create_group(self, group: Any, tag: int = 0) -> SimComm:
        """The communicator of ``group``, called by its members only.

        No barrier of this communicator fits (the others do not call), so the members first run
        an agreement among themselves (failure-tolerant, no failure injected inside): all of
        them then raise, or all reach the blocking MPI call. The agreed flag says whether the
        communicator is known revoked somewhere, the agreed failures whether a member failed. A
        member that learns of a revoke while it waits withdraws: unless it already decided, the
        coordinator then decides "revoked" for all (a member may never come)."""
        w = self._w
        if self._ml_on:
            self._ml_seq += 1
        if w.check is not None:
            w.check()
        mine = self._c.Get_group()
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), mine)
        mine.Free()
        wranks = [self._members[r] for r in ranks]
        gid = f"{self._cid}.g{zlib.crc32(repr((wranks, tag)).encode())}"
        seq = self._group_seq.get(gid, 0)
        self._group_seq[gid] = seq + 1
        value, failed, _ = self._agreement(0 if self._cid in w.revoked else 1, (gid, seq), wranks)
        if not value:
            raise self._ml_noted(RevokedError())
        dead = {self._pos[f] for f in failed if f in self._pos}
        if dead:
            raise self._failed(dead)
        newc = self._c.Create_group(group, tag)
        new = SimComm(w, newc, f"{gid}.{seq}", wranks)      # not in the message log: only some members made it
        new._msgfault = self._msgfault
        return new

    def Split_type(self, split_type: int, key: int = 0, info: Any = MPI.INFO_NULL) -> Any:
        return self._create("t", lambda: self._c.Split_type(split_type, key, info))

    def Create_cart(self, dims: Any, periods: Any = None, reorder: bool = False) -> Any:
        """A Cartesian SimComm: failure-safe calls as any SimComm, and the Cartesian queries
        (``Shift``, ``Get_coords``, ``dims``...) of the underlying ``MPI.Cartcomm``."""
        return self._create("cart", lambda: self._c.Create_cart(dims, periods, reorder))

    def Create_graph(self, index: Any, edges: Any, reorder: bool = False) -> Any:
        return self._create("graph", lambda: self._c.Create_graph(index, edges, reorder))

    def Create_dist_graph_adjacent(self, sources: Any, destinations: Any, sourceweights: Any = None,
                                   destweights: Any = None, info: Any = MPI.INFO_NULL,
                                   reorder: bool = False) -> Any:
        return self._create("dga", lambda: self._c.Create_dist_graph_adjacent(
            sources, destinations, sourceweights, destweights, info, reorder))

    def Create_dist_graph(self, sources: Any, degrees: Any, destinations: Any, weights: Any = None,
                          info: Any = MPI.INFO_NULL, reorder: bool = False) -> Any:
        return self._create("dg", lambda: self._c.Create_dist_graph(
            sources, degrees, destinations, weights, info, reorder))

    def Sub(self, remain_dims: Any) -> Any:
        """Cartesian sub-communicator (a Cartesian SimComm)."""
        if not isinstance(self._c, MPI.Cartcomm):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'Sub' "
                                 f"(not a Cartesian communicator)")
        return self._create("sub", lambda: self._c.Sub(remain_dims))

    # -- local calls: no other process is waited for -------------------------------------------
    def Compare(self, comm: Any) -> int:
        """mpi4py's ``Compare`` with another communicator (planaria's or mpi4py's)."""
        other = comm._c if isinstance(comm, Comm) else comm
        return MPI.Comm.Compare(self._c, other)

    def toint(self) -> int:
        """-1, mpi4py's answer for "no integer handle": a sim communicator is not an MPI handle, and an
        ``MPI.Comm`` rebuilt from its underlying handle would skip every failure check (``mpi`` gives
        the underlying communicator to code that means to)."""
        return -1

    def py2f(self) -> int:
        """-1, no Fortran handle, for the reason given in ``toint``."""
        return -1

    def Set_errhandler(self, errhandler: Any) -> None:
        """Accepted and not applied: a sim communicator raises planaria's errors whatever the handler,
        and its MPI communicator keeps returning errors as exceptions (a fatal handler would end
        the job where ULFM semantics ask for an error)."""
        return None

    @property
    def info(self) -> Any:
        return self._c.Get_info()

    @info.setter
    def info(self, info: Any) -> None:
        self._c.Set_info(info)

    @property
    def name(self) -> str:
        return self.Get_name()

    @name.setter
    def name(self, name: str) -> None:
        self.Set_name(name)

    # -- fault tolerance -----------------------------------------------------------------------
    def revoke(self) -> None:
        w = self._w
        if self._cid in w.revoked:
            return
        w.revoked.add(self._cid)
        for wr in self._members:
            if wr != w.wrank and wr not in w.failed:
                w.post(wr, ("R", self._cid))
        w.progress()

    def is_revoked(self) -> bool:
        self._w.progress()
        return self._cid in self._w.revoked

    def get_failed(self) -> set[int]:
        self._w.progress()
        return self._dead()

    def ack_failed(self) -> int:
        self._w.progress()
        self._acked = self._dead()
        return len(self._acked)

    def agree(self, flag: bool | int) -> bool | int:
        if self._ml_on:
            self._ml_seq += 1
        if self._w.check is not None:
            self._w.check()
        value, failed, err = self._agreement(int(flag))
        if err:
            raise self._agree_error(failed)
        return bool(value) if isinstance(flag, bool) else value

    def _agree_error(self, failed: frozenset[int]) -> Exception:
        """The error of an agreement that found unacknowledged failures (``failed``: world ranks)."""
        dead = {self._pos[f] for f in failed}
        return self._ml_noted(ProcFailedError(dead - self._acked or dead,
                                              f"agreement found unacknowledged failures: rank(s) {sorted(dead)}"))

    def shrink(self) -> SimComm:
        if self._ml_on:
            self._ml_seq += 1
        w = self._w
        if w.check is not None:
            w.check()                     # a failure may strike as recovery starts
        _, failed, _ = self._agreement(1)
        survivors = [wr for wr in self._members if wr not in failed]
        cid = self._child_id("s")
        wg = w.ctl.Get_group()
        g = wg.Incl(survivors)
        # Created from the control communicator: it carries no abandoned collectives.
        newc = w.ctl.Create_group(g, tag=_tag_for(cid))
        g.Free()
        wg.Free()
        new = SimComm(w, newc, cid, survivors)
        new._msgfault = self._msgfault
        if self._ml_on:
            self._ml_child(new, "k")
        return new

    def dup(self) -> SimComm:
        if self._ml_on:
            self._ml_seq += 1
        self._enter(None)
        newc, req = _idup(self._c)
        self._coll(req)
        new = SimComm(self._w, newc, self._child_id("d"), list(self._members))
        new._msgfault = self._msgfault
        if self._ml_on:
            self._ml_child(new, "d")
        return new

    def split(self, color: int | None = 0, key: int = 0) -> SimComm | None:
        # Not MPI_Comm_split: a blocking collective would wait forever for a zombie. One
        # failure-safe allgather of (color, key), with failures injected only at its entry, never
        # while waiting: a rank that failed after giving its part would let the others complete
        # it and then wait for it in the group creation. Once it completed everywhere, every
        # member reaches the creation.
        if self._ml_on:
            self._ml_seq += 1
        if color == MPI.UNDEFINED:
            color = None
        self._enter(None)
        mine = np.array([-1 if color is None else int(color), int(key)], dtype=np.int64)
        both = np.empty(2 * self.size, dtype=np.int64)
        req = self._c.Iallgather(mine, both)
        self._poll(lambda: None if MPI.Request.Test(req) else _PENDING, None, req, (mine, both), inject=False)
        entries = [(None if c < 0 else c, k) for c, k in both.reshape(-1, 2).tolist()]
        cid = self._child_id("p")
        if color is None:
            if self._ml_on:
                self._ml_child(None, "s")
            return None
        members = sorted((k, r) for r, (c, k) in enumerate(entries) if c == color)
        wranks = [self._members[r] for _, r in members]
        w = self._w
        wg = w.ctl.Get_group()
        g = wg.Incl(wranks)
        newc = w.ctl.Create_group(g, tag=_tag_for(f"{cid}:{color}"))
        g.Free()
        wg.Free()
        new = SimComm(w, newc, f"{cid}c{color}", wranks)
        new._msgfault = self._msgfault
        if self._ml_on:
            self._ml_child(new, "s", color)
        return new

    def free(self) -> None:
        self._w.comms.pop(self._cid, None)   # never MPI-free: a zombie may still drain it
        self._freed = True

    def _child_id(self, kind: str) -> str:
        self._children += 1
        return f"{self._cid}.{kind}{self._children}"

    def _agreement(self, flag: int, key: tuple[str, int] | None = None,
                   members: list[int] | None = None) -> tuple[int, frozenset[int], bool]:
        """Fault-tolerant agreement: (AND of flags, world ranks failed, some failure unacknowledged).

        ``key`` and ``members`` (world ranks): an agreement of part of the members (``Create_group``)."""
        step = self._agreement_steps(flag, key, members)
        n = 0
        while True:
            out = step()
            if out is not _PENDING:
                return out
            n += 1
            _backoff(n)

    def _agreement_steps(self, flag: int, key: tuple[str, int] | None = None,
                         members: list[int] | None = None) -> Callable[[], Any]:
        """One agreement instance as a step function: each call advances it without waiting and
        returns ``_agreement``'s result once decided, else ``_PENDING`` (``Iagree`` tests it)."""
        w = self._w
        if key is None:
            key = (self._cid, self._seq)
            self._seq += 1
        member = members is not None                # a Create_group agreement: withdrawn on a revoke
        if members is None:
            members = self._members
        inside = set(members)
        me = w.wrank
        box = w.boxes[key]
        known = frozenset(f for f in w.failed if f in inside)
        acked = frozenset(self._members[r] for r in self._acked)
        sent_to: list[int | None] = [None]
        told: list[int | None] = [None]            # whom this process told it withdraws

        def step() -> Any:
            w.progress()
            if member and self._cid in w.revoked:
                coord = next((wr for wr in members if wr not in w.failed), me)
                if told[0] != coord:
                    told[0] = coord
                    if coord == me:
                        w._withdrawn(key, tuple(members))
                    else:
                        w.post(coord, ("A", key[0], key[1], "X", me, tuple(members)))
            for m in box:
                if m[0] == "D":
                    _, _, value, failed, err = m
                    w.failed.update(failed)
                    w.boxes.pop(key, None)
                    return value, frozenset(failed), err
            alive = [wr for wr in members if wr not in w.failed]
            coord = alive[0]
            if coord == me:
                contribs = {m[1]: m for m in box if m[0] == "C"}
                if all(wr == me or wr in contribs for wr in alive):
                    value = flag
                    failed = set(known) | {f for f in w.failed if f in inside}
                    acked_all = set(acked)
                    for _, _, f, kn, ak in contribs.values():
                        value &= f
                        failed |= set(kn)
                        acked_all &= set(ak)
                    err = bool(failed - acked_all)
                    decision = ("D", me, value, tuple(sorted(failed)), err)
                    if member:
                        w.decided.add(key)
                    for wr in alive:
                        if wr != me:
                            w.post(wr, ("A", key[0], key[1]) + decision)
                    w.boxes.pop(key, None)
                    return value, frozenset(failed), err
            elif sent_to[0] != coord:
                w.post(coord, ("A", key[0], key[1], "C", me, flag, tuple(known), tuple(acked)))
                sent_to[0] = coord
            return _PENDING
        return step


#: mpi4py's communicator calls that are local (never wait for another process): the underlying communicator's
_LOCAL = frozenset({
    "Get_info", "Set_info", "Get_errhandler", "Call_errhandler", "Get_attr", "Set_attr", "Delete_attr",
    "Create_keyval", "Free_keyval", "Get_topology", "topology", "is_topo", "Cart_map", "Graph_map",
    "Attach_buffer", "Detach_buffer", "Flush_buffer", "Iflush_buffer", "Create_errhandler", "Get_parent",
})
#: a topology communicator's local queries (Cartesian, graph, distributed graph)
_TOPO_LOCAL = frozenset({
    "Get_cart_rank", "Get_coords", "Get_dim", "Get_topo", "Shift", "coords", "dim", "dims", "ndim",
    "periods", "topo", "Get_dims", "Get_neighbors", "Get_neighbors_count", "edges", "index", "nedges",
    "neighbors", "nneighbors", "nnodes", "Get_dist_neighbors", "Get_dist_neighbors_count", "degrees",
    "indegree", "outdegree", "inedges", "outedges", "inoutedges",
})


def _mask_mpi_names(cls: type) -> None:
    """Give every public name of ``MPI.Intracomm`` that planaria's classes do not define a stand-in
    that asks ``SimComm.__getattr__``: the subclass would otherwise find mpi4py's C method first."""
    own: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("planaria"):
            own.update(vars(klass))
    for name in dir(MPI.Intracomm):
        if name.startswith("_") or name in own:
            continue
        if inspect.isroutine(getattr(MPI.Intracomm, name)):
            setattr(cls, name, _stand_in(name))
        else:
            setattr(cls, name, _stand_in_property(name))


def _stand_in_property(name: str) -> property:
    """A property that ``SimComm.__getattr__`` resolves (mpi4py's attribute ``name``)."""
    def get(self: SimComm) -> Any:
        return SimComm.__getattr__(self, name)
    return property(get, doc=f"mpi4py's ``{name}`` (see ``SimComm.__getattr__``).")


def _stand_in(name: str) -> Callable[..., Any]:
    """A method that ``SimComm.__getattr__`` resolves: the underlying communicator's, or a refusal."""
    def call(self: SimComm, *args: Any, **kwargs: Any) -> Any:
        return SimComm.__getattr__(self, name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"mpi4py's ``{name}``: a local call is the underlying communicator's, another is refused."
    return call


_mask_mpi_names(SimComm)


def _tag_for(cid: str) -> int:
    return zlib.crc32(cid.encode()) % 30000 + 1


def _idup(c: Any) -> tuple[Any, Any]:
    out = c.Idup()
    return out if isinstance(out, tuple) else (out, MPI.REQUEST_NULL)


_WORLD: SimWorld | None = None


def sim_world() -> SimComm:
    """The simulation's COMM_WORLD (creates the process-wide state on first call)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = SimWorld()
    base = MPI.COMM_WORLD.Dup()
    return SimComm(_WORLD, base, "w", list(range(_WORLD.wsize)))


def sim_state() -> SimWorld | None:
    """The process-wide simulation state, if the sim backend is in use."""
    return _WORLD
