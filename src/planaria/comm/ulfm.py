"""``Comm`` on real ULFM (Open MPI 5 run with ``--with-ft ulfm``): thin, errors mapped to planaria's.

Each method also keeps the message log's counters when its communicator is recorded (one test
of ``_ml_on`` otherwise; see ``comm/base.py``)."""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

from planaria.comm.base import Comm, Request
from planaria.comm import errors as _errors
from planaria.comm.errors import FailureError, ProcFailedError, RevokedError

_FAILED_CLASSES = (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING)


def ulfm_available() -> bool:
    """True when this MPI library has the ULFM calls and fault tolerance is switched on for this run."""
    import os
    if not all(hasattr(MPI.Comm, n) for n in ("Revoke", "Shrink", "Agree", "Ack_failed", "Get_failed")):
        return False
    if "Open MPI" in MPI.Get_library_version():
        return os.environ.get("OMPI_MCA_mpi_ft_enable", "0") not in ("0", "", "false")
    return True


class _Req(Request):
    __slots__ = ("_r", "_comm")

    def __init__(self, req: Any, comm: UlfmComm) -> None:
        self._r = req
        self._comm = comm

    def Test(self) -> bool:
        try:
            return bool(self._r.Test())
        except MPI.Exception as e:
            raise self._comm._convert(e) from e

    def Wait(self) -> None:
        try:
            self._r.Wait()
        except MPI.Exception as e:
            raise self._comm._convert(e) from e

    def Cancel(self) -> None:
        try:
            self._r.Cancel()
        except MPI.Exception:
            pass


class _LReq(_Req):
    """A request of a recorded communicator: what its ``Wait`` waits for, and a receive counted once done."""

    __slots__ = ("_op", "_peer", "_tag", "_buf", "_count")

    def __init__(self, req: Any, comm: UlfmComm, op: str, peer: int, tag: int, buf: Any, count: int) -> None:
        # count: the source (communicator rank) a receive adds to when it completes; -1 for sends and wildcards
        self._r, self._comm, self._op, self._peer, self._tag, self._buf, self._count = req, comm, op, peer, tag, buf, count

    def Test(self) -> bool:
        try:
            done = bool(self._r.Test())
        except MPI.Exception as e:
            raise self._comm._convert(e) from e
        if done and self._count >= 0:
            self._comm._ml_recvd[self._count] += 1
            self._count = -1
        return done

    def Wait(self) -> None:
        try:
            self._r.Wait()
        except MPI.Exception as e:
            raise self._comm._convert(e) from e
        if self._count >= 0:
            self._comm._ml_recvd[self._count] += 1
            self._count = -1


class _Done(Request):
    """An already-complete request (a dropped message's send)."""

    def Test(self) -> bool:
        return True

    def Wait(self) -> None:
        return None

    def Cancel(self) -> None:
        return None


class _ObjRecv(Request):
    """Object irecv via matched probe, so any message size works (mpi4py's irecv needs a buffer size)."""

    __slots__ = ("_comm", "_peer", "_tag", "_done", "_obj")
    _op = "irecv"

    def __init__(self, comm: UlfmComm, source: int, tag: int) -> None:
        self._comm, self._peer, self._tag = comm, source, tag
        self._done, self._obj = False, None

    def Test(self) -> bool:
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

    def Wait(self) -> None:
        if not self._done:
            self._obj = self._comm.recv(self._peer, self._tag)     # counted there
            self._done = True

    def _value(self) -> Any:
        return self._obj

    def Cancel(self) -> None:
        self._done = True


