"""Partner-memory checkpoints: each rank keeps its state and sends ``copies`` copies to partners.

Rank ``r`` of ``n`` sends its packed state to the *holders* ``(r + k*distance) mod n`` for
``k = 1..copies`` (duplicates and ``r`` itself dropped when ``copies*distance`` wraps around).
Everything lives in process memory: a replacement process cannot read a dead process's
memory, so the copies on other ranks are what brings its state back.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from planaria.checkpoint._head import HEAD_BYTES, arrivals, head_decode, head_encode, send_head
from planaria.checkpoint.store import (
    TAG_DATA, TAG_META, TAG_REBUILD, TAG_RESEED, WARM, CheckpointError, Completion, Meta, PeerStore, Phases, Verdict,
    all_true, check_fresh, check_version, pack, unpack,
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
    """The ranks whose copies ``rank`` holds (ascending): among ``rank - k*distance``, k = 1..copies."""
    near = {(rank - k * distance) % n for k in range(1, copies + 1)}
    return sorted(o for o in near if o != rank and rank in holders(o, n, copies, distance))


class MemoryStore(PeerStore):
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
        self._done = Completion()           # the nonblocking barrier that completes the last save
        self._heads: dict[int, dict[int, tuple[np.ndarray, np.ndarray | None]]] = {}   # version -> owner -> header
        self._plans: dict[tuple[int, frozenset[int]], dict[int, int] | None] = {}     # (n, fresh) -> sources

    def __repr__(self) -> str:
        return f"MemoryStore(copies={self.copies}, distance={self.distance})"

    # -- save ----------------------------------------------------------------------------------
    def _save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        """Copy, send it to the holders and take the owners' copies; no closing barrier (``Completion``).

        Every send (the small description, then the data) is posted before this rank waits for
        anything, so no rank's data waits for its partner's description to arrive first.
        """
        ph = Phases()
        version = check_version(version)
        n, r = comm.size, comm.rank
        settled = self._done.settle(comm)        # raises FailureError before anything changed
        ph.mark("settle")
        pool = self._pool(version, settled, lambda entry: [b for _, b in entry[1].values()])
        meta, buf = pack(state, pool=pool)
        ph.mark("copy")
        dests = holders(r, n, self.copies, self.distance)
        srcs = owners_held_by(r, n, self.copies, self.distance)
        self._inflight = [buf]
        reqs = [comm.isend(meta, d, TAG_META) for d in dests]
        reqs += [comm.Isend(buf, dest=d, tag=TAG_DATA) for d in dests]
        metas: dict[int, Meta] = {}
        got: dict[int, np.ndarray] = {}
        self._inflight.append(got)
        for s in srcs:
            metas[s] = comm.recv(source=s, tag=TAG_META)
            ph.mark("metadata")                  # mostly: waiting for the owner to arrive
            got[s] = pool.take(metas[s].nbytes)
            reqs.append(comm.Irecv(got[s], source=s, tag=TAG_DATA))
            ph.mark("exchange")
        pool.clear()
        for q in reqs:
            q.Wait()
        ph.mark("exchange")
        held = {s: (metas[s], got[s]) for s in srcs}
        held[r] = (meta, buf)
        self._complete(comm, settled, lambda: self._commit(r, version, n, held), ph)

    def _commit(self, rank: int, version: int, n: int, held: dict[int, tuple[Meta, np.ndarray]],
                heads: bool = True) -> None:
        """``held`` becomes ``version``; with ``heads`` (a save), the restore headers of what this
        rank holds are made now, off the path of a recovery (else when a restore needs them)."""
        self._rank = rank
        self._add_version(version, (n, held))
        self._heads = {v: h for v, h in self._heads.items() if v in self._data and v != version}
        if heads:
            self._heads[version] = {o: head_encode((o, m.nbytes), m) for o, (m, _) in held.items()}

    def _head(self, version: int, owner: int, meta: Meta) -> tuple[np.ndarray, np.ndarray | None]:
        """The restore header of ``owner``'s state at ``version`` (made at save, or now)."""
        mine = self._heads.setdefault(version, {})
        if owner not in mine:
            mine[owner] = head_encode((owner, meta.nbytes), meta)
        return mine[owner]

    # -- restore ---------------------------------------------------------------------------------
    def _standard(self, rank: int, n: int) -> list[int]:
        """The owners whose states ``rank`` holds in a job of ``n`` ranks: itself first, then its owners."""
        return [rank] + owners_held_by(rank, n, self.copies, self.distance)

    def _held(self, version: int, rank: int, n: int) -> dict[int, tuple[Meta, np.ndarray]] | None:
        """What this rank holds of ``version`` saved by ``n`` ranks, when it holds all it should."""
        entry = self._data.get(version)
        if entry is None or entry[0] != n or set(entry[1]) != set(self._standard(rank, n)):
            return None
        return entry[1]

    def _sources(self, n: int, fresh: set[int]) -> dict[int, int] | None:
        """owner -> the rank that sends the owner's state to the fresh ranks needing it (the lowest
        non-fresh rank holding it); None when some needed state has no non-fresh holder left.
        Where copies live is fixed by (copies, distance, n), so every rank computes the same plan."""
        key = (n, frozenset(fresh))
        if key not in self._plans:
            self._plans[key] = self._plan(n, fresh)
        return self._plans[key]

    def _plan(self, n: int, fresh: set[int]) -> dict[int, int] | None:
        """``_sources``, computed."""
        out: dict[int, int] = {}
        for f in fresh:
            for o in self._standard(f, n):
                have = [x for x in [o] + holders(o, n, self.copies, self.distance) if x not in fresh]
                if not have:
                    return None
                out[o] = min(have)
        return out

    def _held_by(self, rank: int, version: int, entry: Any) -> int | None:
        return entry[0] if self._held(version, rank, entry[0]) is not None else None

    def _possible(self, n: int, fresh: set[int]) -> bool:
        return self._sources(n, fresh) is not None

    def restore(self, comm: Comm, version: int, fresh: set[int],
                into: dict[str, np.ndarray] | None = None, offers: list[Any] | None = None) -> dict[str, np.ndarray]:
        """Sources send each fresh rank its state and the copies it keeps, no collective first.

        Every rank derives the same plan from (fresh, copies, distance, n); a source that lacks
        the version sends a "missing" notice instead of data; whether the restore went through
        is settled at the end by statuses and verdicts (``Verdict``). Survivors change nothing
        (``into``, versions kept) before the verdict. With ``offers`` showing that every survivor
        holds the version (``CheckpointStore.restore``), no statuses are sent: a fresh rank waits
        only for its sources' data.
        """
        version = check_version(version)
        fresh = check_fresh(comm, fresh)
        n, r = comm.size, comm.rank
        sources = self._sources(n, fresh)
        if sources is None:
            raise CheckpointError(f"memory checkpoint version {version} cannot be restored "
                                  f"with fresh ranks {sorted(fresh)}")
        held = self._held(version, r, n) if r not in fresh else None
        # a source's sends first: the fresh ranks wait for nothing else
        reqs = self._send_rebuild(comm, version, held, sources, sorted(fresh)) if r not in fresh else []
        self._done.forget(False)          # a barrier of a save before the failure is never waited for
        if not fresh:                                   # a roll-back: every rank has its own state
            if not all_true(comm, held is not None):
                raise CheckpointError(f"memory checkpoint version {version} is not held by every rank")
            assert held is not None                     # held everywhere (above)
            return self._keep(version, r, held, into)
        agreed = self._agreed(offers, version, n, fresh)
        verdict = Verdict(comm, fresh)
        if r in fresh:
            return self._restore_fresh(comm, version, verdict, sources, agreed)
        return self._restore_source(comm, version, verdict, held, reqs, into, agreed)

    def _send_rebuild(self, comm: Comm, version: int, held: dict[int, tuple[Meta, np.ndarray]] | None,
                      sources: dict[int, int], fresh: list[int]) -> list[Any]:
        """A survivor's sends to the fresh ranks: per state it is the source of, a header (owner,
        size, description, made at save; size -1 when it lacks the version), then the data. The requests."""
        n, r = comm.size, comm.rank
        self._inflight = []
        reqs: list[Any] = []
        for f in fresh:
            for o in self._standard(f, n):
                if sources[o] != r:
                    continue
                if held is None:
                    reqs += send_head(comm, f, TAG_REBUILD, head_encode((o, -1), None), self._inflight)
                    continue
                reqs += send_head(comm, f, TAG_REBUILD, self._head(version, o, held[o][0]), self._inflight)
                reqs.append(comm.Isend(held[o][1], dest=f, tag=TAG_RESEED))
        return reqs

    def _restore_source(self, comm: Comm, version: int, verdict: Verdict,
                        held: dict[int, tuple[Meta, np.ndarray]] | None, reqs: list[Any],
                        into: dict[str, np.ndarray] | None, agreed: bool) -> dict[str, np.ndarray]:
        """A survivor, its sends (``reqs``) posted: its status (unless ``agreed``), then the verdict;
        its own state unpacked after it."""
        r = comm.rank
        if not agreed:
            reqs += verdict.tell(0 if held is not None else -1)
        ok = verdict.outcome()
        # its own state only now: copied while the fresh rank receives, it would slow that down
        out = self._keep(version, r, held, into) if ok and held is not None else None
        for q in reqs:
            q.Wait()
        self._inflight = []
        if out is None:
            raise CheckpointError(f"memory checkpoint version {version} cannot be restored "
                                  f"with fresh ranks {sorted(verdict.fresh)}: not every rank holds it")
        return out

    def _keep(self, version: int, r: int, held: dict[int, tuple[Meta, np.ndarray]],
              into: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """A survivor's side of a restore that went through: drop newer versions, unpack its own state."""
        self._data = {v: d for v, d in self._data.items() if v <= version}
        self._rank = r
        self._done.settled = True         # every rank holds ``version``: the restore went through
        return unpack(*held[r], into=into)

    def _restore_fresh(self, comm: Comm, version: int, verdict: Verdict,
                       sources: dict[int, int], agreed: bool) -> dict[str, np.ndarray]:
        """A fresh rank: its own state (unpacked at once into warm arrays) and the copies it keeps.

        The receives of every source's fixed-size headers (``_head``: owner, size, description)
        are posted first; each data receive is posted the moment its header is in, whichever
        source enters the restore first. ``agreed``: no statuses to wait for.
        """
        ph = Phases()
        n, r = comm.size, comm.rank
        status, sreqs = verdict.listen() if not agreed else (np.zeros(0, dtype=np.int64), [])
        heads = [(sources[o], o, np.empty(HEAD_BYTES, dtype=np.uint8)) for o in self._standard(r, n)]
        hreqs = [comm.Irecv(h, source=s, tag=TAG_REBUILD) for s, _, h in heads]
        posted: list[tuple[int, Meta, np.ndarray, Any]] = []     # (owner, description, buffer, receive)
        self._inflight = [status, heads, posted]
        problem = ""
        # a source's data receives are posted in the order it sends (its headers may complete in
        # another order here): each header in turn, once it and those before it are in
        order: dict[int, list[int]] = {}
        for i, (s, _, _) in enumerate(heads):
            order.setdefault(s, []).append(i)
        done: set[int] = set()
        for i in arrivals(hreqs):
            ph.mark("wait")                          # for the source to enter the restore and send
            done.add(i)
            queue = order[heads[i][0]]
            while queue and queue[0] in done:
                problem = self._post_one(comm, heads[queue.pop(0)], posted, problem)
            ph.mark("receive")
        got: dict[int, tuple[Meta, np.ndarray]] = {}
        out: dict[str, np.ndarray] | None = None
        for o, meta, buf, q in posted:
            q.Wait()
            ph.mark("receive")
            got[o] = (meta, buf)
            if o == r and not problem:
                out = unpack(meta, buf, pool=WARM)
                ph.mark("copy")
        self._announce(version, verdict, status, sreqs, problem, ph, lambda: self._commit(r, version, n, got, heads=False))
        assert out is not None
        return out

    @staticmethod
    def _post_one(comm: Comm, head: tuple[int, int, np.ndarray], posted: list[tuple[int, Meta, np.ndarray, Any]],
                  problem: str) -> str:
        """The data receive that the header ``head`` (source, owner, received header) announces,
        appended to ``posted``; the first problem seen so far (a source lacking the version, a mix-up)."""
        s, o, raw = head
        (o2, nbytes), meta = head_decode(raw, comm, s)
        if meta is None or nbytes < 0:
            return problem or f"rank {s} does not hold it"
        if o2 != o or meta.nbytes != nbytes:
            problem = problem or f"rank {comm.rank} expected the state of rank {o}, got {o2}"
        buf = WARM.take(nbytes)                  # received even when not used: nothing left in flight
        posted.append((o, meta, buf, comm.Irecv(buf, source=s, tag=TAG_RESEED)))
        return problem

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

    def _lost_usable(self, inv: list[dict[int, tuple[int, list[int]]]], logical: list[int | None],
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

    def recover_lost(self, comm: Comm, version: int, logical: list[int | None],
                     old_size: int) -> tuple[dict[str, np.ndarray] | None, dict[int, dict[str, np.ndarray]]]:
        """The lowest-ranked survivor holding a copy of a lost rank returns its state (no messages)."""
        version, lost, inv = self._recovering(comm, version, logical, old_size)
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
