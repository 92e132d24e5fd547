"""The floors of the checkpoint benchmark: the data movement each store's design requires, done
with plain numpy, MPI and ``os`` calls into buffers faulted in beforehand, in the same job.

Every floor moves exactly the bytes its store must move, and nothing else: no metadata, no
version bookkeeping, no completion protocol, no integrity check. A store's time over its floor
is the price of those (and of whatever the store does badly).

- **memory save**: copy of the state into a buffer, then that buffer sent to each holder and
  the owners' buffers received (``Isend``/``Irecv``; with ``copies=1, distance=1`` a ring shift
  to the next rank);
- **memory restore** (on the lost rank ``f``): what ``MemoryStore.restore`` must bring to ``f``
  for redundancy to be whole again: ``f``'s state from its holder, and the copy ``f`` keeps
  for each of its owners from that owner (all receives posted at once), then one copy of its
  own state (the checkpoint ``f`` keeps and the arrays it returns are two buffers);
- **xor save**: copy of the state into a buffer, then the group's parity reduction, the
  faster of two plain forms: ``Reduce_scatter_block`` (``BXOR``) on a communicator of the group,
  each member contributing its ``m - 1`` chunks and zeros in its own place, or each member
  sending its chunk to each other member, receiving the first chunk into its parity buffer and
  XORing the other ``m - 2`` into it;
- **xor restore** (on ``f``): the ``m - 1`` survivors' vectors of ``m`` chunks XORed onto ``f``,
  the faster of ``Reduce`` (``BXOR``, rooted at ``f``, ``f`` contributing zeros in place) and
  ``f`` receiving the vectors and XORing them; then one copy of ``f``'s state out of the result;
- **file save**: the same number of bytes as the store's rank file written with one
  ``os.writev`` (a header-sized buffer and the state array's own memory) over a file of that
  size in the store's directory, written the round before (its pages are in the page cache:
  the state the store's own writes find, as it rewrites the files of its oldest version), then
  ``os.fsync``: the data goes through the page cache to the disk. The same into a file created
  for it (``new``: not there before, its pages allocated by the write) is measured as well and
  reported beside it, not used as the floor;
- **file restore** (on ``f``): every rank reads the store's own rank file of the version
  restored with ``os.readv`` into a buffer faulted in beforehand, ``f``'s file dropped from the
  page cache first (``posix_fadvise(DONTNEED)``, as before the store's restore), the others'
  left as the store's restore finds them: the store's design has every rank roll back to the
  version, so every rank reads its file, and on a machine with fewer cores than ranks those
  reads compete for them. The read of ``f``'s file alone, the others idle, is measured as well
  (``alone``) and reported beside it, not used as the floor.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from planaria.checkpoint.memory import holders, owners_held_by
from planaria.checkpoint.store import Phases
from planaria.checkpoint.xor import _slot, chunk_len, group_of, groups

TAG = 7390


def faulted(nbytes: int) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` whose pages are all faulted in (and zero)."""
    buf = np.empty(int(nbytes), dtype=np.uint8)
    buf.fill(0)
    return buf


