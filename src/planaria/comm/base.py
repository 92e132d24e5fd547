"""The backend-independent part of ``Comm``: mpi4py-style names, object forms over buffer forms.

mpi4py's lower-case (pickle) reductions run on a hidden duplicate communicator that
ULFM's revoke never reaches, so after a failure they can hang. Here every object
collective is built from the *buffer* collectives of the same communicator (``bcast`` and
``allgather``: a round of fixed-size slots holding each pickle's length and, when it is short,
the pickle itself, then the rest of longer pickles; the others: a length exchange, then the
pickled bytes), which raise ``ProcFailedError``/``RevokedError``
like any other call. Backends implement the buffer forms and the fault-tolerance calls.

With run-time detection on, the backends' own methods keep the message log's counters
(``comm/msglog.py``): a collective method adds one to ``_ml_seq`` on entry, a completed
point-to-point message adds one to ``_ml_sent``/``_ml_recvd`` of its peer, all behind one test
of ``_ml_on`` (False for a communicator the log does not record). Nothing else is done per
call: what a call waits for is read from the application thread's stack when someone asks.

``import planaria`` and the tools import this module without starting MPI, so mpi4py is imported
inside the functions that need it (importing ``mpi4py.MPI`` initializes MPI).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import pickle
import sys
import time
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Sequence

from planaria._lazy import np
from planaria import errors as _errors
from planaria.errors import failure_raised

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any, Literal, NoReturn, Protocol, TypeVar

    E = TypeVar("E", bound=BaseException)

_PROTO = pickle.HIGHEST_PROTOCOL
_I64 = "int64"                       # numpy dtype name (numpy is imported on first use)


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, _PROTO)


#: An object collective's first round moves, per rank, one slot of ``SLOT`` bytes: the pickle's
#: length (a native 8-byte integer) and its first ``HEAD`` bytes. An int, a float or a short tuple
#: fits, and then the collective is that one buffer collective; a longer pickle sends its rest in a
#: second round (that of the length exchange the slot replaces). ``allgather`` uses slots up to
#: ``SLOT_RANKS`` ranks: beyond, every rank receiving a slot per rank costs more than the round saved.
SLOT = 128
_LEN = 8
HEAD = SLOT - _LEN
SLOT_RANKS = 1024


_ORDER = sys.byteorder                # a slot's length is a native int64 (read back with memoryview.cast)


def _fill_slot(slot: bytearray, data: bytes) -> None:
    """Write ``data``'s length and first ``HEAD`` bytes into ``slot``."""
    n = len(data)
    slot[:_LEN] = n.to_bytes(_LEN, _ORDER)
    slot[_LEN:_LEN + n] = data if n <= HEAD else memoryview(data)[:HEAD]


def _loads(comm: Comm, data: Any) -> Any:
    """Unpickle one rank's part of an object collective.

    Open MPI with ULFM was seen to complete a byte collective at some ranks without the part of
    a process that failed during it: the part stays as allocated (zeros). That is a failure to
    recover from, not the program's error, and must not pass as data.
    """
    try:
        return pickle.loads(data)
    except Exception:
        if any(memoryview(data).cast("B")):
            raise                       # a real pickle that does not load here: the program's error
        failed = comm.get_failed()
        raise failure_raised(_errors.ProcFailedError(
            failed, f"an object collective ended without every rank's part "
                    f"(a process failed during it; known failed: {sorted(failed) or '?'})")) from None


def _offsets(lengths: np.ndarray) -> np.ndarray:
    displs = np.zeros(len(lengths), dtype=_I64)
    np.cumsum(lengths[:-1], out=displs[1:])
    return displs


def _starts(lengths: list[int]) -> list[int]:
    """Where each of ``lengths`` starts when they are laid end to end."""
    return list(itertools.accumulate(lengths[:-1], initial=0))


def _split(comm: Comm, buf: bytearray | bytes, lengths: Any) -> list[Any]:
    view = memoryview(buf)
    out, pos = [], 0
    for n in (lengths.tolist() if hasattr(lengths, "tolist") else lengths):
        out.append(_loads(comm, view[pos:pos + n]))
        pos += n
    return out


#: how many subclasses of Comm and Request have been defined: the message log rebuilds its table of
#: their operation methods only when this changes (it reads the stack at every service tick)
CLASSES_DEFINED = 0


