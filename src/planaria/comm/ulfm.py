"""``Comm`` on real ULFM (Open MPI 5 run with ``--with-ft ulfm``): thin, errors mapped to planaria's.

Each method also keeps the message log's counters when its communicator is recorded (one test
of ``_ml_on`` otherwise; see ``comm/base.py``).

A ``UlfmComm`` *is* an ``mpi4py.MPI.Intracomm`` (same MPI handle as the communicator it was made
from), so it goes wherever mpi4py wants a communicator: ``MPI.Comm(c)``, ``MPI.Comm.Compare``,
``==``, ``Create_group``... The methods planaria defines (failure handling, message-log counters,
object collectives built from buffer ones) run planaria's code; every other public method of
mpi4py's class is a thin wrapper made when the class is created (``_delegate``): it calls
mpi4py's method on the same object and only turns ULFM's errors into planaria's and the
communicators and requests it returns into planaria's. Wrappers rather than ``__getattr__``:
a subclass finds mpi4py's own methods before ``__getattr__`` is ever asked, and a wrapper made
once costs one Python call, not a look-up and a closure per call.

Communicators these calls make are planaria communicators of the matching mpi4py class
(``UlfmCartcomm`` is an ``MPI.Cartcomm``, and so on), carrying the parent's message faults.
Requests are ``MPI.Request`` subclasses (``_Req``): ``MPI.Request.Waitall`` and friends accept
them and they become null (falsy) once complete, as mpi4py's; their own ``Wait``/``Test``/
``wait``/``test`` raise planaria's errors. ``MPI.Request.Waitall(reqs)`` (and the other class
methods over a list) run in mpi4py's C code, so a failure there raises a plain ``MPI.Exception``,
not planaria's subclass: its class is ``MPI.ERR_IN_STATUS`` (Open MPI), with ULFM's
``MPI.ERR_PROC_FAILED``/``MPI.ERR_REVOKED`` in the statuses passed, or ULFM's class itself; and a
receive completed that way is not counted by the message log.
"""
from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Callable

from planaria._lazy import np
from mpi4py import MPI

from planaria.comm.base import Comm, Receiving, Request, _count_class, noted, rehook
from planaria.comm.matched import Matched
from planaria.comm import errors as _errors
from planaria.comm import flight as _flight
from planaria.comm import msglog, recorded
from planaria.comm.errors import FailureError, ProcFailedError, RevokedError

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any, Literal, NoReturn, TypeVar

    from planaria.comm.base import E

    _C = TypeVar("_C")

_FAILED_CLASSES = (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING)
# mpi4py's C methods of the hottest calls, called on the communicator itself (it is an
# Intracomm sharing the handle): one call, no attribute look-ups on the way (8-byte ping-pong)
_SEND, _RECV, _SENDRECV, _ALLREDUCE = MPI.Comm.Send, MPI.Comm.Recv, MPI.Comm.Sendrecv, MPI.Comm.Allreduce
_IS_REVOKED = MPI.Comm.Is_revoked
_NEW_REQUEST = MPI.Request.__new__
_ISEND, _IRECV, _ISEND_OBJ = MPI.Comm.Isend, MPI.Comm.Irecv, MPI.Comm.isend


def ulfm_available() -> bool:
    """True when this MPI library has the ULFM calls and fault tolerance is switched on for this run."""
    if not all(hasattr(MPI.Comm, n) for n in ("Revoke", "Shrink", "Agree", "Ack_failed", "Get_failed")):
        return False
    if "Open MPI" in MPI.Get_library_version():
        return os.environ.get("OMPI_MCA_mpi_ft_enable", "0") not in ("0", "", "false")
    return True


_R_Wait, _R_Test, _R_wait, _R_test = MPI.Request.Wait, MPI.Request.Test, MPI.Request.wait, MPI.Request.test


def _blocking_rooted(call: Callable[..., None]) -> Callable[[UlfmComm, Any, Any, int], None]:
    """How a recorded rooted collective completes on ULFM: mpi4py's C method ``call``, errors mapped."""
    def complete(self: UlfmComm, sendbuf: Any, recvbuf: Any, root: int) -> None:
        try:
            call(self._c, sendbuf, recvbuf, root)
        except MPI.Exception as e:
            raise self._convert(e) from e
    return complete


def _blocking(call: Callable[..., None]) -> Callable[[UlfmComm, Any, Any], None]:
    """``_blocking_rooted`` for a collective without a root."""
    def complete(self: UlfmComm, sendbuf: Any, recvbuf: Any) -> None:
        try:
            call(self._c, sendbuf, recvbuf)
        except MPI.Exception as e:
            raise self._convert(e) from e
    return complete


class _Req(Request, MPI.Request):
    """An mpi4py request (the same MPI handle, and the buffer it keeps alive) whose own calls raise planaria's errors."""

    __slots__ = ("_comm",)

    def __new__(cls, req: Any = None, *rest: Any) -> _Req:
        return MPI.Request.__new__(cls, req)

    def __init__(self, req: Any, comm: _Failures) -> None:
        self._comm = comm

    def Test(self, status: Any = None) -> bool:
        try:
            return _R_Test(self, status)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e

    def Wait(self, status: Any = None) -> Literal[True]:
        try:
            return _R_Wait(self, status)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e

    def test(self, status: Any = None) -> tuple[bool, Any]:
        """mpi4py's ``test``: (done, the received object for an object ``irecv``, else None)."""
        try:
            return _R_test(self, status)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e

    def wait(self, status: Any = None) -> Any:
        """mpi4py's ``wait``: the received object for an object ``irecv``, else None."""
        try:
            return _R_wait(self, status)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e

    def Cancel(self) -> None:
        try:
            MPI.Request.Cancel(self)
        except MPI.Exception:       # noqa: S110 - best effort, as the base class says (a cancel cannot fail usefully)
            pass


class _PReq(_Req, MPI.Prequest):
    """A persistent request (``Send_init``...): ``Start`` too raises planaria's errors; a
    collective one (``Allreduce_init``...) counts as a collective of its communicator when started."""

    _collective = False

    def __new__(cls, req: Any = None, *rest: Any) -> _PReq:
        return MPI.Request.__new__(cls, req)       # the type's C base is Request's (Prequest adds no fields)

    def Start(self) -> None:
        if self._collective and self._comm._ml_on:
            self._comm._ml_seq += 1
        try:
            MPI.Prequest.Start(self)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e


