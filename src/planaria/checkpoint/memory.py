"""Partner-memory checkpoints: each rank keeps its state and sends ``copies`` copies to partners.

Rank ``r`` of ``n`` sends its packed state to the *holders* ``(r + k*distance) mod n`` for
``k = 1..copies`` (duplicates and ``r`` itself dropped when ``copies*distance`` wraps around).
Everything lives in process memory: a replacement process cannot read a dead process's
memory, so the copies on other ranks are what brings its state back.
"""
from __future__ import annotations

import numpy as np

from planaria.checkpoint.store import (
    KEEP, TAG_DATA, TAG_META, TAG_REBUILD, TAG_RESEED, WARM, BufferPool, CheckpointError, CheckpointStore, Meta,
    check_fresh, check_logical, check_version, newest, pack, unpack,
)
from planaria.comm.base import Comm


def holders(owner: int, n: int, copies: int, distance: int) -> list[int]:
    """The ranks that hold a copy of ``owner``'s state, in order k = 1..copies."""
    out: list[int] = []
    for k in range(1, copies + 1):
        h = (owner + k * distance) % n
        if h != owner and h not in out:
            out.append(h)
    return out


def owners_held_by(rank: int, n: int, copies: int, distance: int) -> list[int]:
    """The ranks whose copies ``rank`` holds."""
    return [o for o in range(n) if o != rank and rank in holders(o, n, copies, distance)]