def _count_class() -> None:
    global CLASSES_DEFINED
    CLASSES_DEFINED += 1


class Request(ABC):
    """A pending non-blocking operation; ``wait``/``Wait`` raise the same failure errors as blocking calls.

    No ``__slots__`` here: subclasses keep a ``__dict__`` and weak references (the sim backend
    keeps its requests in weak containers); the hot ones add slots of their own."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _count_class()

    @abstractmethod
    def Test(self, status: Any = None) -> bool:
        """Return True when complete (raises on failure)."""

    @abstractmethod
    def Wait(self, status: Any = None) -> bool | None:
        """Block until complete (raises on failure); mpi4py's requests return True."""

    def test(self) -> tuple[bool, Any]:
        """Object form of Test: (done, received object or None)."""
        done = self.Test()
        return done, (self._value() if done else None)

    def wait(self) -> Any:
        """Object form of Wait: the received object for an irecv, else None."""
        self.Wait()
        return self._value()

    def _value(self) -> Any:
        return None

    @abstractmethod
    def Cancel(self) -> None:
        """Cancel the request (receives only; best effort)."""


def named(call: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Name a method made by a factory ``name``, code object included: each gets its own, so the
    message log's stack reading (``msglog._codes``) and tracebacks show the mpi4py call."""
    call.__name__ = call.__qualname__ = name
    call.__code__ = call.__code__.replace(co_name=name, co_qualname=name)
    return call


class Receiving(Request):
    """A request whose completion is a received message: its own ``Test`` and ``Wait`` call
    ``_received`` (which counts it in the message log) once the base class's call says it is done."""

    __slots__ = ()

    def _received(self) -> None:
        raise NotImplementedError

    def Test(self, status: Any = None) -> bool:
        done = super().Test(status)  # type: ignore[safe-super]  # a concrete request class follows in the MRO
        if done:
            self._received()
        return done

    def Wait(self, status: Any = None) -> Literal[True]:
        super().Wait(status)  # type: ignore[safe-super]  # a concrete request class follows in the MRO
        self._received()
        return True


def rehook(comm: Any) -> None:
    """Recompute ``comm._hooks`` after its ``_ml_on`` or ``_msgfault`` changed (every place that sets
    them calls this): one attribute test is what a point-to-point call costs when both are off."""
    comm._hooks = bool(comm._ml_on) or comm._msgfault is not None


if TYPE_CHECKING:
    class Recorder(Protocol):
        """What a communicator recorded in the message log tells it (``comm/msglog.py`` implements it)."""

        def failed(self, comm: Any, exc: BaseException) -> None: ...

        def wildcard(self, comm: Comm, source: int, tag: int) -> None: ...

        def child(self, parent: Comm, new: Comm | None, kind: str, color: Any = None) -> None: ...


#: the message log, installed by ``comm/msglog.py`` when it is imported (it builds on this module,
#: so this one cannot import it); only a recorded communicator (``_ml_on``) reaches it, and only
#: the message log records one
recorder: Recorder | None = None


def noted(comm: Any, exc: E) -> E:
    """``exc``, a failure error ``comm`` is about to raise: remembered for finalize
    (``failure_raised``) and recorded in the message log when ``comm`` is recorded, unless
    planaria's recovery raised it in its own calls (``own_calls``)."""
    failure_raised(exc)
    if comm._ml_on and recorder is not None and not _OWN_CALLS:
        recorder.failed(comm, exc)
    return exc


#: how many ``own_calls`` blocks are running (on the application thread, which makes the calls)
_OWN_CALLS = 0


class own_calls:
    """A block of planaria's own recovery protocol (its agreement, shrink, the spares' wait): the
    failure errors its calls raise and handle are that protocol's, not the program's, and the
    message log does not record them. Recording one costs about 0.1 ms of CPU on a recovery's
    path, where every rank's CPU time adds to the recovery's when ranks share cores."""

    def __enter__(self) -> None:
        global _OWN_CALLS
        _OWN_CALLS += 1

    def __exit__(self, *exc: object) -> None:
        global _OWN_CALLS
        _OWN_CALLS -= 1


class Comm(ABC):
    """A communicator that survives process failures (ULFM semantics).

    Buffer forms (``Send``, ``Allreduce``...) take numpy arrays or mpi4py buffer specs;
    object forms (``send``, ``allreduce``...) take any picklable object. Every call raises
    ``ProcFailedError`` when it involves a failed process and ``RevokedError`` once the
    communicator is revoked.
    """

    backend: str = "?"
    # the message log's state of a recorded communicator (set by ``msglog``, read only when ``_ml_on``)
    _ml_id: str
    _ml_seq: int                   # collectives entered
    _ml_kids: int                  # communicators made from it
    _ml_sent: list[int]            # messages sent, per destination rank
    _ml_recvd: list[int]           # receives completed, per source rank
    _fl: int                       # its flight-record slot (0: none)
    _obj_locks: dict[str, Any]     # mpi4py's lock per object collective (``_lock``), once looked up

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _count_class()

    def __init__(self, mpi_comm: Any) -> None:
        self._c = mpi_comm
        self._rank: int = mpi_comm.Get_rank()
        self._size: int = mpi_comm.Get_size()
        self._msgfault: Callable[[int], float | None] | None = None
        self._ml_on = False        # recorded in the message log (msglog.enable/set_active switch it)
        self._hooks = False        # either of the two: point-to-point calls take their slower path

    # -- mpi4py-style accessors ------------------------------------------------
    # Properties, not instance attributes: a backend's communicator may also be an mpi4py
    # ``Intracomm``, whose ``rank`` and ``size`` are read-only properties that an instance
    # attribute cannot shadow. The value is read once, at creation.
    @property
    def rank(self) -> int:
        """This process's rank (mpi4py's ``rank``)."""
        return self._rank

    @rank.setter
    def rank(self, value: int) -> None:
        self._rank = value

    @property
    def size(self) -> int:
        """Number of processes (mpi4py's ``size``)."""
        return self._size

    @size.setter
    def size(self, value: int) -> None:
        self._size = value

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    @property
    def mpi(self) -> Any:
        """The underlying mpi4py communicator (for calls planaria does not wrap)."""
        return self._c

    def world_ranks(self) -> list[int]:
        """Each member's rank in the job's world communicator, in this communicator's rank order
        (computed locally, no messages): names for processes that stay the same across dup, split
        and shrink."""
        return [int(self._world_of(r)) for r in range(self.size)]

    def __repr__(self) -> str:
        return f"<planaria.Comm backend={self.backend} rank={self.rank} size={self.size}>"

    # -- buffer forms (backend) --------------------------------------------------
    @abstractmethod
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None: ...

    @abstractmethod
    def Recv(self, buf: Any, source: int = ..., tag: int = ..., status: Any = None) -> None: ...

    @abstractmethod
    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Request: ...

    @abstractmethod
    def Irecv(self, buf: Any, source: int = ..., tag: int = ...) -> Request: ...

    @abstractmethod
    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = ..., recvtag: int = ..., status: Any = None) -> None: ...

    @abstractmethod
    def Barrier(self) -> None: ...

    @abstractmethod
    def Bcast(self, buf: Any, root: int = 0) -> None: ...

    @abstractmethod
    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = None, root: int = 0) -> None: ...

    @abstractmethod
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None: ...

    @abstractmethod
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None: ...

    @abstractmethod
    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None: ...

    @abstractmethod
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None: ...

    @abstractmethod
    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None: ...

    @abstractmethod
    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None: ...

    @abstractmethod
    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None: ...

    @abstractmethod
    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None: ...

    @abstractmethod
    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None: ...

    # -- fault tolerance (backend) ----------------------------------------------
    @abstractmethod
    def revoke(self) -> None:
        """Make every pending and future operation on this communicator raise RevokedError, at every rank."""

    @abstractmethod
    def is_revoked(self) -> bool:
        """True once this communicator has been revoked (locally known)."""

    @abstractmethod
    def shrink(self) -> Comm:
        """A new communicator holding the surviving processes, ranks in the same order."""

    @abstractmethod
    def agree(self, flag: bool | int) -> bool | int:
        """Fault-tolerant AND of ``flag`` over the living processes.

        Raises ``ProcFailedError`` at every participant when some failure is not yet
        acknowledged (``ack_failed``) everywhere; call ``ack_failed`` and retry.
        """

    @abstractmethod
    def ack_failed(self) -> int:
        """Acknowledge every locally known failure; returns how many are acknowledged."""

    @abstractmethod
    def get_failed(self) -> set[int]:
        """Ranks of this communicator known locally to have failed."""

    @abstractmethod
    def dup(self) -> Comm:
        """A duplicate communicator with the same backend."""

    @abstractmethod
    def split(self, color: int | None = 0, key: int = 0) -> Comm | None:
        """Collective: the communicator of the ranks that passed the same ``color``, ordered by ``key``.

        ``color=None`` (mpi4py: ``MPI.UNDEFINED``) joins no communicator and returns None.
        """

    @abstractmethod
    def free(self) -> None:
        """Release the communicator (local; safe after failures)."""

    # -- mpi4py's names for the calls above (an mpi4py program keeps its spelling) ----------------
    def Dup(self, info: Any = None) -> Comm:
        """mpi4py's ``Dup``: ``dup()``, a planaria communicator (``info`` is accepted and not used)."""
        return self.dup()

    def Free(self) -> None:
        """mpi4py's ``Free``: ``free()``."""
        self.free()

    def Split(self, color: int = 0, key: int = 0) -> Any:
        """mpi4py's ``Split``: ``MPI.UNDEFINED`` gives ``MPI.COMM_NULL``, as in mpi4py."""
        from mpi4py import MPI          # not at the top: importing mpi4py.MPI starts MPI
        new = self.split(None if color == MPI.UNDEFINED else color, key)
        return MPI.COMM_NULL if new is None else new

    def Revoke(self) -> None:
        """mpi4py's ``Revoke``: ``revoke()``."""
        self.revoke()

    def Is_revoked(self) -> bool:
        """mpi4py's ``Is_revoked``: ``is_revoked()``."""
        return self.is_revoked()

    def Shrink(self) -> Comm:
        """mpi4py's ``Shrink``: ``shrink()``, a planaria communicator."""
        return self.shrink()

    def Agree(self, flag: int) -> int:
        """mpi4py's ``Agree``: the bitwise AND of the integer ``flag`` over the living processes."""
        return int(self.agree(int(flag)))

    def Ack_failed(self, num_to_ack: int | None = None) -> int:
        """mpi4py's ``Ack_failed``: acknowledge the locally known failures; returns how many are.

        Acknowledging only the first ``num_to_ack`` of them is not offered: a smaller number than
        the failures known raises ``NotImplementedError``."""
        if num_to_ack is not None and num_to_ack < len(self.get_failed()):
            raise NotImplementedError(f"Ack_failed({num_to_ack}): acknowledging part of the known failures "
                                      f"is not supported on the {self.backend} backend")
        return self.ack_failed()

    def Get_failed(self) -> Any:
        """mpi4py's ``Get_failed``: the failed processes known locally, as an ``MPI.Group`` of this communicator."""
        group = self.Get_group()
        try:
            return group.Incl(sorted(self.get_failed()))
        finally:
            group.Free()

    def Get_group(self) -> Any:
        """mpi4py's ``Get_group``: this communicator's ``MPI.Group`` (the caller frees it)."""
        return self._c.Get_group()

    @property
    def group(self) -> Any:
        """mpi4py's ``group`` property: ``Get_group()``."""
        return self.Get_group()

    def Is_inter(self) -> bool:
        """False: planaria communicators are intracommunicators."""
        return False

    def Is_intra(self) -> bool:
        """True: planaria communicators are intracommunicators."""
        return True

    @property
    def is_inter(self) -> bool:
        return False

    @property
    def is_intra(self) -> bool:
        return True

    def Get_name(self) -> str:
        """mpi4py's ``Get_name``: the name of the underlying MPI communicator."""
        return self._c.Get_name()

    def Set_name(self, name: str) -> None:
        """mpi4py's ``Set_name``."""
        self._c.Set_name(name)

    @property
    def name(self) -> str:
        """mpi4py's ``name`` property (settable, as in mpi4py)."""
        return self.Get_name()

    @name.setter
    def name(self, value: str) -> None:
        self.Set_name(value)

    def Abort(self, errorcode: int = 0) -> NoReturn:
        """mpi4py's ``Abort``: end the whole job with ``errorcode`` (does not return)."""
        self._c.Abort(errorcode)
        raise AssertionError("MPI_Abort returned")          # it does not: the job ends

    # -- object point-to-point -------------------------------------------------
    @abstractmethod
    def send(self, obj: Any, dest: int, tag: int = 0) -> None: ...

    @abstractmethod
    def recv(self, buf: Any = None, source: int = ..., tag: int = ..., status: Any = None) -> Any:
        """mpi4py's ``recv``: an object of any size (``buf`` is deprecated in mpi4py and not needed)."""

    @abstractmethod
    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request: ...

    @abstractmethod
    def irecv(self, buf: Any = None, source: int = ..., tag: int = ...) -> Request:
        """mpi4py's ``irecv``: a receive posted at once into ``buf`` (None: at most 32 KiB)."""

    def irecv_matched(self, source: int | None = None, tag: int | None = None) -> Request:
        """Object receive of any size, matched when it is tested or waited for (a matched probe).

        No MPI receive is posted, so a request dropped untested takes no message (the polling
        idiom ``comm.irecv_matched(src, tag).test()`` is safe) and no buffer size applies; the
        price is that a synchronous send (``ssend``) to it completes only once it is tested.
        ``irecv`` follows mpi4py instead (a receive posted at once, into a buffer). ``None`` is
        any source / any tag. Each backend implements it.
        """
        raise NotImplementedError(f"{type(self).__name__}.irecv_matched")

    def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int | None = None, recvtag: int | None = None, status: Any = None) -> Any:
        """mpi4py's ``sendrecv``: the send is posted first, so two ranks may exchange at once
        (``recvbuf`` is accepted for mpi4py's signature; the object is received whatever its size)."""
        from mpi4py import MPI          # not at the top: importing mpi4py.MPI starts MPI
        req = self.isend(sendobj, dest, sendtag)
        value = self.recv(recvbuf, MPI.ANY_SOURCE if source is None else source,
                          MPI.ANY_TAG if recvtag is None else recvtag, status)
        req.Wait()
        return value

    # -- object collectives, failure-safe (built from buffer collectives) -------
    def barrier(self) -> None:
        self.Barrier()

    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Broadcast a picklable object from ``root``: one ``Bcast`` of a slot (``SLOT``) when
        its pickle fits, else a second one of the rest."""
        byte = _BYTE or _byte()
        with _lock(self, "bcast"):
            slot = bytearray(SLOT)
            data = b""
            if self.rank == root:
                data = _dumps(obj)
                _fill_slot(slot, data)
            self.Bcast(slot, root)
            n = int.from_bytes(slot[:_LEN], _ORDER)
            if n <= HEAD:
                return obj if self.rank == root else _loads(self, memoryview(slot)[_LEN:_LEN + n])
            self._ml_once()
            if self.rank == root:
                self.Bcast([memoryview(data)[HEAD:], n - HEAD, byte], root)
                return obj
            buf = bytearray(n)
            buf[:HEAD] = slot[_LEN:]
            self.Bcast([memoryview(buf)[HEAD:], n - HEAD, byte], root)
            return _loads(self, buf)

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Gather objects to ``root`` (others get None): the lengths, then the pickles."""
        byte = _BYTE or _byte()
        with _lock(self, "gather"):
            data = _dumps(sendobj)
            mine = len(data).to_bytes(_LEN, _ORDER)
            if self.rank != root:
                self.Gather([mine, _LEN, byte], None, root)
                self._ml_once()
                self.Gatherv([data, len(data), byte], None, root)
                return None
            got = bytearray(_LEN * self.size)
            self.Gather([mine, _LEN, byte], [got, _LEN, byte], root)
            self._ml_once()
            lengths = memoryview(got).cast("q").tolist()
            buf = bytearray(sum(lengths))
            self.Gatherv([data, len(data), byte], [buf, (lengths, _starts(lengths)), byte], root)
            return _split(self, buf, lengths)

    def allgather(self, sendobj: Any) -> list[Any]:
        """Every rank gets the list of every rank's object: one ``Allgather`` of slots (``SLOT``)
        when every pickle fits in one, else a second round of the rest of the longer ones."""
        byte = _BYTE or _byte()
        with _lock(self, "allgather"):
            data = _dumps(sendobj)
            n = self.size
            if n > SLOT_RANKS:
                return self._allgather_counted(data)
            mine = bytearray(SLOT)
            _fill_slot(mine, data)
            slots = bytearray(SLOT * n)
            self.Allgather(mine, slots)
            view = memoryview(slots)
            lengths = view.cast("q")[::SLOT // _LEN].tolist()
            if max(lengths) <= HEAD:
                return [_loads(self, view[at:at + k]) for at, k in zip(range(_LEN, SLOT * n, SLOT), lengths, strict=True)]
            self._ml_once()
            starts = _starts(lengths)
            buf = bytearray(sum(lengths))
            for at, k, at_slot in zip(starts, lengths, range(_LEN, SLOT * n, SLOT), strict=True):
                head = min(k, HEAD)
                buf[at:at + head] = view[at_slot:at_slot + head]
            self.Allgatherv([memoryview(data)[HEAD:], max(len(data) - HEAD, 0), byte],
                            [buf, ([max(k - HEAD, 0) for k in lengths],
                                   [at + min(k, HEAD) for at, k in zip(starts, lengths, strict=True)]), byte])
            return _split(self, buf, lengths)

    def _allgather_counted(self, data: bytes) -> list[Any]:
        """``allgather`` on more than ``SLOT_RANKS`` ranks: the lengths, then the pickles."""
        byte = _BYTE or _byte()
        got = bytearray(_LEN * self.size)
        self.Allgather([len(data).to_bytes(_LEN, _ORDER), _LEN, byte], [got, _LEN, byte])
        self._ml_once()
        lengths = memoryview(got).cast("q").tolist()
        buf = bytearray(sum(lengths))
        self.Allgatherv([data, len(data), byte], [buf, (lengths, _starts(lengths)), byte])
        return _split(self, buf, lengths)

    def scatter(self, sendobj: Sequence[Any] | None = None, root: int = 0) -> Any:
        """Rank i gets ``sendobj[i]`` from ``root``: the lengths, then the pickles."""
        byte = _BYTE or _byte()
        with _lock(self, "scatter"):
            mine = bytearray(_LEN)
            if self.rank == root:
                if sendobj is None or len(sendobj) != self.size:
                    raise ValueError(f"scatter needs a sequence of {self.size} items at the root")
                parts = [_dumps(x) for x in sendobj]
                lengths = [len(p) for p in parts]
                self.Scatter([array("q", lengths), _LEN, byte], [mine, _LEN, byte], root)
                self._ml_once()
                buf = bytearray(lengths[root])
                self.Scatterv([b"".join(parts), (lengths, _starts(lengths)), byte], [buf, len(buf), byte], root)
                return sendobj[root]
            self.Scatter(None, [mine, _LEN, byte], root)
            self._ml_once()
            buf = bytearray(int.from_bytes(mine, _ORDER))
            self.Scatterv(None, [buf, len(buf), byte], root)
            return _loads(self, buf)

    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        """Rank i sends ``sendobj[j]`` to rank j; returns what every rank sent to i."""
        if len(sendobj) != self.size:
            raise ValueError(f"alltoall needs a sequence of {self.size} items")
        byte = _BYTE or _byte()
        with _lock(self, "alltoall"):
            parts = [_dumps(x) for x in sendobj]
            slen = [len(p) for p in parts]
            got = bytearray(_LEN * self.size)
            self.Alltoall([array("q", slen), _LEN, byte], [got, _LEN, byte])
            self._ml_once()
            rlen = memoryview(got).cast("q").tolist()
            buf = bytearray(sum(rlen))
            self.Alltoallv([b"".join(parts), (slen, _starts(slen)), byte], [buf, (rlen, _starts(rlen)), byte])
            return _split(self, buf, rlen)

    def allreduce(self, sendobj: Any, op: Any = None) -> Any:
        """Reduce objects with ``op`` (an ``mpi4py.MPI.Op`` or a 2-argument callable; default SUM), result everywhere.

        Built on allgather so the call sequence is the same whatever the values' types.
        """
        return functools.reduce(_opfunc(op), self.allgather(sendobj))

    def reduce(self, sendobj: Any, op: Any = None, root: int = 0) -> Any:
        """Reduce objects with ``op`` to ``root`` (others get None)."""
        items = self.gather(sendobj, root)
        return None if items is None else functools.reduce(_opfunc(op), items)

    def scan(self, sendobj: Any, op: Any = None) -> Any:
        """Inclusive prefix reduction of objects: rank i gets ``op`` over ranks 0..i (built on allgather)."""
        return functools.reduce(_opfunc(op), self.allgather(sendobj)[:self.rank + 1])

    def exscan(self, sendobj: Any, op: Any = None) -> Any:
        """Exclusive prefix reduction of objects: rank i gets ``op`` over ranks 0..i-1 (None at rank 0)."""
        items = self.allgather(sendobj)[:self.rank]
        return functools.reduce(_opfunc(op), items) if items else None

    # -- helpers for backends ----------------------------------------------------
    def _ml_once(self) -> None:
        """Between an object collective's two buffer collectives: the pair counts as one
        collective in ``_ml_seq`` (both inner calls show the same number), so ranks in
        different halves of one object collective are matched as being in the same call."""
        if self._ml_on:
            self._ml_seq -= 1

    def _outgoing(self, dest: int) -> bool:
        """Apply an injected message fault to a send towards ``dest``; False means drop it."""
        fault = self._msgfault
        delay = fault(self._world_of(dest)) if fault is not None else None
        if delay is None:
            return True
        if delay < 0:
            return False
        time.sleep(delay)
        return True

    def _ml_noted(self, exc: E) -> E:
        """``exc``, a failure error about to be raised (``noted``)."""
        return noted(self, exc)

    def _ml_exchanged(self, dest: int, source: int) -> None:
        """Count a completed ``Sendrecv`` in the message log (a negative peer is ``PROC_NULL``)."""
        if dest >= 0:
            self._ml_sent[dest] += 1
        if source >= 0:
            self._ml_recvd[source] += 1

    def _ml_received(self, source: int, status: Any) -> None:
        """Count a completed receive from ``source``, or by its sender (``status``) when it took any."""
        if source >= 0:
            self._ml_recvd[source] += 1
        else:
            self._ml_wildcard(status)

    def _ml_wildcard(self, status: Any) -> None:
        """Count a completed receive from any source by its sender (``status``), and remember where
        the program made it: a later receive that waits for the sender it took names it."""
        src = status.Get_source()
        if 0 <= src < len(self._ml_recvd):
            self._ml_recvd[src] += 1
            if recorder is not None:
                recorder.wildcard(self, src, status.Get_tag())

    def _ml_child(self, new: Comm | None, kind: str, color: Any = None) -> None:
        """Record ``new`` (made by this communicator's dup ``d``, shrink ``k`` or split ``s``) in the message log."""
        if recorder is not None:
            recorder.child(self, new, kind, color)

    @abstractmethod
    def _world_of(self, rank: int) -> int:
        """World rank of ``rank`` of this communicator (fault plans name world ranks)."""


def _lock(comm: Comm, key: str) -> Any:
    """mpi4py's lock of ``comm``'s MPI communicator for the object collective ``key``.

    mpi4py holds it around the two steps (lengths, then bytes) of its own object collectives, so
    that calls from several threads do not interleave (``MPI._comm_lock``); planaria's two-step
    object collectives hold the same one, for the same reason and so that code inspecting
    mpi4py's lock table finds it.
    """
    try:
        return comm._obj_locks[key]        # looked up once per communicator and key
    except (AttributeError, KeyError):
        pass
    if _BYTE is None:
        _byte()
    lock = contextlib.nullcontext() if _COMM_LOCK is None else _COMM_LOCK(comm._c, key)
    if not hasattr(comm, "_obj_locks"):
        comm._obj_locks = {}
    comm._obj_locks[key] = lock
    return lock


#: ``MPI.BYTE`` and ``MPI._comm_lock``, looked up at the first object collective (importing
#: mpi4py.MPI starts MPI, and an import statement in a function costs about 0.4 µs per call)
_BYTE: Any = None
_COMM_LOCK: Any = None


def _byte() -> Any:
    global _BYTE, _COMM_LOCK
    if _BYTE is None:
        from mpi4py import MPI              # not at the top: importing mpi4py.MPI starts MPI
        _COMM_LOCK = getattr(MPI, "_comm_lock", None)
        _BYTE = MPI.BYTE
    return _BYTE


def _opfunc(op: Any) -> Callable[[Any, Any], Any]:
    if op is None:
        global _SUM
        if _SUM is None:
            from mpi4py import MPI      # not at the top: importing mpi4py.MPI starts MPI
            _SUM = MPI.SUM
        op = _SUM
    return op  # mpi4py Op objects are callable on Python objects


_SUM: Any = None
