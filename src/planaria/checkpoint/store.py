"""The checkpoint store interface, version bookkeeping and the packing of a rank's state.

A rank's state is a ``dict[str, np.ndarray]``. Stores move it as one contiguous byte buffer
(``pack``) plus a small description (``Meta``: names, dtypes, shapes, offsets), so any dtype
and shape comes back bit-exact (``unpack``). Object arrays cannot be stored.
"""
from __future__ import annotations

import math
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planaria.comm.base import Comm
from planaria.errors import PlanariaError

#: how many complete versions every store keeps (a failure during a save leaves the previous one)
KEEP = 2

# message tags used by the stores (point-to-point only; collectives carry no tag)
TAG_META = 7301
TAG_DATA = 7302
TAG_PARITY = 7303
TAG_REBUILD = 7304
TAG_RESEED = 7305
TAG_STATUS = 7306      # restore: a surviving rank tells a fresh rank whether it holds the version
TAG_DECISION = 7307    # restore: a fresh rank tells the others whether the restore went through


class Phases:
    """Where the time of one save or restore went on this rank: seconds per named step.

    ``mark(name)`` adds the time since the previous mark (or since the start) to ``name``;
    steps that alternate (receive, XOR, receive...) add up under their names. The stores keep
    the phases of their last save and last restore (``last_save``, ``last_restore``) for the
    checkpoint benchmark, which prints them next to the floor's. A few clock reads per call.
    """

    __slots__ = ("t", "out")

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.out: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.out[name] = self.out.get(name, 0.0) + now - self.t
        self.t = now


@dataclass(frozen=True)
class Meta:
    """How to cut a packed byte buffer back into the named arrays."""

    names: tuple[str, ...]
    descrs: tuple[object, ...]       # numpy dtype descriptions (np.lib.format.dtype_to_descr)
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    nbytes: int

    def dtypes(self) -> list[np.dtype]:
        return [_descr_to_dtype(d) for d in self.descrs]


def _dtype_to_descr(dt: np.dtype) -> object:
    return np.lib.format.dtype_to_descr(dt)


def _descr_to_dtype(descr: Any) -> np.dtype:
    return np.lib.format.descr_to_dtype(descr)


def describe(state: dict[str, np.ndarray]) -> Meta:
    """The Meta of ``state`` (validates it: numpy arrays, no object dtypes)."""
    names, descrs, shapes, offsets = [], [], [], []
    pos = 0
    for name, arr in state.items():
        if not isinstance(name, str):
            raise TypeError(f"state keys must be str, not {type(name).__name__}")
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"state[{name!r}] must be a numpy array, not {type(arr).__name__}")
        if arr.dtype.hasobject:
            raise TypeError(f"state[{name!r}] has an object dtype; only plain data can be checkpointed")
        names.append(name)
        descrs.append(_dtype_to_descr(arr.dtype))
        shapes.append(tuple(int(s) for s in arr.shape))
        offsets.append(pos)
        pos += int(arr.nbytes)
    return Meta(tuple(names), tuple(descrs), tuple(shapes), tuple(offsets), pos)


def pack(state: dict[str, np.ndarray], extra: int = 0, pool: BufferPool | None = None, spare: int = 0,
         meta: Meta | None = None) -> tuple[Meta, np.ndarray]:
    """Copy ``state`` into one uint8 buffer (``extra`` zero bytes of room after the data, then
    ``spare`` bytes left as they are, for the caller to fill).

    The buffer is new, or a recycled one of the right size taken from ``pool``; ``meta``, when
    given, is ``describe(state)`` made by the caller.
    """
    meta = describe(state) if meta is None else meta
    size = meta.nbytes + extra + spare
    buf = pool.take(size) if pool is not None else np.empty(size, dtype=np.uint8)
    if extra:
        buf[meta.nbytes:meta.nbytes + extra] = 0
    for off, arr in zip(meta.offsets, state.values(), strict=True):
        n = arr.nbytes
        if n:
            src = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            np.copyto(buf[off:off + n], src)
    return meta, buf