class _Receiving(Receiving, _Req):
    """A request whose completion is a received message: ``_received`` counts it in the message log."""

    def test(self, status: Any = None) -> tuple[bool, Any]:
        done, obj = _Req.test(self, status)
        if done:
            self._received()
        return done, obj

    def wait(self, status: Any = None) -> Any:
        obj = _Req.wait(self, status)
        self._received()
        return obj


class _RecvPReq(_Receiving, _PReq):
    """A persistent receive (``Recv_init``) of a recorded communicator: each completion after a
    ``Start`` counts one message received from its source (``_recv_from``; -1, a wildcard: not counted)."""

    _recv_from = -1
    _armed = False

    def Start(self) -> None:
        _PReq.Start(self)
        self._armed = True

    def _received(self) -> None:
        if self._armed:
            self._armed = False
            if self._recv_from >= 0 and self._comm._ml_on:
                self._comm._ml_recvd[self._recv_from] += 1


_MPROBES = frozenset({"Mprobe", "mprobe", "Improbe", "improbe"})


def _probing(name: str, fn: Any) -> Callable[..., Any]:
    """``_wrapper``'s call for a matched probe: on a recorded communicator the message it returns
    is a ``Matched`` that knows its source (read from the probe's status)."""
    guarded = _guarded(name)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if guarded and _IS_REVOKED(self):
            raise self._convert_revoked()
        if not self._ml_on:
            try:
                return fn(self, *args, **kwargs)
            except MPI.Exception as e:
                self._reraise(e)
        got = msglog.arguments(name, args, kwargs)
        if got.get("status") is None:
            got["status"] = MPI.Status()
        try:
            out = fn(self, **got)
        except MPI.Exception as e:
            self._reraise(e)
        if isinstance(out, MPI.Message) and out:
            return Matched(out, self, got["status"].Get_source())
        return out
    return call


class _Logged(_Req):
    """A request of a recorded communicator that counts nothing when it completes: a send (counted
    when posted), a wildcard receive, a nonblocking collective. Its ``Wait`` is ``_Req``'s.

    Made on the hot path without Python's constructor (``_logged``): one tuple ``_ml`` holds the
    operation, peer, tag and buffer, which the message log reads (``_op``...) only when it looks.
    Slots, not an instance dict: a request is made and dropped at every message."""

    __slots__ = ("_ml",)
    _ml: tuple[str, int, int, Any]

    @property
    def _op(self) -> str:
        return self._ml[0]

    @property
    def _peer(self) -> int:
        return self._ml[1]

    @property
    def _tag(self) -> int:
        return self._ml[2]

    @property
    def _buf(self) -> Any:
        return self._ml[3]


class _LRecv(_Logged):
    """A receive from a named source of a recorded communicator, counted in the message log once
    done: ``_count`` is that source until then, -1 after."""

    __slots__ = ("_count",)
    _count: int

    def _counted(self) -> None:
        c = self._count
        if c >= 0:
            self._comm._ml_recvd[c] += 1
            self._count = -1

    def Test(self, status: Any = None) -> bool:
        try:
            done = _R_Test(self, status)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e
        if done and self._count >= 0:
            self._counted()
        return done

    def Wait(self, status: Any = None) -> Literal[True]:
        try:
            _R_Wait(self, status)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e
        c = self._count
        if c >= 0:                          # counted once
            self._comm._ml_recvd[c] += 1
            self._count = -1
        return True

    def test(self, status: Any = None) -> tuple[bool, Any]:
        try:
            done, obj = _R_test(self, status)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e
        if done and self._count >= 0:
            self._counted()
        return done, obj

    def wait(self, status: Any = None) -> Any:
        try:
            obj = _R_wait(self, status)
        except MPI.Exception as e:
            raise self._comm._convert(e) from e
        if self._count >= 0:
            self._counted()
        return obj


def _logged(req: Any, comm: _Failures, op: str, peer: int, tag: int, buf: Any) -> _Logged:
    """``req`` (an mpi4py request) as a recorded communicator's ``_Logged`` request, made without
    Python's constructor (a third of the cost of a call to the class)."""
    out = _NEW_REQUEST(_Logged, req)
    out._comm, out._ml = comm, (op, peer, tag, buf)
    return out


def _logged_recv(req: Any, comm: _Failures, op: str, source: int, tag: int, buf: Any) -> _Logged:
    """``_logged`` for a receive: from a named source, an ``_LRecv`` that counts it once done."""
    if source < 0:
        return _logged(req, comm, op, source, tag, buf)
    out = _NEW_REQUEST(_LRecv, req)
    out._comm, out._ml, out._count = comm, (op, source, tag, buf), source
    return out


class _SyncReq(_Req):
    """A synchronous send's request (``Issend``, ``issend``, ``Ssend_init``): done while its
    communicator is revoked, it raises ``RevokedError``. Open MPI 5.0.11's ULFM may complete a
    synchronous send that a revoke interrupted as if it had been received."""

    def Test(self, status: Any = None) -> bool:
        done = _Req.Test(self, status)
        if done and _IS_REVOKED(self._comm):
            raise self._comm._convert_revoked()
        return done

    def Wait(self, status: Any = None) -> Literal[True]:
        _Req.Wait(self, status)
        if _IS_REVOKED(self._comm):
            raise self._comm._convert_revoked()
        return True

    def test(self, status: Any = None) -> tuple[bool, Any]:
        done, obj = _Req.test(self, status)
        if done and _IS_REVOKED(self._comm):
            raise self._comm._convert_revoked()
        return done, obj

    def wait(self, status: Any = None) -> Any:
        obj = _Req.wait(self, status)
        if _IS_REVOKED(self._comm):
            raise self._comm._convert_revoked()
        return obj


class _SyncPReq(_SyncReq, _PReq):
    """``Ssend_init``'s persistent request: ``_SyncReq``'s waits, ``_PReq``'s ``Start``."""