def evict(path: str | os.PathLike[str]) -> None:
    """Drop ``path`` from the page cache (best effort), so the next read goes to the device."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(fd)


def _wait(reqs: list[Any]) -> None:
    for q in reqs:
        q.Wait()


class MemoryFloor:
    """Copy + partner exchange (save); the lost rank's receives + one copy (restore)."""

    kind = "memory"

    def __init__(self, comm: Any, data: np.ndarray, copies: int = 1, distance: int = 1) -> None:
        self.comm, self.data = comm, data
        n, r = comm.size, comm.rank
        self.copies, self.distance = copies, distance
        self.dests = holders(r, n, copies, distance)
        self.srcs = owners_held_by(r, n, copies, distance)
        self.snap = faulted(data.nbytes)
        self.got = {s: faulted(data.nbytes) for s in self.srcs}
        self.bufs: dict[int, np.ndarray] = {}
        self.out: np.ndarray | None = None

    def save(self) -> dict[str, float]:
        comm, ph = self.comm, Phases()
        np.copyto(self.snap, self.data)
        ph.mark("copy")
        reqs = [comm.Irecv(self.got[s], source=s, tag=TAG) for s in self.srcs]
        reqs += [comm.Isend(self.snap, dest=d, tag=TAG) for d in self.dests]
        _wait(reqs)
        ph.mark("exchange")
        return ph.out

    def _plan(self, f: int) -> dict[int, int]:
        """owner -> source, for the owners whose data ``f`` must get back (as ``MemoryStore`` plans it)."""
        n = self.comm.size
        out = {}
        for o in [f] + owners_held_by(f, n, self.copies, self.distance):
            out[o] = min(x for x in [o] + holders(o, n, self.copies, self.distance) if x != f)
        return out

    def prepare_restore(self, f: int) -> None:
        """Untimed: the lost rank's receive buffers, faulted in (as a warm spare's)."""
        if self.comm.rank == f and not self.bufs:
            self.bufs = {o: faulted(self.data.nbytes) for o in self._plan(f)}
            self.out = faulted(self.data.nbytes)

    def restore(self, f: int) -> dict[str, float]:
        comm, r, ph = self.comm, self.comm.rank, Phases()
        plan = self._plan(f)
        if r == f:
            _wait([comm.Irecv(self.bufs[o], source=s, tag=TAG) for o, s in plan.items()])
            ph.mark("receive")
            assert self.out is not None
            np.copyto(self.out, self.bufs[f])
            ph.mark("copy")
        else:
            mine = [o for o, s in plan.items() if s == r]
            _wait([comm.Isend(self.snap if o == r else self.got[o], dest=f, tag=TAG) for o in mine])
            ph.mark("send")
        return ph.out


class XorFloor:
    """Copy + the group's parity reduction (save); the survivors' vectors XORed onto the lost rank (restore)."""

    kind = "xor"

    def __init__(self, comm: Any, data: np.ndarray, group_size: int) -> None:
        from mpi4py import MPI
        self.MPI = MPI
        self.comm, self.data = comm, data
        n, r = comm.size, comm.rank
        gs = groups(n, group_size)
        self.g = group_of(r, n, group_size)
        self.m = m = len(self.g)
        self.me = self.g.index(r)
        self.gcomm = comm.Split([i for i, g in enumerate(gs) if r in g][0], r)
        self.c = c = chunk_len(data.nbytes, m)
        # collective form: m blocks, zeros in this member's own block
        self.vec = faulted(m * c)
        self.parity = faulted(c)
        # point-to-point form: the store's layout, (m-1) chunks
        self.buf = faulted((m - 1) * c)
        self.tmp = {x: faulted(c) for x in self.g if x != r}
        self.acc: np.ndarray | None = None
        self.rbufs: dict[int, np.ndarray] = {}
        self.out: np.ndarray | None = None

    # -- save
    def save(self, form: str) -> dict[str, float]:
        return self._save_collective() if form == "collective" else self._save_p2p()

    def _save_collective(self) -> dict[str, float]:
        ph, c, me, d = Phases(), self.c, self.me, self.data
        head = min(me * c, d.nbytes)
        np.copyto(self.vec[:head], d[:head])
        np.copyto(self.vec[(me + 1) * c:(me + 1) * c + d.nbytes - head], d[head:])
        ph.mark("copy")
        self.gcomm.Reduce_scatter_block(self.vec.view(np.uint64), self.parity.view(np.uint64), op=self.MPI.BXOR)
        ph.mark("reduce")
        return ph.out

    def _save_p2p(self) -> dict[str, float]:
        comm, ph, c, r = self.comm, Phases(), self.c, self.comm.rank
        np.copyto(self.buf[:self.data.nbytes], self.data)
        ph.mark("copy")
        others = [x for x in self.g if x != r]
        # the first member's chunk straight into the parity buffer, the others XORed into it
        into = [self.parity] + [self.tmp[x] for x in others[1:]]
        recvs = [comm.Irecv(into[k], source=x, tag=TAG) for k, x in enumerate(others)]
        sends = []
        for x in others:
            s = _slot(self.me, self.g.index(x))
            sends.append(comm.Isend(self.buf[s * c:(s + 1) * c], dest=x, tag=TAG))
        for k, q in enumerate(recvs):
            q.Wait()
            ph.mark("exchange")
            if k:
                _xor(self.parity, into[k])
                ph.mark("xor")
        _wait(sends)
        ph.mark("exchange")
        return ph.out

    # -- restore
    def prepare_restore(self, f: int) -> None:
        """Untimed: buffers faulted in; the lost rank's accumulator zeroed (its part of the ``Reduce``)."""
        if f not in self.g:
            return
        m, c = self.m, self.c
        if self.comm.rank == f:
            if self.acc is None:
                self.acc = faulted(m * c)
                self.rbufs = {x: faulted(m * c) for x in self.g if x != f}
                self.out = faulted(self.data.nbytes)
            self.acc.fill(0)
        elif self.acc is None:
            self.acc = faulted(m * c)           # a survivor's vector (its contents do not matter here)

    def restore(self, f: int, form: str) -> dict[str, float]:
        ph = Phases()
        if f not in self.g:
            return ph.out
        assert self.acc is not None
        r, fpos = self.comm.rank, self.g.index(f)
        if form == "collective":
            if r == f:
                self.gcomm.Reduce(self.MPI.IN_PLACE, self.acc.view(np.uint64), op=self.MPI.BXOR, root=fpos)
            else:
                self.gcomm.Reduce(self.acc.view(np.uint64), None, op=self.MPI.BXOR, root=fpos)
            ph.mark("reduce")
            acc = self.acc
        elif r == f:
            reqs = [(x, self.comm.Irecv(b, source=x, tag=TAG)) for x, b in self.rbufs.items()]
            acc = None
            for x, q in reqs:
                q.Wait()
                ph.mark("receive")
                if acc is None:
                    acc = self.rbufs[x]
                else:
                    _xor(acc, self.rbufs[x])
                    ph.mark("xor")
        else:
            self.comm.Send(self.acc, dest=f, tag=TAG)
            ph.mark("send")
            return ph.out
        if r == f:
            assert self.out is not None and acc is not None
            np.copyto(self.out, acc[:self.data.nbytes])
            ph.mark("copy")
        return ph.out

    def free(self) -> None:
        self.gcomm.Free()