class MemoryStore(CheckpointStore):
    """Checkpoints in memory, duplicated on ``copies`` partner ranks ``distance`` apart.

    Survives, per version, the loss of any ``copies`` of the ``copies + 1`` processes that
    hold one rank's state (the owner and its holders). With ``copies=1, distance=1`` rank
    ``r`` and ``r+1`` may not both be lost at once.
    """

    name = "memory"
    speed_rank = 0

    def __init__(self, copies: int = 1, distance: int = 1) -> None:
        if copies < 1:
            raise ValueError(f"copies must be >= 1, not {copies}")
        if distance < 1:
            raise ValueError(f"distance must be >= 1, not {distance}")
        self.copies = int(copies)
        self.distance = int(distance)
        # version -> (size of the comm at save, {owner logical rank: (meta, packed bytes)})
        self._data: dict[int, tuple[int, dict[int, tuple[Meta, np.ndarray]]]] = {}
        self._rank: int | None = None
        self._inflight: list[object] = []   # buffers of an interrupted exchange (kept alive)

    def __repr__(self) -> str:
        return f"MemoryStore(copies={self.copies}, distance={self.distance})"

    # -- save ----------------------------------------------------------------------------------
    def save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        version = check_version(version)
        n, r = comm.size, comm.rank
        # Double buffering: the buffers of the oldest version kept are reused for this one. The
        # newest complete version stays untouched, so a failure during this save leaves it usable.
        pool = BufferPool()
        self._data = {v: d for v, d in self._data.items() if v < version}
        while len(self._data) >= KEEP:
            old = min(self._data)
            for _, b in self._data.pop(old)[1].values():
                pool.give(b)
        meta, buf = pack(state, pool=pool)
        dests = holders(r, n, self.copies, self.distance)
        srcs = owners_held_by(r, n, self.copies, self.distance)
        self._inflight = [buf]
        sends = [comm.isend(meta, d, TAG_META) for d in dests]
        metas = {s: comm.recv(source=s, tag=TAG_META) for s in srcs}
        for q in sends:
            q.Wait()
        got = {s: pool.take(metas[s].nbytes) for s in srcs}
        pool.clear()
        self._inflight.append(got)
        reqs = [comm.Irecv(got[s], source=s, tag=TAG_DATA) for s in srcs]
        reqs += [comm.Isend(buf, dest=d, tag=TAG_DATA) for d in dests]
        for q in reqs:
            q.Wait()
        comm.Barrier()                 # every rank has its copies: the version is complete
        held = {s: (metas[s], got[s]) for s in srcs}
        held[r] = (meta, buf)
        self._commit(r, version, n, held)
        self._inflight = []

    def _commit(self, rank: int, version: int, n: int, held: dict[int, tuple[Meta, np.ndarray]]) -> None:
        self._rank = rank
        self._data = {v: d for v, d in self._data.items() if v < version}
        self._data[version] = (n, held)
        for v in list(self._data):
            if v not in newest(self._data, KEEP):
                del self._data[v]

    def versions(self) -> set[int]:
        return set(self._data)

    # -- restore ---------------------------------------------------------------------------------
    def _inventory(self, comm: Comm, fresh: set[int]) -> list[dict[int, tuple[int, list[int]]]]:
        mine: dict[int, tuple[int, list[int]]] = {}
        if comm.rank not in fresh:
            mine = {v: (n, sorted(held)) for v, (n, held) in self._data.items()}
        return comm.allgather(mine)

    @staticmethod
    def _usable(inv: list[dict[int, tuple[int, list[int]]]], fresh: set[int], n: int) -> set[int]:
        candidates = set().union(*(set(d) for d in inv))
        out = set()
        for v in candidates:
            have: set[int] = set()
            ok = True
            for rank, d in enumerate(inv):
                if rank in fresh:
                    continue
                if v not in d or d[v][0] != n:
                    ok = False             # a survivor lacks it: the save of v did not complete
                    break
                have.update(d[v][1])
            if ok and have >= set(range(n)):
                out.add(v)
        return out

    def restorable_versions(self, comm: Comm, fresh: set[int]) -> set[int]:
        fresh = check_fresh(comm, fresh)
        return self._usable(self._inventory(comm, fresh), fresh, comm.size)

    def restore(self, comm: Comm, version: int, fresh: set[int],
                into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        version = check_version(version)
        fresh = check_fresh(comm, fresh)
        n, r = comm.size, comm.rank
        inv = self._inventory(comm, fresh)
        if version not in self._usable(inv, fresh, n):
            raise CheckpointError(f"memory checkpoint version {version} cannot be restored "
                                  f"with fresh ranks {sorted(fresh)}")

        def source(owner: int) -> int:
            return min(rank for rank, d in enumerate(inv)
                       if rank not in fresh and owner in d[version][1])

        # (receiver, owner): each fresh rank needs its own state and the copies it holds for others
        needs = sorted({(f, f) for f in fresh} |
                       {(f, o) for f in fresh for o in owners_held_by(f, n, self.copies, self.distance)})
        plan = [(source(o), f, o) for f, o in needs]
        sends = []
        if r not in fresh:
            held = self._data[version][1]
            for src, dst, owner in plan:
                if src == r:
                    meta, buf = held[owner]
                    sends.append(comm.isend((owner, meta), dst, TAG_REBUILD))
                    sends.append(comm.Isend(buf, dest=dst, tag=TAG_RESEED))
        else:
            got: dict[int, tuple[Meta, np.ndarray]] = {}
            for src, dst, owner in plan:
                if dst != r:
                    continue
                o, meta = comm.recv(source=src, tag=TAG_REBUILD)
                if o != owner:
                    raise CheckpointError(f"rank {r} expected the state of rank {owner}, got {o}")
                buf = WARM.take(meta.nbytes)
                self._inflight = [buf]
                comm.Recv(buf, source=src, tag=TAG_RESEED)
                got[owner] = (meta, buf)
            self._data = {}
            self._commit(r, version, n, got)
        for q in sends:
            q.Wait()
        self._inflight = []
        self._data = {v: d for v, d in self._data.items() if v <= version}
        self._rank = r
        meta, buf = self._data[version][1][r]
        out = unpack(meta, buf, pool=WARM if r in fresh else None, into=None if r in fresh else into)
        comm.Barrier()
        return out

    def footprint(self) -> list[int]:
        if not self._data:
            return []
        held = self._data[max(self._data)][1]
        own = [m.nbytes for o, (m, _) in held.items() if o == self._rank]
        return [m.nbytes for m, _ in held.values()] + own

    # -- continuing on fewer ranks ---------------------------------------------------------------
    def _lost_inventory(self, comm: Comm, logical: list[int | None]) -> list[dict[int, tuple[int, list[int]]]]:
        mine: dict[int, tuple[int, list[int]]] = {}
        if logical[comm.rank] is not None:
            mine = {v: (n, sorted(held)) for v, (n, held) in self._data.items()}
        return comm.allgather(mine)

    @staticmethod
    def _lost_usable(inv: list[dict[int, tuple[int, list[int]]]], logical: list[int | None],
                     old_size: int) -> set[int]:
        survivors = [rank for rank, lg in enumerate(logical) if lg is not None]
        if not survivors:
            return set()
        out = set()
        for v in set(inv[survivors[0]]):
            have: set[int] = set()
            ok = True
            for rank in survivors:
                d = inv[rank]
                if v not in d or d[v][0] != old_size or logical[rank] not in d[v][1]:
                    ok = False
                    break
                have.update(d[v][1])
            if ok and have >= set(range(old_size)):
                out.add(v)
        return out

    def recoverable_lost_versions(self, comm: Comm, logical: list[int | None], old_size: int) -> set[int]:
        check_logical(comm, logical, old_size)
        return self._lost_usable(self._lost_inventory(comm, logical), logical, old_size)

    def recover_lost(self, comm: Comm, version: int, logical: list[int | None],
                     old_size: int) -> tuple[dict[str, np.ndarray] | None, dict[int, dict[str, np.ndarray]]]:
        """The lowest-ranked survivor holding a copy of a lost rank returns its state (no messages)."""
        version = check_version(version)
        lost = check_logical(comm, logical, old_size)
        inv = self._lost_inventory(comm, logical)
        if version not in self._lost_usable(inv, logical, old_size):
            raise CheckpointError(f"memory checkpoint version {version} cannot rebuild lost rank(s) {lost} "
                                  f"of {old_size}")
        me = logical[comm.rank]
        mine: dict[str, np.ndarray] | None = None
        found: dict[int, dict[str, np.ndarray]] = {}
        if me is not None:
            held = self._data[version][1]
            mine = unpack(*held[me])
            for f in lost:
                source = min(rank for rank, d in enumerate(inv)
                             if logical[rank] is not None and f in d[version][1])
                if source == comm.rank:
                    found[f] = unpack(*held[f])
        self._data = {v: d for v, d in self._data.items() if v <= version}
        comm.Barrier()
        return mine, found