class _Polled(_Receiving):
    """A request whose own waits poll, with the communicator's revoke and failures looked at in
    between: Open MPI 5.0.11's ULFM never completes an ``Isendrecv`` (``Isendrecv_replace``) whose
    communicator is revoked, or whose peer fails, while it waits. A request given up that way is
    kept (``_ABANDONED``): MPI may still write into its buffers. ``_peers``: its destination and
    source (a failure of another rank does not stop it; -1, a wildcard source: any failure does)."""

    _peers: frozenset[int] = frozenset({-1})
    _recv_from = -1             # the source its receive counts for in the message log, once done

    def Wait(self, status: Any = None) -> Literal[True]:
        self._poll(status)
        return True

    def wait(self, status: Any = None) -> Any:
        return self._poll(status)

    def _received(self) -> None:
        src, self._recv_from = self._recv_from, -1
        if src >= 0 and self._comm._ml_on:
            self._comm._ml_recvd[src] += 1

    def _poll(self, status: Any) -> Any:
        comm, pause, look = self._comm, 0.0, time.monotonic()
        while True:
            done, obj = self.test(status)
            if done:
                return obj
            now = time.monotonic()
            if now >= look:                     # the revoke and failure checks cost a few µs: 100 times a second
                look = now + 0.01
                if _IS_REVOKED(comm):
                    _ABANDONED.append(self)
                    raise comm._convert_revoked()
                failed = comm._known_failed()
                if failed and (-1 in self._peers or failed & self._peers):
                    _ABANDONED.append(self)
                    comm._saw(failed)
                    raise comm._ml_noted(ProcFailedError(failed))
            time.sleep(pause)
            pause = min(0.001, pause * 2 or 1e-5)


_ABANDONED: list[Any] = []           # requests given up after a failure (their buffers stay alive)
_POLLED_MAKERS = frozenset({"Isendrecv", "Isendrecv_replace"})
#: synchronous sends: one that returns while its communicator is revoked raises (``_SyncReq``)
_SYNC_SENDS = frozenset({"Ssend", "ssend", "Issend", "issend", "Ssend_init"})


class _Done(Request, MPI.Request):
    """An already-complete request (a dropped message's send): a null ``MPI.Request``, as mpi4py's once complete."""

    def __new__(cls) -> _Done:
        return MPI.Request.__new__(cls)

    def Test(self, status: Any = None) -> bool:
        return True

    def Wait(self, status: Any = None) -> Literal[True]:
        return True

    def test(self, status: Any = None) -> tuple[bool, Any]:
        return True, None

    def wait(self, status: Any = None) -> Any:
        return None

    def Cancel(self) -> None:
        return None


class _ObjRecv(Request):
    """``irecv_matched``: an object receive matched by a matched probe when tested, so any size works
    and nothing is posted (see ``Comm.irecv_matched``). Not an ``MPI.Request``: it has no MPI handle."""

    __slots__ = ("_comm", "_peer", "_tag", "_done", "_obj")
    _op = "irecv"

    def __init__(self, comm: UlfmComm, source: int, tag: int) -> None:
        self._comm, self._peer, self._tag = comm, source, tag
        self._done, self._obj = False, None

    def Test(self, status: Any = None) -> bool:
        if not self._done:
            comm = self._comm
            try:
                msg = comm._c.improbe(self._peer, self._tag)
                if msg is not None:
                    self._obj, self._done = msg.recv(), True
            except MPI.Exception as e:
                raise comm._convert(e) from e
            if self._done and comm._ml_on and self._peer >= 0:
                comm._ml_recvd[self._peer] += 1
        return self._done

    def Wait(self, status: Any = None) -> None:
        if not self._done:
            self._obj = self._comm.recv(None, self._peer, self._tag)     # counted there
            self._done = True

    def _value(self) -> Any:
        return self._obj

    def Cancel(self) -> None:
        self._done = True


if TYPE_CHECKING:       # the mixins below always sit on an mpi4py communicator of that class
    _OnComm = MPI.Comm
    _OnTopocomm = MPI.Topocomm
else:
    _OnComm = _OnTopocomm = object


class _Failures(_OnComm):
    """ULFM's errors as planaria's, for every planaria ULFM communicator (intra or inter).

    Needs ``_c``, the plain mpi4py communicator with the same handle (calls made on it run
    mpi4py's code only), ``_ml_on`` and ``size``.
    """

    _c: Any
    # the message log's counters (``base.Comm``'s; set only on a recorded intracommunicator)
    _ml_seq: int
    _ml_sent: list[int]
    _ml_recvd: list[int]
    _ml_on = False
    _hooks = False
    _msgfault: Callable[[int], float | None] | None = None

    if TYPE_CHECKING:
        def __init__(self, mpi_comm: Any) -> None: ...       # each class's own: made from an mpi4py communicator
    __hash__ = object.__hash__      # mpi4py's communicators are unhashable; planaria keeps them in weak sets

    def _known_failed(self) -> set[int]:
        try:
            g = self._c.Get_failed()
        except MPI.Exception:
            return set()
        try:
            if g.Get_size() == 0:
                return set()
            mine = self._c.Get_group()
            ranks = MPI.Group.Translate_ranks(g, list(range(g.Get_size())), mine)
            mine.Free()
            return {r for r in ranks if r != MPI.UNDEFINED}
        finally:
            g.Free()

    def _convert(self, e: MPI.Exception) -> Exception:
        if isinstance(e, FailureError):
            return e
        out = self._error_of(e)
        if isinstance(out, FailureError):
            self._ml_noted(out)
        return out

    def _error_of(self, e: MPI.Exception) -> Exception:
        cls = e.Get_error_class()
        if cls == MPI.ERR_REVOKED:
            return RevokedError()
        if cls in _FAILED_CLASSES:
            failed = self._known_failed()
            self._saw(failed)
            return ProcFailedError(failed)
        failed = self._known_failed()
        if failed:
            self._saw(failed)
            return ProcFailedError(failed, f"process failure ({e.Get_error_string()}): rank(s) {sorted(failed)} failed")
        if self._is_revoked_raw():
            return RevokedError()
        return e

    def _reraise(self, e: MPI.Exception) -> NoReturn:
        """Raise ``e`` as planaria's error (``e`` itself when it is no failure), from ``e``."""
        err = self._convert(e)
        if err is e:
            raise e
        raise err from e

    def _own_request(self, req: Any) -> Any:
        """``req`` as planaria's request of this communicator (its waits raise planaria's errors)."""
        return _made(req, self)

    def _convert_revoked(self) -> Exception:
        """The error of a call refused because this communicator is known revoked (recorded like any)."""
        return self._ml_noted(RevokedError())

    def _ml_noted(self, exc: E) -> E:
        """``exc``, a failure error about to be raised (``base.noted``; an intercommunicator too)."""
        return noted(self, exc)

    def _pending(self, parent: _Failures, rank: int, size: int) -> None:
        """Set up a communicator that a non-blocking call is still making (each class says how)."""
        raise NotImplementedError

    def _saw(self, failed: set[int]) -> None:
        if failed and _errors._observers:
            try:
                _errors.saw_failed(self._world_of(r) for r in failed)
            except Exception:  # noqa: BLE001 - best effort
                pass

    def _is_revoked_raw(self) -> bool:
        try:
            return bool(self._c.Is_revoked())
        except MPI.Exception:
            return False

    def _world_of(self, rank: int) -> int:
        table = getattr(self, "_wtable", None)
        if table is None:
            g, w = self._c.Get_group(), MPI.COMM_WORLD.Get_group()
            table = self._wtable = MPI.Group.Translate_ranks(g, list(range(g.Get_size())), w)
            g.Free()
            w.Free()
        return table[rank]

    @staticmethod
    def _known_failed_of(c: Any) -> bool:
        try:
            g = c.Get_failed()
            n = g.Get_size()
            g.Free()
            return n > 0 or bool(c.Is_revoked())
        except MPI.Exception:
            return True