def _xor(acc: np.ndarray, other: np.ndarray) -> None:
    np.bitwise_xor(acc.view(np.uint64), other.view(np.uint64), out=acc.view(np.uint64))


class FileFloor:
    """``os.writev`` + ``os.fsync`` of a new file (save); ``os.readv`` of the evicted rank file (restore)."""

    kind = "file"

    def __init__(self, comm: Any, data: np.ndarray, directory: Path, header_bytes: int) -> None:
        self.comm, self.data = comm, data
        self.paths = {"overwrite": Path(directory) / f"floor-rank{comm.rank:05d}.bin",
                      "new": Path(directory) / f"floor-new-rank{comm.rank:05d}.bin"}
        self.header = bytes(header_bytes)
        self.buf: np.ndarray | None = None

    def prepare_save(self, form: str) -> None:
        """Untimed: ``new``: the file of the previous round removed (this one is created)."""
        if form == "new":
            try:
                self.paths["new"].unlink()
            except FileNotFoundError:
                pass

    def save(self, form: str) -> dict[str, float]:
        ph = Phases()
        path = self.paths[form]
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if form == "new" else 0)
        fd = os.open(path, flags, 0o644)
        try:
            parts = [memoryview(self.header), memoryview(self.data)]
            while parts:
                k = os.writev(fd, parts)
                while parts and k >= len(parts[0]):
                    k -= len(parts[0])
                    parts.pop(0)
                if parts and k:
                    parts[0] = parts[0][k:]
            ph.mark("write")
            os.fsync(fd)
            ph.mark("fsync")
        finally:
            os.close(fd)
        return ph.out

    def prepare_restore(self, path: Path, evicted: bool) -> None:
        """Untimed: a buffer of the file's size faulted in; with ``evicted``, the file dropped from
        the page cache (the lost rank's; the others' stay as the store's restore finds them)."""
        size = os.stat(path).st_size
        if self.buf is None or self.buf.nbytes != size:
            self.buf = faulted(size)
        if evicted:
            evict(path)

    def restore(self, path: Path | None) -> dict[str, float]:
        """Read ``path`` whole into the buffer (``None``: this rank reads nothing)."""
        ph = Phases()
        if path is None:
            return ph.out
        assert self.buf is not None
        fd = os.open(path, os.O_RDONLY)
        try:
            mv = memoryview(self.buf)
            got = 0
            while got < len(mv):
                k = os.readv(fd, [mv[got:]])
                if not k:
                    raise OSError(f"{path}: read {got} of {len(mv)} bytes")
                got += k
            ph.mark("read")
        finally:
            os.close(fd)
        return ph.out

    def cleanup(self) -> None:
        for p in self.paths.values():
            try:
                p.unlink()
            except FileNotFoundError:
                pass