class UlfmComm(Comm):
    """Fault-tolerant communicator over real ULFM."""

    backend = "ulfm"

    def __init__(self, mpi_comm: Any) -> None:
        mpi_comm.Set_errhandler(MPI.ERRORS_RETURN)
        super().__init__(mpi_comm)

    # -- error mapping -------------------------------------------------------------
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
        out = self._error_of(e)
        if self._ml_on and isinstance(out, FailureError):
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
            table = self._wtable = MPI.Group.Translate_ranks(g, list(range(self.size)), w)
            g.Free(), w.Free()
        return table[rank]

    # -- point-to-point ------------------------------------------------------------------
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        if self._msgfault is None or self._outgoing(dest):
            try:
                self._c.Send(buf, dest, tag)
            except MPI.Exception as e:
                raise self._convert(e) from e
        if self._ml_on and dest >= 0:           # a dropped message too
            self._ml_sent[dest] += 1

    def Recv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> None:
        try:
            self._c.Recv(buf, source, tag, status)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on and source >= 0:
            self._ml_recvd[source] += 1

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        if self._msgfault is not None and not self._outgoing(dest):
            if self._ml_on and dest >= 0:       # a dropped message counts as sent
                self._ml_sent[dest] += 1
            return _Done()
        try:
            req = self._c.Isend(buf, dest, tag)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:
            if dest >= 0:                       # counted when posted
                self._ml_sent[dest] += 1
            return _LReq(req, self, "Isend", dest, tag, buf, -1)
        return _Req(req, self)

    def Irecv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> Request:
        try:
            req = self._c.Irecv(buf, source, tag)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:
            return _LReq(req, self, "Irecv", source, tag, buf, source if source >= 0 else -1)
        return _Req(req, self)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG, status: Any = None) -> None:
        if self._msgfault is not None and not self._outgoing(dest):
            self.Recv(recvbuf, source, recvtag, status)        # counts the receive
            if self._ml_on and dest >= 0:
                self._ml_sent[dest] += 1
            return
        try:
            self._c.Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:
            if dest >= 0:
                self._ml_sent[dest] += 1
            if source >= 0:
                self._ml_recvd[source] += 1

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        if self._msgfault is None or self._outgoing(dest):
            try:
                self._c.send(obj, dest, tag)
            except MPI.Exception as e:
                raise self._convert(e) from e
        if self._ml_on and dest >= 0:
            self._ml_sent[dest] += 1

    def recv(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status: Any = None) -> Any:
        try:
            obj = self._c.recv(None, source, tag, status)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on and source >= 0:
            self._ml_recvd[source] += 1
        return obj

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:
        if self._msgfault is not None and not self._outgoing(dest):
            if self._ml_on and dest >= 0:       # a dropped message counts as sent
                self._ml_sent[dest] += 1
            return _Done()
        try:
            req = self._c.isend(obj, dest, tag)
        except MPI.Exception as e:
            raise self._convert(e) from e
        if self._ml_on:
            if dest >= 0:
                self._ml_sent[dest] += 1
            return _LReq(req, self, "isend", dest, tag, None, -1)
        return _Req(req, self)

    def irecv(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG) -> Request:
        return _ObjRecv(self, source, tag)

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
        try:
            self._c.Bcast(buf, root)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = None, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Reduce(sendbuf, recvbuf, MPI.SUM if op is None else op, root)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Allreduce(sendbuf, recvbuf, MPI.SUM if op is None else op)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Gather(sendbuf, recvbuf, root)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Gatherv(sendbuf, recvbuf, root)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Allgather(sendbuf, recvbuf)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Allgatherv(sendbuf, recvbuf)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Scatter(sendbuf, recvbuf, root)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Scatterv(sendbuf, recvbuf, root)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Alltoall(sendbuf, recvbuf)
        except MPI.Exception as e:
            raise self._convert(e) from e

    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
        try:
            self._c.Alltoallv(sendbuf, recvbuf)
        except MPI.Exception as e:
            raise self._convert(e) from e

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
            new = UlfmComm(self._c.Shrink())
        except MPI.Exception as e:
            raise self._convert(e) from e
        new._msgfault = self._msgfault
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

    def dup(self) -> UlfmComm:
        if self._ml_on:
            self._ml_seq += 1
        try:
            new = UlfmComm(self._c.Dup())
        except MPI.Exception as e:
            raise self._convert(e) from e
        new._msgfault = self._msgfault
        if self._ml_on:
            self._ml_child(new, "d")
        return new

    def split(self, color: int | None = 0, key: int = 0) -> UlfmComm | None:
        if self._ml_on:
            self._ml_seq += 1
        c = MPI.UNDEFINED if color is None else color
        try:
            newc = self._c.Split(c, key)
        except MPI.Exception as e:
            raise self._convert(e) from e
        new = None if newc == MPI.COMM_NULL else UlfmComm(newc)
        if new is not None:
            new._msgfault = self._msgfault
        if self._ml_on:
            self._ml_child(new, "s", color)
        return new

    def free(self) -> None:
        c, self._c = self._c, MPI.COMM_NULL
        if c == MPI.COMM_NULL or c == MPI.COMM_WORLD:
            return
        if not self._known_failed_of(c):
            try:
                c.Free()
            except MPI.Exception:
                pass

    # -- the rest of mpi4py's communicator API --------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        """Any other name of mpi4py's communicator (``Scan``, ``Ssend``, ``Probe``, ``Ibarrier``,
        ``Create_cart``, a Cartesian communicator's ``Shift``...): the underlying communicator's,
        with ULFM's errors raised as planaria's and the communicators it makes wrapped as planaria
        communicators. Real ULFM makes these calls raise on a failure like the wrapped ones; the
        pickle collectives mpi4py runs on a hidden duplicate (which hang after a failure) are
        not delegated: ``Comm`` has failure-safe ones."""
        if name.startswith("_") or name in _UNSAFE_OBJECT_COLLECTIVES:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")
        attr = getattr(self.__dict__.get("_c", MPI.COMM_NULL), name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                out = attr(*args, **kwargs)
            except MPI.Exception as e:
                raise self._convert(e) from e
            return _wrap_made(out, self)
        call.__name__ = call.__qualname__ = name
        call.__doc__ = getattr(attr, "__doc__", None)
        return call

    @staticmethod
    def _known_failed_of(c: Any) -> bool:
        try:
            g = c.Get_failed()
            n = g.Get_size()
            g.Free()
            return n > 0 or bool(c.Is_revoked())
        except MPI.Exception:
            return True


#: mpi4py's pickle collectives that run on a hidden duplicate communicator (see ``comm/base.py``)
_UNSAFE_OBJECT_COLLECTIVES = frozenset({"neighbor_allgather", "neighbor_alltoall"})


def _wrap_made(out: Any, parent: UlfmComm) -> Any:
    """A communicator an mpi4py call made (alone or in a tuple, as ``Idup``'s): a planaria one."""
    if isinstance(out, MPI.Intracomm) and not isinstance(out, UlfmComm):
        if out == MPI.COMM_NULL:
            return out
        new = UlfmComm(out)
        new._msgfault = parent._msgfault
        return new
    if isinstance(out, tuple | list) and any(isinstance(x, MPI.Intracomm) for x in out):
        return type(out)(_wrap_made(x, parent) for x in out)
    return out