class UlfmComm(_Failures, Comm, MPI.Intracomm):
    """Fault-tolerant communicator over real ULFM: an ``MPI.Intracomm`` sharing the handle it is made from."""

    backend = "ulfm"

    if TYPE_CHECKING:
        # The names both bases define, as the type checker is to see them here: mpi4py's stubs
        # call group/is_inter/is_intra attributes (read-only properties in mpi4py, as in
        # base.Comm), and Shrink gives this class, both a planaria and an mpi4py communicator.
        group: MPI.Group
        is_inter: bool
        is_intra: bool

        def Shrink(self) -> UlfmComm: ...

    def __init__(self, mpi_comm: Any) -> None:
        plain = _plain(mpi_comm)
        plain.Set_errhandler(MPI.ERRORS_RETURN)
        Comm.__init__(self, plain)

    def _pending(self, parent: _Failures, rank: int, size: int) -> None:
        """Set up a communicator a non-blocking call (``Idup``, ``Ishrink``) is still making: no MPI call
        on it yet; a rank or size not known (-1) is read when first asked for."""
        self._c = _plain(self)
        self._rank, self._size = rank, size
        self._msgfault = parent._msgfault
        self._ml_on = False
        rehook(self)

    @property
    def rank(self) -> int:
        """This process's rank (read once)."""
        r = self._rank
        if r < 0:
            r = self._rank = self._c.Get_rank()
        return r

    @rank.setter
    def rank(self, value: int) -> None:
        self._rank = value

    # mpi4py's stubs declare ``size`` a writable attribute; in mpi4py it is a read-only property, as here
    @property  # type: ignore[misc]  # (the same: the stubs' attribute seen as a read-write property)
    def size(self) -> int:  # type: ignore[override]
        """Number of processes (read once)."""
        n = self._size
        if n < 0:
            n = self._size = self._c.Get_size()
        return n

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    # -- point-to-point ------------------------------------------------------------------
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        if self._hooks:                         # the message log or message faults (one test when neither)
            return self._send_hooked(buf, dest, tag)
        try:
            _SEND(self, buf, dest, tag)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def _send_hooked(self, buf: Any, dest: int, tag: int) -> None:
        if self._msgfault is None or self._outgoing(dest):
            try:
                _SEND(self, buf, dest, tag)
            except MPI.Exception as e:
                raise self._convert(e) from e
        if self._ml_on and dest >= 0:           # a dropped message too
            self._ml_sent[dest] += 1

    def Recv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> None:
        if not self._ml_on:
            try:
                _RECV(self, buf, source, tag, status)
            except MPI.Exception as e:
                raise self._convert(e) from e
            return
        if source < 0 and status is None:
            status = MPI.Status()               # the log counts a wildcard receive by its sender
        try:
            _RECV(self, buf, source, tag, status)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if source >= 0:
            self._ml_recvd[source] += 1
        else:
            self._ml_wildcard(status)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> _Req | _Done:
        if self._hooks:                         # the message log or message faults
            if self._msgfault is not None:
                return self._send_posted(_ISEND, self, "Isend", buf, dest, tag, buf)
            if _IS_REVOKED(self):
                raise self._convert_revoked()
            try:
                out = _NEW_REQUEST(_Logged, _ISEND(self, buf, dest, tag))
            except MPI.Exception as e:
                raise self._convert(e) from e
            out._comm, out._ml = self, ("Isend", dest, tag, buf)
            if dest >= 0:                       # counted when posted
                self._ml_sent[dest] += 1
            return out
        if _IS_REVOKED(self):                   # Open MPI 5.0.11 would post it and complete it locally
            raise self._convert_revoked()
        try:
            req = _NEW_REQUEST(_Req, _ISEND(self, buf, dest, tag))   # no Python __new__/__init__
        except MPI.Exception as e:
            raise self._convert(e) from e
        req._comm = self
        return req

    def _send_posted(self, post: Callable[..., Any], on: Any, name: str, buf: Any, dest: int, tag: int,
                     logged: Any) -> _Req | _Done:
        """A nonblocking send ``post(on, buf, dest, tag)`` (mpi4py's ``name``) with the message log
        and message faults: a dropped message is not posted; the log keeps ``logged`` as its buffer."""
        if self._msgfault is not None and not self._outgoing(dest):
            if self._ml_on and dest >= 0:       # a dropped message counts as sent
                self._ml_sent[dest] += 1
            return _Done()
        if _IS_REVOKED(self):
            raise self._convert_revoked()
        try:
            req = post(on, buf, dest, tag)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:
            if dest >= 0:                       # counted when posted
                self._ml_sent[dest] += 1
            return _logged(req, self, name, dest, tag, logged)
        return _Req(req, self)

    def Irecv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> _Req:
        try:
            req = _IRECV(self, buf, source, tag)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:                         # no Python constructor here either (``_logged``)
            if source < 0:
                return _logged(req, self, "Irecv", source, tag, buf)
            rec = _NEW_REQUEST(_LRecv, req)
            rec._comm, rec._ml, rec._count = self, ("Irecv", source, tag, buf), source
            return rec
        out = _NEW_REQUEST(_Req, req)
        out._comm = self
        return out

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG, status: Any = None) -> None:
        if self._msgfault is not None and not self._outgoing(dest):
            self.Recv(recvbuf, source, recvtag, status)        # counts the receive
            if self._ml_on and dest >= 0:
                self._ml_sent[dest] += 1
            return
        try:
            _SENDRECV(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:
            self._ml_exchanged(dest, source)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        if self._msgfault is None or self._outgoing(dest):
            try:
                self._c.send(obj, dest, tag)
            except MPI.Exception as e:
                raise self._convert(e) from e
        if self._ml_on and dest >= 0:
            self._ml_sent[dest] += 1

    def recv(self, buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        """mpi4py's ``recv`` (``buf``: an optional receive buffer for the pickled data)."""
        if source < 0 and self._ml_on and status is None:
            status = MPI.Status()
        try:
            obj = self._c.recv(buf, source, tag, status)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:
            self._ml_received(source, status)
        return obj

    def isend(self, obj: Any, dest: int, tag: int = 0) -> _Req | _Done:
        return self._send_posted(_ISEND_OBJ, self._c, "isend", obj, dest, tag, None)

    def irecv(self, buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> _Req:
        """mpi4py's ``irecv``: a receive posted at once, into ``buf`` (a writable buffer, or a size in
        bytes; None: mpi4py's default, ``mpi4py.rc.irecv_bufsz`` bytes). A larger message is an error
        (``MPI_ERR_TRUNCATE``), as in mpi4py; ``irecv_matched`` takes a message of any size."""
        try:
            req = self._c.irecv(buf, source, tag)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:
            return _logged_recv(req, self, "irecv", source, tag, None)
        return _Req(req, self)

    def irecv_matched(self, source: int | None = None, tag: int | None = None) -> Request:
        return _ObjRecv(self, MPI.ANY_SOURCE if source is None else source, MPI.ANY_TAG if tag is None else tag)

    # -- buffer collectives ----------------------------------------------------------------
    def Barrier(self) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Barrier()
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Bcast(self, buf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
            _flight.note(self._fl, self._ml_seq, _flight.BCAST, buf)
        try:
            self._c.Bcast(buf, root)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = None, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
            _flight.note(self._fl, self._ml_seq, _flight.REDUCE, sendbuf, recvbuf)
        try:
            self._c.Reduce(sendbuf, recvbuf, MPI.SUM if op is None else op, root)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None:
        if self._ml_on:
            self._ml_seq += 1
            _flight.note(self._fl, self._ml_seq, _flight.ALLREDUCE, sendbuf, recvbuf)
        try:
            _ALLREDUCE(self, sendbuf, recvbuf, MPI.SUM if op is None else op)
        except MPI.Exception as e:
            raise self._convert(e) from e

    Gather = recorded.rooted("Gather", _blocking_rooted(MPI.Comm.Gather), _flight.GATHER)
    Gatherv = recorded.rooted("Gatherv", _blocking_rooted(MPI.Comm.Gatherv))
    Allgather = recorded.to_all("Allgather", _blocking(MPI.Comm.Allgather), _flight.ALLGATHER)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Allgatherv(sendbuf, recvbuf)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if _IS_REVOKED(self):     # Open MPI 5.0.11 returns success, nothing received, when revoked inside it
            raise self._convert_revoked()

    Scatter = recorded.rooted("Scatter", _blocking_rooted(MPI.Comm.Scatter), _flight.SCATTER, noted_recv=True)
    Scatterv = recorded.rooted("Scatterv", _blocking_rooted(MPI.Comm.Scatterv))
    Alltoall = recorded.to_all("Alltoall", _blocking(MPI.Comm.Alltoall), _flight.ALLTOALL)
    Alltoallv = recorded.to_all("Alltoallv", _blocking(MPI.Comm.Alltoallv))

    # -- fault tolerance -------------------------------------------------------------------
    def revoke(self) -> None:
        try:
            self._c.Revoke()
        except MPI.Exception as e:
            if e.Get_error_class() != MPI.ERR_REVOKED:
                raise self._convert(e) from e

    def is_revoked(self) -> bool:
        return self._is_revoked_raw()

    def shrink(self) -> UlfmComm:
        if self._ml_on:
            self._ml_seq += 1
        try:
            newc = self._c.Shrink()
        except MPI.Exception as e:
            raise self._convert(e) from e
        new = _made(newc, self)
        if self._ml_on:
            self._ml_child(new, "k")
        return new

    def agree(self, flag: bool | int) -> bool | int:
        if self._ml_on:
            self._ml_seq += 1
        try:
            out = self._c.Agree(int(flag))
        except MPI.Exception as e:
            raise self._convert(e) from e
        return bool(out) if isinstance(flag, bool) else int(out)

    def ack_failed(self) -> int:
        try:
            return int(self._c.Ack_failed())
        except MPI.Exception as e:
            raise self._convert(e) from e

    def get_failed(self) -> set[int]:
        return self._known_failed()

    def dup(self, info: Any = None) -> UlfmComm:
        if self._ml_on:
            self._ml_seq += 1
        try:
            newc = self._c.Dup(info)
        except MPI.Exception as e:
            raise self._convert(e) from e
        new = _made(newc, self)
        if self._ml_on:
            self._ml_child(new, "d")
        return new

    def Dup(self, info: Any = None) -> UlfmComm:
        """mpi4py's ``Dup``: ``dup(info)``, a planaria communicator of the same class."""
        return self.dup(info)

    def split(self, color: int | None = 0, key: int = 0) -> UlfmComm | None:
        if self._ml_on:
            self._ml_seq += 1
        c = MPI.UNDEFINED if color is None else color
        try:
            newc = self._c.Split(c, key)
        except MPI.Exception as e:
            raise self._convert(e) from e
        new = None if newc == MPI.COMM_NULL else _made(newc, self)
        if self._ml_on:
            self._ml_child(new, "s", color)
        return new

    def free(self) -> None:
        """Release the communicator (local; safe after failures): afterwards it compares equal to
        ``MPI.COMM_NULL``, as mpi4py's, unless a failure or a revoke is known on it (then the handle
        is left alone: freeing it could wait for the failed process)."""
        c, self._c = self._c, MPI.COMM_NULL
        if c == MPI.COMM_NULL or c == MPI.COMM_WORLD:
            return
        if not self._known_failed_of(c):
            try:
                MPI.Comm.Free(self)
            except MPI.Exception:
                pass


class _TopoObjects(_OnTopocomm):
    """The object neighbor collectives of a topology communicator, built from the buffer ones.

    mpi4py's ``neighbor_allgather``/``neighbor_alltoall`` run on a hidden duplicate that ULFM's
    revoke does not reach (see ``comm/base.py``); here a length exchange and the pickled bytes go
    through ``Neighbor_allgather(v)``/``Neighbor_alltoall(v)`` of this communicator, which raise
    planaria's errors. A ``PROC_NULL`` neighbor gives None, as in mpi4py.
    """

    def neighbor_allgather(self, sendobj: Any) -> list[Any]:
        data = pickle.dumps(sendobj, pickle.HIGHEST_PROTOCOL)
        rlen = np.full(self.indegree, -1, dtype=np.int64)
        self.Neighbor_allgather(np.array([len(data)], dtype=np.int64), rlen)
        counts = np.maximum(rlen, 0)
        buf = bytearray(int(counts.sum()))
        self.Neighbor_allgatherv([data, len(data), MPI.BYTE], [buf, (counts, _displs(counts)), MPI.BYTE])
        return _unpickled(buf, rlen)

    def neighbor_alltoall(self, sendobj: list[Any]) -> list[Any]:
        if len(sendobj) != self.outdegree:
            raise ValueError(f"neighbor_alltoall needs a sequence of {self.outdegree} items")
        parts = [pickle.dumps(x, pickle.HIGHEST_PROTOCOL) for x in sendobj]
        slen = np.array([len(p) for p in parts], dtype=np.int64)
        rlen = np.full(self.indegree, -1, dtype=np.int64)
        self.Neighbor_alltoall(slen, rlen)
        counts = np.maximum(rlen, 0)
        buf = bytearray(int(counts.sum()))
        self.Neighbor_alltoallv([b"".join(parts), (slen, _displs(slen)), MPI.BYTE],
                                [buf, (counts, _displs(counts)), MPI.BYTE])
        return _unpickled(buf, rlen)


def _displs(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=out[1:])
    return out


def _unpickled(buf: bytearray, lengths: np.ndarray) -> list[Any]:
    view, pos = memoryview(buf), 0
    out: list[Any] = []
    for n in lengths.tolist():
        if n < 0:
            out.append(None)            # a PROC_NULL neighbor
            continue
        out.append(pickle.loads(view[pos:pos + n]))
        pos += n
    return out


class UlfmCartcomm(_TopoObjects, UlfmComm, MPI.Cartcomm):
    """A planaria ULFM communicator that is an ``MPI.Cartcomm`` (made by ``Create_cart``, ``Sub``...)."""


class UlfmGraphcomm(_TopoObjects, UlfmComm, MPI.Graphcomm):
    """A planaria ULFM communicator that is an ``MPI.Graphcomm`` (made by ``Create_graph``)."""


class UlfmDistgraphcomm(_TopoObjects, UlfmComm, MPI.Distgraphcomm):
    """A planaria ULFM communicator that is an ``MPI.Distgraphcomm`` (made by ``Create_dist_graph(_adjacent)``)."""


class UlfmIntercomm(_Failures, MPI.Intercomm):
    """An ``MPI.Intercomm`` (made by ``Create_intercomm``) whose calls raise planaria's errors and whose
    ``Merge`` gives a planaria ``UlfmComm``. planaria's own ``Comm`` API (object collectives built from
    buffer ones, recovery) is for intracommunicators, so this class has mpi4py's methods only."""

    backend = "ulfm"

    def __init__(self, mpi_comm: Any) -> None:
        self._c = _plain(mpi_comm)
        self._c.Set_errhandler(MPI.ERRORS_RETURN)

    def _pending(self, parent: _Failures, rank: int, size: int) -> None:
        self._c = _plain(self)
        self._msgfault = parent._msgfault
        self._ml_on = False
        rehook(self)

    def __repr__(self) -> str:
        return f"<planaria.UlfmIntercomm size={self.size} remote_size={self.remote_size}>"


#: planaria's class for each mpi4py communicator class (most derived first)
_CLASSES: tuple[tuple[type[MPI.Comm], type[_Failures]], ...] = (
    (MPI.Cartcomm, UlfmCartcomm), (MPI.Graphcomm, UlfmGraphcomm), (MPI.Distgraphcomm, UlfmDistgraphcomm),
    (MPI.Intercomm, UlfmIntercomm), (MPI.Intracomm, UlfmComm))
_PLAIN_TYPES = frozenset(k for k, _ in _CLASSES)


def _plain(c: Any) -> Any:
    """A plain mpi4py communicator of ``c``'s class with ``c``'s handle (``c`` itself when it is one)."""
    if type(c) in _PLAIN_TYPES:
        return c
    for kind, _ in _CLASSES:
        if isinstance(c, kind):
            return kind(c)
    return MPI.Intracomm(c)


def ulfm_comm(mpi_comm: Any) -> Any:
    """The planaria ULFM communicator of ``mpi_comm``'s class (``UlfmCartcomm`` for a ``Cartcomm``...)."""
    for kind, cls in _CLASSES:
        if isinstance(mpi_comm, kind):
            return _ready(cls)(mpi_comm)
    raise TypeError(f"not an mpi4py communicator: {type(mpi_comm).__name__}")


#: mpi4py's persistent point-to-point calls (the other ``..._init`` calls are collectives)
_P2P_INIT = frozenset({"Send_init", "Ssend_init", "Bsend_init", "Rsend_init", "Recv_init",
                       "Psend_init", "Precv_init"})
#: mpi4py calls that return a communicator still being made (usable once their request completes)
_NONBLOCKING_MAKERS = frozenset({"Idup", "Idup_with_info", "Ishrink"})


def _made(out: Any, parent: _Failures, maker: str = "") -> Any:
    """What an mpi4py call returned, with its communicators and requests made planaria's.

    A communicator becomes the planaria class of its mpi4py class, carrying ``parent``'s message
    faults (a null one stays mpi4py's ``COMM_NULL``); one that mpi4py made of the caller's own class
    (``Clone``, ``Idup``: ``type(self)``, without running ``__init__``) is set up in place. A request
    becomes a ``_Req`` (``_PReq`` when persistent) whose calls raise planaria's errors.
    """
    if isinstance(out, MPI.Comm):
        if isinstance(out, _Failures):
            if "_c" not in out.__dict__:
                if maker in _NONBLOCKING_MAKERS:
                    same = maker != "Ishrink"
                    out._pending(parent, parent.rank if same else -1, parent.size if same else -1)
                else:
                    type(out).__init__(out, out)
                    out._msgfault = parent._msgfault
                    rehook(out)
            return out
        if out == MPI.COMM_NULL:
            return out
        for kind, cls in _CLASSES:
            if isinstance(out, kind):
                cls = _ready(cls)
                if maker in _NONBLOCKING_MAKERS:
                    new = cls.__new__(cls, out)
                    new._pending(parent, -1, -1)
                    return new
                new = cls(out)
                new._msgfault = parent._msgfault
                rehook(new)
                return new
        return out
    if isinstance(out, MPI.Request):
        if isinstance(out, Request):
            return out
        if isinstance(out, MPI.Prequest):
            p = (_SyncPReq if maker in _SYNC_SENDS else _RecvPReq if maker == "Recv_init" else _PReq)(out, parent)
            p._collective = maker.endswith("_init") and maker not in _P2P_INIT
            return p
        if type(out) is MPI.Request:
            if maker in _POLLED_MAKERS:
                return _Polled(out, parent)
            if maker in _SYNC_SENDS:
                return _SyncReq(out, parent)
            if parent._ml_on and maker in msglog.NONBLOCKING_COLLECTIVES:
                return _logged(out, parent, maker, -1, -1, None)     # the log reads ``Wait(Iallreduce)``
            return _Req(out, parent)
        return out                      # a generalized request: mpi4py's
    if isinstance(out, tuple | list) and any(isinstance(x, MPI.Comm | MPI.Request) for x in out):
        return type(out)(_made(x, parent, maker) for x in out)
    return out


def _wrapper(name: str, fn: Any) -> Callable[..., Any]:
    """mpi4py's method ``fn`` on the same object, with ULFM's errors raised as planaria's and what
    it makes made planaria's (``_made``). A collective, a send or a communicator maker also keeps
    the message log's counters of a recorded communicator (``_counting``)."""
    if name in _FAILURE_BLIND:
        return _named(_counting(name, fn, guarded=True), name, fn)
    if name in _MPROBES:
        return _named(_probing(name, fn), name, fn)
    if name in msglog.NONBLOCKING_COLLECTIVES and name not in _NONBLOCKING_MAKERS and name != "Iagree":
        return _named(_posting(name, fn), name, fn)
    if (name in msglog.COLLECTIVES or name in msglog.NONBLOCKING_COLLECTIVES
            or name in msglog.SENDS):
        return _named(_counting(name, fn, guarded=_guarded(name)), name, fn)
    if _guarded(name):
        return _named(_counting(name, fn, guarded=True), name, fn)

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(self, *args, **kwargs)
        except MPI.Exception as e:
            self._reraise(e)
        if out is None or out.__class__ in _SCALARS:
            return out
        return _made(out, self, name)
    return _named(call, name, fn)


#: calls ULFM itself runs on a revoked communicator (they are how a program recovers)
_RUN_WHEN_REVOKED = frozenset({"Iagree", "Ishrink", "Agree", "Shrink", "Revoke", "Ack_failed", "Get_failed"})


def _guarded(name: str) -> bool:
    """Calls that check the revoke at entry: Open MPI 5.0.11's ULFM lets nonblocking and persistent
    calls made on a communicator already known revoked complete locally (``Isend``, ``Ireduce``,
    ``Bsend_init``...), ``Idup`` corrupt the heap, ``Isendrecv``, ``Create_group`` and
    ``Create_dist_graph`` wait forever, where ULFM says they raise ``MPI_ERR_REVOKED``. (A revoke
    while ranks wait: ``Isendrecv``'s request polls, ``Create_dist_graph`` first meets in an
    ``Ibarrier``, which a revoke ends; ``Create_group``, called by its members only, has no such
    meeting place and still waits.)"""
    if name in _RUN_WHEN_REVOKED or name.startswith("Is_") or name == "Iflush_buffer":
        return False
    nonblocking = name[:1] == "I" and name[1:2].islower()
    return (nonblocking or name.startswith(("isend", "issend", "ibsend", "irecv", "improbe")) or name.endswith("_init")
            or name in ("Create_group", "Create_dist_graph"))


#: prefix reductions that rank 0 completes alone: Open MPI 5.0.11 lets it start and complete them
#: after a failure it knows of, where any other collective raises; planaria raises at entry
_FAILURE_BLIND = frozenset({"Iscan", "Iexscan", "Scan_init", "Exscan_init"})


def _counting(name: str, fn: Any, guarded: bool = False) -> Callable[..., Any]:
    """``_wrapper``'s call for a collective (counted on entry), a send (counted per destination
    when posted) or a call making a communicator (recorded as a child: ``msglog.MAKERS``); a
    ``guarded`` one first raises ``RevokedError`` when the communicator is known revoked."""
    send = name in msglog.SENDS
    collective = name in msglog.COLLECTIVES or name in msglog.NONBLOCKING_COLLECTIVES
    replace = name == "Sendrecv_replace"
    kind = msglog.MAKERS.get(name)
    meet = name == "Create_dist_graph"
    blind = name in _FAILURE_BLIND
    sync = name in ("Ssend", "ssend")

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if guarded and _IS_REVOKED(self):
            raise self._convert_revoked()
        if blind:
            failed = self._known_failed()
            if failed:
                self._saw(failed)
                raise self._ml_noted(ProcFailedError(failed))
        on = self._ml_on
        if on:
            if send:
                dest = args[1] if len(args) > 1 else kwargs.get("dest", -1)
                if isinstance(dest, int) and dest >= 0:
                    self._ml_sent[dest] += 1
            elif collective:
                self._ml_seq += 1
        try:
            if meet:        # all ranks first meet in a barrier that a revoke ends (the call itself would wait on)
                MPI.Intracomm.Ibarrier(self).Wait()
            out = fn(self, *args, **kwargs)
        except MPI.Exception as e:
            self._reraise(e)
        if sync and _IS_REVOKED(self):      # see _SyncReq
            raise self._convert_revoked()
        if on and replace:                  # its receive, from a named source, completed
            source = args[3] if len(args) > 3 else kwargs.get("source", -1)
            if isinstance(source, int) and source >= 0:
                self._ml_recvd[source] += 1
        if out is None or out.__class__ in _SCALARS:
            return out
        made = _made(out, self, name)
        if isinstance(made, _Polled):       # the ranks whose failure ends its wait
            got = msglog.arguments(name, args, kwargs)
            made._peers = frozenset(int(got.get(k, -1)) for k in ("dest", "source"))
            if on and int(got.get("source", -1)) >= 0:
                made._recv_from = int(got["source"])
        elif on and isinstance(made, _RecvPReq):
            source = msglog.arguments(name, args, kwargs).get("source", -1)
            made._recv_from = source if isinstance(source, int) and source >= 0 else -1
        if on and kind is not None:         # every member made it (or got COMM_NULL): same ids everywhere
            self._ml_child(made if isinstance(made, Comm) else None, kind)
        return made
    return call


def _posting(name: str, fn: Any) -> Callable[..., Any]:
    """``_wrapper``'s call for a nonblocking collective (``Iallreduce``...): refused on a communicator
    known revoked (``_guarded``), counted on entry, its request made a ``_Req`` directly (no
    ``_made``: the call's cost is the collective's, a microsecond less than the general path)."""
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _IS_REVOKED(self):
            raise self._convert_revoked()
        if self._ml_on:
            self._ml_seq += 1
            try:
                return _logged(fn(self, *args, **kwargs), self, name, -1, -1, None)
            except MPI.Exception as e:
                raise self._convert(e) from e
        try:
            req = _NEW_REQUEST(_Req, fn(self, *args, **kwargs))    # no Python __new__/__init__: half the cost
        except MPI.Exception as e:
            raise self._convert(e) from e
        req._comm = self
        return req
    return call


def _named(call: Any, name: str, fn: Any) -> Callable[..., Any]:
    """``call`` named as mpi4py's method ``fn``, with a code object of its own: tracebacks and the
    message log's stack reading (``msglog._codes``) then show the mpi4py call, not a shared ``call``."""
    call.__name__ = call.__qualname__ = name
    call.__code__ = call.__code__.replace(co_name=name, co_qualname=name)
    call.__doc__ = getattr(fn, "__doc__", None)
    call.__wrapped__ = fn
    call._planaria_delegate = True
    return call


_SCALARS = frozenset({int, bool, float, str})


def _static(cls: type, name: str) -> Any:
    """``cls``'s attribute ``name`` as its class dictionary holds it (a classmethod stays one), like
    ``inspect.getattr_static`` without importing ``inspect`` (and ast, dis) in every rank."""
    for k in cls.__mro__:
        if name in vars(k):
            return vars(k)[name]
    return getattr(cls, name)


class _Unmade:
    """A class's wrapper of mpi4py's method ``raw`` (``_wrapper``) not made yet: it is made, and
    takes this placeholder's place in ``owner``'s dictionary, when first read. A rank calls few of
    the ~100 methods, and making them all was about 0.6 ms of every rank's start."""

    __slots__ = ("owner", "name", "raw")
    _planaria_delegate = True

    def __init__(self, owner: type, name: str, raw: Any) -> None:
        self.owner, self.name, self.raw = owner, name, raw

    def made(self) -> Any:
        """The wrapper, made and put in place if this is its first read (two threads at once may
        both make one: either is right, and the class keeps one)."""
        fn = _wrapper(self.name, self.raw)
        if vars(self.owner).get(self.name) is self:
            setattr(self.owner, self.name, fn)
            _count_class()          # the message log's table of operation methods reads class dictionaries
        return _static(self.owner, self.name)

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self.made().__get__(obj, objtype)


def _delegate(cls: type, mpi_cls: type) -> None:
    """Give ``cls`` a wrapper (``_wrapper``, made on first use: ``_Unmade``) for every public method
    of ``mpi_cls`` that planaria's classes in ``cls``'s hierarchy do not define themselves. Class
    methods (``Get_parent``, ``Create_from_group``...) and properties stay mpi4py's: they take no
    communicator, or only read local attributes."""
    own: set[str] = set()
    inherited: dict[str, Any] = {}          # wrappers (made or not) of planaria's classes, nearest first
    for k in cls.__mro__:
        if k.__module__.startswith("planaria."):
            for n, v in vars(k).items():
                if getattr(v, "_planaria_delegate", False):
                    inherited.setdefault(n, v)
                else:
                    own.add(n)
    for name in dir(mpi_cls):
        if name.startswith("_") or name in own:
            continue
        raw = _static(mpi_cls, name)
        if isinstance(raw, classmethod | staticmethod) or not callable(raw):
            continue
        have = inherited.get(name)
        if have is not None and getattr(have, "raw" if isinstance(have, _Unmade) else "__wrapped__", None) is raw:
            continue                                        # inherited wrapper of the same method
        setattr(cls, name, _Unmade(cls, name, raw))


_delegate(UlfmComm, MPI.Intracomm)
#: the other classes get their wrappers when their first communicator is made (``_ready``): a rank
#: that makes no Cartesian, graph or intercommunicator does not pay for their ~190 (about 2 ms of
#: its start)
_UNDELEGATED: dict[type, type] = {UlfmCartcomm: MPI.Cartcomm, UlfmGraphcomm: MPI.Graphcomm,
                                  UlfmDistgraphcomm: MPI.Distgraphcomm, UlfmIntercomm: MPI.Intercomm}
_DELEGATING = threading.Lock()


def _ready(cls: type[_C]) -> type[_C]:
    """``cls`` with its wrappers, made now if this is its first communicator (any thread)."""
    if cls in _UNDELEGATED:
        with _DELEGATING:
            mpi_cls = _UNDELEGATED.get(cls)
            if mpi_cls is not None:
                _delegate(cls, mpi_cls)
                del _UNDELEGATED[cls]
    return cls