class BufferPool:
    """Buffers of a version about to be dropped, reused for the next save (no page faults, no zeroing)."""

    def __init__(self) -> None:
        self._free: dict[int, list[np.ndarray]] = {}

    def give(self, buf: np.ndarray) -> None:
        if buf.base is None and buf.dtype == np.uint8 and buf.ndim == 1:
            self._free.setdefault(buf.size, []).append(buf)

    def take(self, nbytes: int) -> np.ndarray:
        lst = self._free.get(nbytes)
        if lst:
            return lst.pop()
        return np.empty(nbytes, dtype=np.uint8)

    def clear(self) -> None:
        self._free.clear()


class WarmPool:
    """Memory a spare process faults in while it waits, for the buffers a restore would allocate.

    A process that takes over a lost rank receives that rank's state (and, for partner memory,
    the copies it holds for others) into memory it has never touched; on a virtual machine, or
    with transparent huge pages being assembled, those first-touch page faults can cost more
    than the copy itself, in the middle of a recovery. ``Resilient`` tells its spares the
    buffer sizes a restore needs (``CheckpointStore.footprint``) and they ``reserve`` them
    here; a fresh rank's restore then ``take``s them. Process-wide, thread-safe.
    """

    def __init__(self) -> None:
        self._free: dict[int, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def reserve(self, sizes: list[int]) -> None:
        """Hold exactly one faulted-in buffer per entry of ``sizes`` (bytes); others are freed."""
        want = Counter(int(n) for n in sizes if int(n) > 0)
        with self._lock:
            keep: dict[int, list[np.ndarray]] = {}
            for n, k in want.items():
                have = self._free.get(n, [])[:k]
                while len(have) < k:
                    buf = np.empty(n, dtype=np.uint8)
                    buf[::4096] = 0              # one write per page faults the whole buffer in
                    have.append(buf)
                keep[n] = have
            self._free = keep

    def take(self, nbytes: int) -> np.ndarray:
        """A reserved buffer of exactly ``nbytes`` bytes, or a new (cold) one."""
        with self._lock:
            lst = self._free.get(int(nbytes))
            if lst:
                return lst.pop()
        return np.empty(int(nbytes), dtype=np.uint8)

    def held(self) -> int:
        """Bytes reserved and not yet taken."""
        with self._lock:
            return sum(n * len(lst) for n, lst in self._free.items())


#: this process's warm buffers (filled by a waiting spare, used by a fresh rank's restore)
WARM = WarmPool()


def unpack(meta: Meta, buf: np.ndarray | memoryview | bytes | bytearray,
           copy: bool = True, pool: WarmPool | None = None,
           into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The arrays of ``meta`` cut from ``buf``: new arrays, or views of ``buf`` with ``copy=False``.

    With ``pool`` the new arrays are carved out of one buffer taken from it (warm memory).
    With ``into`` (a rank's current state) an array of the same name, dtype and shape that is
    contiguous and writeable is overwritten in place and returned instead of a new one: a
    survivor's restore then copies into memory it already uses, without first-touch faults.
    """
    # Lean on purpose: a fresh rank unpacks right after its receives, its caches cold, where each
    # numpy call costs 10-40 us (np.prod 37, math.prod 5): no call that the common case can skip.
    raw = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else \
        buf if buf.ndim == 1 else buf.reshape(-1)
    if raw.dtype != np.uint8:
        raw = raw.view(np.uint8)
    if raw.size < meta.nbytes:
        raise ValueError(f"checkpoint buffer holds {raw.size} bytes, expected {meta.nbytes}")
    out: dict[str, np.ndarray] = {}
    if copy and into:
        fresh_names = []
        for name, dt, shape, off in zip(meta.names, meta.dtypes(), meta.shapes, meta.offsets, strict=True):
            old = into.get(name)
            if (isinstance(old, np.ndarray) and old.dtype == dt and old.shape == tuple(shape)
                    and old.flags.c_contiguous and old.flags.writeable):
                if old.nbytes:
                    np.copyto(old.reshape(-1).view(np.uint8), raw[off:off + old.nbytes])
                out[name] = old
            else:
                fresh_names.append(name)
        if fresh_names:
            rest = unpack(meta, raw, copy=True, pool=pool)
            for name in fresh_names:
                out[name] = rest[name]
        return {name: out[name] for name in meta.names}
    if copy and pool is not None and meta.nbytes:
        dest = pool.take(meta.nbytes)
        np.copyto(dest, raw if raw.size == meta.nbytes else raw[:meta.nbytes])
        return _views(meta, dest)
    if not copy:
        return _views(meta, raw)
    for name, dt, shape, off in zip(meta.names, meta.dtypes(), meta.shapes, meta.offsets, strict=True):
        arr = np.empty(shape, dtype=dt)
        n = arr.nbytes
        if n:
            np.copyto(arr.reshape(-1).view(np.uint8), raw[off:off + n])
        out[name] = arr
    return out


def _views(meta: Meta, raw: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays of ``meta`` as views of the uint8 buffer ``raw`` (checked long enough)."""
    out: dict[str, np.ndarray] = {}
    for name, dt, shape, off in zip(meta.names, meta.dtypes(), meta.shapes, meta.offsets, strict=True):
        if not dt.itemsize:
            out[name] = np.empty(shape, dtype=dt)
            continue
        arr = raw[off:off + math.prod(shape) * dt.itemsize].view(dt)
        if arr.shape != shape:
            arr = arr.reshape(shape)
        # An unaligned view (the buffer's header shifts it) cannot go to MPI (mpi4py rejects
        # numpy's '=d' format) and is slow in numpy: copy it into an aligned array.
        out[name] = arr if arr.flags.aligned else arr.copy()
    return out


#: nonblocking barriers of saves on a communicator given up since (see ``Completion``): never
#: waited for, tested now and then, and kept referenced until they complete (MPI forbids freeing
#: an active nonblocking collective's request)
_ORPHANS: list[object] = []


def _test_quietly(req: Any) -> bool:
    """Whether a request has completed (successfully or not) without raising."""
    from planaria.comm.errors import FailureError
    try:
        return bool(req.Test())
    except FailureError:
        return True                       # completed with an error: nothing left to hold
    except Exception:                     # noqa: BLE001 - a freed communicator's request, etc.
        return True


class Completion:
    """When the newest version a store holds is known complete on every rank (memory, XOR).

    A save ends with a nonblocking barrier instead of a blocking one: ``start`` posts it once
    this rank holds the new version in full, and the save returns. The next save ``settle``s it
    before it reuses the buffers of the version before: only then are the buffers of that older
    version dropped. So at every moment some version is held in full by every rank, as with a
    closing barrier, but no rank waits for the others at the end of its save; the barrier's
    rounds progress while the application runs (any MPI call progresses them), and a save
    normally finds it long completed.

    ``settled`` says whether the newest version held is known complete everywhere. A save that
    finds it False (its barrier was posted on another communicator, and has not completed) takes
    the safe path: it keeps every version it holds, waits for its own barrier at its end, and only
    then drops versions beyond ``KEEP``. Every rank posts the same nonblocking barrier at the end
    of every save, whichever path it takes, so the collectives match on every rank.
    """

    def __init__(self) -> None:
        self._req: Any = None
        self._comm: object | None = None
        self.settled = True               # nothing held yet: nothing to protect

    def start(self, comm: Comm) -> Any:
        """Post the barrier that completes the version this rank has just saved."""
        self.forget(False)
        mc: Any = comm                    # Ibarrier: one of mpi4py's calls Comm passes through
        self._req = mc.Ibarrier()
        self._comm = comm
        return self._req

    def finish(self) -> None:
        """Wait for the barrier posted by ``start`` (the safe path); raises FailureError."""
        req, self._req, self._comm = self._req, None, None
        if req is not None:
            req.Wait()
        self.settled = True

    def settle(self, comm: Comm) -> bool:
        """At the start of a save on ``comm``: whether the newest version held is complete everywhere.

        The barrier of the previous save on the same communicator is waited for (a failure raises
        ``FailureError``, and the newest version is then not known complete); one posted on
        another communicator is only tested, never waited for."""
        _ORPHANS[:] = [q for q in _ORPHANS if not _test_quietly(q)]
        req, c = self._req, self._comm
        if req is None:
            return self.settled
        self._req = self._comm = None
        if c is comm:
            try:
                req.Wait()
            except BaseException:
                self.settled = False
                raise
            self.settled = True
        else:
            self.settled = self._drop(req)
        return self.settled

    def forget(self, settled: bool) -> None:
        """Give up the pending barrier (a restore on a repaired communicator) and set ``settled``."""
        if self._req is not None:
            self._drop(self._req)
        self._req = self._comm = None
        self.settled = settled

    @staticmethod
    def _drop(req: Any) -> bool:
        """Whether ``req`` completed without error; if it is still active, keep it among the orphans."""
        from planaria.comm.errors import FailureError
        try:
            if req.Test():
                return True
        except FailureError:
            return False
        except Exception:                 # noqa: BLE001 - a request of a freed communicator
            return False
        _ORPHANS.append(req)
        return False


def revoke_quietly(comm: Comm) -> None:
    """Revoke ``comm``, ignoring errors: a store's exchange interrupted by a failure must not leave
    other ranks waiting in it for messages that will never come (a rank whose save raised sends
    nothing more); the caller repairs the communicator, as after any failure."""
    try:
        comm.revoke()
    except Exception:                     # noqa: BLE001 - already revoked, or gone
        pass


class CheckpointError(PlanariaError, RuntimeError):
    """A checkpoint cannot be saved or restored (not a process failure: those raise FailureError)."""


class SaveFailed(CheckpointError):
    """A save that every rank gave up alike (a rank could not write): the version does not count,
    the versions complete before it are untouched, and the ranks may go on computing. At a rank
    whose own write failed, that error (an ``OSError``) is the cause."""


class CheckpointStore(ABC):
    """Coordinated checkpoints of every working rank's state, and their restore after failures.

    Ranks are *logical*: ``comm.rank`` of the working communicator. A replacement process
    (a spare) that takes over logical rank ``r`` is *fresh*: it holds nothing, and
    ``restore`` rebuilds its state from what the other ranks (or files) hold.

    Every call here is collective over ``comm`` and may raise ``planaria.FailureError`` when
    a process fails meanwhile; the caller repairs the communicator and calls ``restorable``
    and ``restore`` again.
    """

    name: str = "?"
    #: lower is faster to restore from (MultiLevel tries the fastest level first)
    speed_rank: int = 9
    #: seconds per step of this rank's last save and last restore (``Phases``; for benchmarks)
    last_save: dict[str, float] = {}
    last_restore: dict[str, float] = {}

    @abstractmethod
    def save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        """Coordinated checkpoint of this rank's state.

        Collective over ``comm`` (the working ranks). A version is complete only when save
        returned everywhere; the two newest complete versions are kept, so a failure during a
        save leaves the previous version usable.
        """

    @abstractmethod
    def versions(self) -> set[int]:
        """Versions this rank holds locally (complete ones)."""

    @abstractmethod
    def restorable_versions(self, comm: Comm, fresh: set[int]) -> set[int]:
        """Collective: every version each rank can get back given ``fresh`` (same answer everywhere)."""

    def restorable(self, comm: Comm, fresh: set[int]) -> int | None:
        """Collective: the newest version every rank can get back given ``fresh`` (None if none).

        The answer is the same on every rank (computed from data all ranks exchanged).
        """
        vs = self.restorable_versions(comm, set(fresh))
        return max(vs) if vs else None

    def offer(self, rank: int) -> Any:
        """What logical rank ``rank`` holds, for ``restorable_among`` (small, picklable; local, no
        messages); None when this store agrees on versions only through ``restorable``."""
        del rank
        return None

    def restorable_among(self, offers: list[Any], fresh: set[int]) -> int | None:
        """What ``restorable`` answers, computed locally from every rank's ``offer`` (``offers[r]``:
        logical rank ``r``'s, None for the fresh ranks; ``len(offers)`` ranks): the caller exchanges
        the offers in a round of its own, so agreeing on the version costs no message."""
        raise NotImplementedError(f"{self.name} checkpoints agree on versions only through restorable")

    @abstractmethod
    def restore(self, comm: Comm, version: int, fresh: set[int],
                into: dict[str, np.ndarray] | None = None, offers: list[Any] | None = None) -> dict[str, np.ndarray]:
        """Collective over the repaired working comm: this rank's state at ``version``.

        ``fresh``: logical ranks whose process is new and holds nothing; their data is rebuilt
        from partners, parity or files. Survivors also re-seed the redundancy the fresh ranks
        held, so a later failure is survivable again. Versions newer than ``version`` are
        dropped (they belong to a future that did not happen). ``into``: this rank's current
        state; the stores overwrite in place, and return, the arrays that match the checkpoint
        (name, dtype, shape; see ``unpack``; the file store reads into them only when all match).
        ``offers``: every rank's ``offer`` (the list ``restorable_among`` was given, the same on
        every rank, taken after the last save or restore), when the caller agreed on ``version``
        from them: a store that can then skips asking every rank whether it holds the version.
        """

    def wait_complete(self, comm: Comm) -> None:
        """Collective over ``comm``: return once the newest version this rank saved on ``comm`` is held
        in full by every rank, so that a failure from now on restores it; raises ``FailureError``.

        A store whose ``save`` returns only once every rank's part is in (files) returns at once."""
        del comm

    def set_spacing(self, every: int) -> None:
        """Told by the recovery driver: versions are step numbers ``every`` steps apart. Only
        ``MultiLevel`` uses it (its levels' intervals count checkpoints); other stores ignore it."""
        del every

    def footprint(self) -> list[int]:
        """Sizes (bytes) of the buffers a fresh process taking this rank's place would allocate in
        ``restore`` (newest version held here); a spare reserves them in ``WARM``. Local, no messages."""
        return []

    # -- continuing on fewer ranks -------------------------------------------------------------
    def recoverable_lost_versions(self, comm: Comm, logical: list[int | None], old_size: int) -> set[int]:
        """Collective over the survivors: every version ``recover_lost`` can bring back (same everywhere).

        See ``recoverable_lost``. Stores that cannot rebuild lost ranks without a process in
        their place return the empty set.
        """
        check_logical(comm, logical, old_size)
        comm.Barrier()
        return set()

    def recoverable_lost(self, comm: Comm, logical: list[int | None], old_size: int) -> int | None:
        """Collective over the survivors: the newest version ``recover_lost`` can bring back (None if none).

        ``comm`` holds the processes left after losing some of the ``old_size`` working ranks
        for good (no spare in their place), so ``comm.size < old_size``; ``logical[comm.rank]``
        is the logical rank a process had when the checkpoints were saved, or None for a
        process that held no logical rank then (a spare joining the smaller job). ``logical``
        is the same list on every rank. A version qualifies when every survivor still holds its
        own state and the state of every lost logical rank can be rebuilt from what the
        survivors hold (or read). The answer is the same on every rank.
        """
        vs = self.recoverable_lost_versions(comm, list(logical), old_size)
        return max(vs) if vs else None

    def recover_lost(self, comm: Comm, version: int, logical: list[int | None],
                     old_size: int) -> tuple[dict[str, np.ndarray] | None, dict[int, dict[str, np.ndarray]]]:
        """Collective over the survivors: the states at ``version`` in the old layout of ``old_size`` ranks.

        Returns ``(mine, found)``: ``mine`` is this rank's own state (of logical rank
        ``logical[comm.rank]``; None when that is None), ``found`` maps lost logical ranks to
        their states, for the lost ranks this rank rebuilt. Every lost rank's state is returned
        on exactly one rank of ``comm``. Redistributing the data over the smaller
        communicator is then the application's business. Versions newer than ``version`` are
        dropped; versions saved by ``old_size`` ranks are kept but never match a restore on
        the smaller communicator, and disappear as new versions are saved on it. Raises
        ``CheckpointError`` when ``version`` is not recoverable.
        """
        check_version(version)
        check_logical(comm, logical, old_size)
        raise CheckpointError(f"{self.name} checkpoints cannot rebuild lost ranks without a replacement")


class PeerStore(CheckpointStore):
    """A store whose versions live in process memory, copies or parity on other ranks
    (``MemoryStore``, ``XorStore``): ``_data`` maps a version to what this rank holds of it; a
    save is completed by a nonblocking barrier (``_done``) that the next save waits for."""

    _data: dict[int, Any]
    _inflight: list[object]      # buffers of an interrupted exchange (kept alive)
    _done: Completion

    def save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        """Coordinated checkpoint of this rank's state (``_save``); after a failure during it, the
        communicator is revoked, since partners may be waiting for this rank's messages."""
        from planaria.errors import FailureError      # made on first use of its name (it imports mpi4py)
        try:
            self._save(comm, version, state)
        except FailureError:
            revoke_quietly(comm)
            raise

    @abstractmethod
    def _save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        """The save itself (see the store's class)."""

    def wait_complete(self, comm: Comm) -> None:
        """Wait for the nonblocking barrier that ends the last save on ``comm`` (``Completion``): once
        it completed, every rank holds that version in full. Raises ``FailureError``."""
        self._done.settle(comm)

    def _pool(self, version: int, settled: bool, buffers: Callable[[Any], Iterable[np.ndarray]]) -> BufferPool:
        """Double buffering for a save of ``version`` (versions from it on are dropped): once the
        newest version is known complete everywhere (``settled``), the buffers (``buffers(entry)``)
        of the versions before it are reused for this one; the newest stays untouched, so a failure
        during this save leaves it usable. Not known complete: keep both, allocate."""
        pool = BufferPool()
        self._data = {v: d for v, d in self._data.items() if v < version}
        while settled and len(self._data) >= KEEP:
            for b in buffers(self._data.pop(min(self._data))):
                pool.give(b)
        return pool

    def _complete(self, comm: Comm, settled: bool, commit: Callable[[], None], ph: Phases) -> None:
        """The end of a save: ``commit()`` (which adds the version) and the completing barrier
        started; when the previous version was not known complete, that barrier is waited for
        first (complete everywhere before anything is dropped)."""
        if settled:
            commit()
            self._done.start(comm)               # waited for by the next save
        else:
            self._done.start(comm)
            self._done.finish()
            commit()
        self._inflight = []
        ph.mark("complete")
        self.last_save = ph.out

    def _add_version(self, version: int, entry: Any) -> None:
        """``entry`` becomes ``version``; newer versions and all but the ``KEEP`` newest are dropped."""
        self._data = {v: d for v, d in self._data.items() if v < version}
        self._data[version] = entry
        for v in list(self._data):
            if v not in newest(self._data, KEEP):
                del self._data[v]

    def versions(self) -> set[int]:
        return set(self._data)

    def _announce(self, version: int, verdict: Verdict, status: np.ndarray, sreqs: list[Any], problem: str,
                  ph: Phases, commit: Callable[[], None]) -> None:
        """A fresh rank's end of a restore: every other rank's status (``verdict.listen``) in, the
        verdict announced; raises ``CheckpointError`` when there is a ``problem`` or a rank lacks the
        version, else this rank holds only what ``commit()`` adds."""
        for q in sreqs:
            q.Wait()
        ph.mark("statuses")                          # every other rank's, sent as it entered the restore
        if not problem and status.size and (status < 0).any():        # none to look at when agreed
            problem = "not every rank holds it"
        verdict.announce(not problem)
        self._inflight = []
        if problem:
            raise CheckpointError(f"{self.name} checkpoint version {version} cannot be restored: {problem}")
        self._data = {}
        commit()
        self._done.settled = True
        ph.mark("verdict")
        self.last_restore = ph.out

    # -- continuing on fewer ranks ---------------------------------------------------------------
    @abstractmethod
    def _lost_inventory(self, comm: Comm, logical: list[int | None]) -> list[Any]:
        """Collective: what each rank holds that ``_lost_usable`` reads, one entry per rank of ``comm``."""

    @abstractmethod
    def _lost_usable(self, inv: list[Any], logical: list[int | None], old_size: int) -> set[int]:
        """The versions the survivors can bring back, from the inventory ``inv`` (local)."""

    def recoverable_lost_versions(self, comm: Comm, logical: list[int | None], old_size: int) -> set[int]:
        check_logical(comm, logical, old_size)
        return self._lost_usable(self._lost_inventory(comm, logical), logical, old_size)

    def _recovering(self, comm: Comm, version: int, logical: list[int | None],
                    old_size: int) -> tuple[int, list[int], list[Any]]:
        """The start of ``recover_lost``: (version, the lost logical ranks, the inventory); raises
        ``CheckpointError`` when ``version`` cannot be brought back."""
        version = check_version(version)
        lost = check_logical(comm, logical, old_size)
        self._done.forget(False)
        inv = self._lost_inventory(comm, logical)
        if version not in self._lost_usable(inv, logical, old_size):
            raise CheckpointError(f"{self.name} checkpoint version {version} cannot rebuild lost rank(s) {lost} "
                                  f"of {old_size}")
        return version, lost, inv

    def _held_by(self, rank: int, version: int, entry: Any) -> int | None:
        """The ranks at save of ``version`` when logical rank ``rank`` holds its part in full, else None."""
        raise NotImplementedError

    def _possible(self, n: int, fresh: set[int]) -> bool:
        """Whether the data of the ``fresh`` ranks of ``n`` can be rebuilt at all (where copies live)."""
        raise NotImplementedError

    def offer(self, rank: int) -> list[tuple[int, int]]:
        """``(version, ranks at save)`` of the ``KEEP`` newest versions this rank holds in full."""
        out: list[tuple[int, int]] = []
        for v, e in sorted(self._data.items())[-KEEP:]:
            ns = self._held_by(rank, v, e)
            if ns is not None:
                out.append((int(v), int(ns)))
        return out

    def restorable_versions(self, comm: Comm, fresh: set[int]) -> set[int]:
        """One fixed-size buffer Allgather of every non-fresh rank's ``offer``, then ``_common``."""
        fresh = check_fresh(comm, fresh)
        n, r = comm.size, comm.rank
        mine = np.full(2 * KEEP, -1, dtype=np.int64)
        if r not in fresh:
            for i, pair in enumerate(self.offer(r)):
                mine[2 * i:2 * i + 2] = pair
        inv = np.empty((n, 2 * KEEP), dtype=np.int64)
        comm.Allgather(mine, inv)
        offers = [None if rank in fresh else [(int(row[2 * i]), int(row[2 * i + 1])) for i in range(KEEP)
                                               if row[2 * i] >= 0] for rank, row in enumerate(inv)]
        return self._common(offers, fresh)

    def restorable_among(self, offers: list[Any], fresh: set[int]) -> int | None:
        vs = self._common(offers, {int(f) for f in fresh})
        return max(vs) if vs else None

    def _agreed(self, offers: list[Any] | None, version: int, n: int, fresh: set[int]) -> bool:
        """Whether ``offers`` (every rank's ``offer``, from the caller) show that every non-fresh
        rank holds ``version`` saved by ``n`` ranks: the same answer on every rank (local)."""
        if offers is None or len(offers) != n or not fresh:
            return False
        if any(offers[x] is None for x in range(n) if x not in fresh):
            return False
        return version in self._common(offers, fresh)

    def _common(self, offers: list[Any], fresh: set[int]) -> set[int]:
        """The versions every non-fresh rank offers, saved by ``len(offers)`` ranks; none when
        the fresh ranks cannot be rebuilt (``_possible``)."""
        n = len(offers)
        if not self._possible(n, fresh):
            return set()
        live = [{v for v, ns in offers[rank] if ns == n} for rank in range(n) if rank not in fresh]
        return set.intersection(*live) if live else set()


def check_logical(comm: Comm, logical: list[int | None], old_size: int) -> list[int]:
    """Validate the old logical ranks of the survivors; return the lost logical ranks (sorted)."""
    if len(logical) != comm.size:
        raise ValueError(f"logical lists {len(logical)} ranks, the communicator has {comm.size}")
    seen = [int(x) for x in logical if x is not None]
    if len(set(seen)) != len(seen):
        raise ValueError(f"logical ranks repeat: {logical}")
    bad = [x for x in seen if not 0 <= x < old_size]
    if bad:
        raise ValueError(f"logical ranks {bad} are outside 0..{old_size - 1}")
    return sorted(set(range(old_size)) - set(seen))


def newest(versions: Iterable[int], keep: int = KEEP) -> list[int]:
    """The ``keep`` newest of ``versions``, ascending."""
    return sorted(versions)[-keep:] if keep > 0 else []


def check_version(version: int) -> int:
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0:
        raise ValueError(f"a checkpoint version is an int >= 0, not {version!r}")
    return int(version)


def check_fresh(comm: Comm, fresh: set[int]) -> set[int]:
    out = {int(f) for f in fresh}
    bad = [f for f in out if not 0 <= f < comm.size]
    if bad:
        raise ValueError(f"fresh ranks {sorted(bad)} are outside 0..{comm.size - 1}")
    return out


def all_true(comm: Comm, ok: bool) -> bool:
    """Collective: whether ``ok`` holds on every rank (one buffer ``Allreduce``, so revoke reaches it)."""
    from mpi4py import MPI
    out = np.zeros(1, dtype=np.int64)
    comm.Allreduce(np.array([1 if ok else 0], dtype=np.int64), out, op=MPI.MIN)
    return bool(out[0])


class Verdict:
    """The end of a restore with fresh ranks, without a collective: statuses in, verdicts out.

    Every non-fresh rank sends each fresh rank a status (an int64: >= 0 when it holds the
    version, the meaning of the value is the store's; -1 when it does not), then waits for
    one verdict per fresh rank. A fresh rank receives every status, adds what it found itself
    (a message that did not fit), and sends its verdict to every non-fresh rank: the version
    went through only where every rank holds its part. Statuses are sent on entry, so they
    have long arrived when a fresh rank is done with its data: its restore ends when its own
    transfers do, not at the last of a collective's rounds among processes that time-share
    cores. The verdicts are received from any source: like a barrier, the wait raises
    ``ProcFailedError`` when any process of ``comm`` fails, and ``RevokedError`` on revoke.
    """

    def __init__(self, comm: Comm, fresh: set[int]) -> None:
        self.comm = comm
        self.fresh = sorted(fresh)
        self.others = [x for x in range(comm.size) if x not in fresh]
        self._bufs: list[np.ndarray] = []     # kept alive until every request completed

    # -- on a non-fresh rank ---------------------------------------------------------------------
    def tell(self, status: int) -> list[Any]:
        """Send this rank's status to every fresh rank (requests to wait for)."""
        buf = _STATUS.get(status)
        if buf is None:
            buf = np.array([status], dtype=np.int64)
            self._bufs.append(buf)
        return [self.comm.Isend(buf, dest=f, tag=TAG_STATUS) for f in self.fresh]

    def outcome(self, nap: float = 0.0) -> bool:
        """Wait for every fresh rank's verdict; True when all say the restore went through.

        ``nap`` > 0: between tests of the receive, sleep that many seconds instead of spinning in
        MPI, for a rank whose wait would take a core from the ranks that still have work (with
        more ranks than cores); the wait raises as the blocking one does (``Test`` raises)."""
        got = np.zeros(len(self.fresh), dtype=np.int64)
        self._bufs.append(got)
        for i in range(len(self.fresh)):
            if nap <= 0:
                self.comm.Recv(got[i:i + 1], tag=TAG_DECISION)     # any source: see the class docstring
                continue
            q = self.comm.Irecv(got[i:i + 1], tag=TAG_DECISION)
            while not q.Test():
                time.sleep(nap)
        return bool(got.all())

    # -- on a fresh rank --------------------------------------------------------------------------
    def listen(self) -> tuple[np.ndarray, list[Any]]:
        """Post the receives of every non-fresh rank's status: (statuses, requests), in ``others`` order."""
        st = np.full(len(self.others), -1, dtype=np.int64)
        self._bufs.append(st)
        return st, [self.comm.Irecv(st[i:i + 1], source=x, tag=TAG_STATUS) for i, x in enumerate(self.others)]

    def announce(self, ok: bool) -> None:
        """Send this fresh rank's verdict to every non-fresh rank (from a constant buffer: no
        allocation at the end of a restore, where each numpy call costs ~12 us of cold caches)."""
        buf = _YES if ok else _NO
        wait_sends([self.comm.Isend(buf, dest=x, tag=TAG_DECISION) for x in self.others])


def _constant(value: int) -> np.ndarray:
    out = np.full(1, value, dtype=np.int64)
    out.flags.writeable = False
    return out


#: the two verdicts and the common statuses, sent as they are (read-only: MPI only reads a send buffer)
_YES, _NO = _constant(1), _constant(0)
_STATUS = {0: _constant(0), -1: _constant(-1)}


def wait_sends(reqs: list[Any]) -> None:
    """Wait for send requests: one ``Testall`` when they are all done already (small sends
    normally are), else each request's own (failure-safe) ``Wait``. Not for receives: a receive
    completed by ``Testall`` skips the message log's count."""
    from mpi4py import MPI
    try:
        if MPI.Request.Testall(reqs):
            return
    except MPI.Exception:
        pass                                      # the failure is raised by the request's own Wait
    for q in reqs:
        if q:
            q.Wait()
