"""XOR parity groups (the scheme of SCR's XOR redundancy): one lost rank per group is rebuilt.

Logical ranks form groups of ``group_size`` consecutive ranks (a last group of one rank is
merged into the group before it). In a group of ``m`` members, every member pads its packed
state to the group's common length ``L = (m-1)*c`` and cuts it into ``m-1`` chunks of ``c``
bytes, one chunk *assigned* to each other member: member ``j``'s chunk for member ``i`` is
``D_j[i]`` (the chunks of ``j`` are assigned to the other members in group order). Member
``i`` keeps its own data plus the parity chunk

    P_i = XOR over j != i of D_j[i]                               (c bytes)

so the extra memory per rank is ``L/(m-1)``, and a save moves ``L`` bytes out of every rank.

Rebuilding a lost member ``f``: every survivor ``s`` sends ``f`` one vector of ``m`` chunks:
for each other member ``i`` (in ``f``'s chunk order) ``P_s`` if ``s == i`` else ``D_s[i]``,
then ``D_s[f]``. The XOR of the survivors' vectors is

    D_f[i] = P_i XOR (XOR over s not in {i, f} of D_s[i])   and   P_f = XOR over s != f of D_s[f]

i.e. ``f``'s data and its parity chunk, so redundancy is whole again after one restore.

A member keeps its data chunks and its parity chunk in one buffer (``[D_s[0] .. D_s[m-2], P_s]``),
and sends that buffer to ``f`` as it is, one message; ``f`` takes each chunk of it where its
vector needs it (``_perm``) as it XORs the survivors' buffers together.

A save whose descriptions are those of the previous save (the usual case: the same arrays
saved again) sends the chunks at once, each behind a small fixed-size header; only when some
member's description changed does the group exchange descriptions before its chunks.
"""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from planaria.checkpoint._head import HEAD_BYTES, arrivals, head_decode, head_encode, send_head
from planaria.checkpoint.store import (
    TAG_META, TAG_PARITY, TAG_REBUILD, TAG_RESEED, WARM, BufferPool, CheckpointError, Completion, Meta, PeerStore,
    Phases, Verdict, all_true, check_fresh, check_version, describe, pack, unpack,
)
from planaria.comm.base import Comm

_ALIGN = 8


def groups(n: int, group_size: int) -> list[list[int]]:
    """Groups of consecutive logical ranks; a trailing group of one rank joins the previous group."""
    gs = [list(range(s, min(s + group_size, n))) for s in range(0, n, group_size)]
    if len(gs) > 1 and len(gs[-1]) == 1:
        gs[-2].extend(gs.pop())
    return gs


def group_of(rank: int, n: int, group_size: int) -> list[int]:
    for g in groups(n, group_size):
        if rank in g:
            return g
    raise ValueError(f"rank {rank} not in 0..{n - 1}")


def chunk_len(nbytes: int, m: int) -> int:
    """Chunk size ``c`` for a group of ``m`` whose longest packed state has ``nbytes`` bytes."""
    per = -(-max(nbytes, 1) // (m - 1))
    return -(-per // _ALIGN) * _ALIGN


def _slot(owner_pos: int, member_pos: int) -> int:
    """Index of the chunk of the member at ``owner_pos`` assigned to the member at ``member_pos``."""
    return member_pos if member_pos < owner_pos else member_pos - 1


def _xor_into(acc: np.ndarray, other: np.ndarray) -> None:
    np.bitwise_xor(acc.view(np.uint64), other.view(np.uint64), out=acc.view(np.uint64))


def _gather_xor(acc: np.ndarray, buf: np.ndarray, perm: list[int]) -> None:
    """Chunk ``k`` of ``acc`` XORed with chunk ``perm[k]`` of ``buf`` (``m`` chunks of one size each)."""
    m = len(perm)
    a, b = acc.view(np.uint64).reshape(m, -1), buf.view(np.uint64).reshape(m, -1)
    for k in range(m):
        np.bitwise_xor(a[k], b[perm[k]], out=a[k])


def _reorder_xor(buf: np.ndarray, order: list[int], other: np.ndarray | None = None,
                 other_order: list[int] | None = None) -> None:
    """Chunk ``k`` of ``buf`` becomes its chunk ``order[k]`` (XORed with chunk ``other_order[k]`` of
    ``other``, which this overwrites), in place: each cycle of the permutation walked once."""
    m = len(order)
    a = buf.view(np.uint64).reshape(m, -1)
    b = None if other is None else other.view(np.uint64).reshape(m, -1)
    q = other_order if other_order is not None else order
    done = [False] * m
    for k0 in range(m):
        if done[k0]:
            continue
        last = order.index(k0)                   # the cycle's last position reads chunk k0
        done[k0] = done[last] = True
        if last == k0:                           # a chunk in place already
            if b is not None:
                np.bitwise_xor(a[k0], b[q[k0]], out=a[k0])
            continue
        if b is not None:                        # its result first, into the chunk of ``other`` it uses
            np.bitwise_xor(a[k0], b[q[last]], out=b[q[last]])
            kept = b[q[last]]
        else:
            kept = a[k0].copy()
        k = k0
        while k != last:
            j = order[k]                         # a[j] is written after this read (next in the cycle)
            if b is None:
                np.copyto(a[k], a[j])
            else:
                np.bitwise_xor(a[j], b[q[k]], out=a[k])
            done[k] = True
            k = j
        np.copyto(a[last], kept)


class _Entry:
    """A version a member holds: its data (``m - 1`` chunks) and its parity chunk, laid out in
    one buffer (``whole``), so that the member sends both to a fresh rank as one message; and
    the headers of such a message, made at save (with the group's descriptions, and without)."""

    __slots__ = ("n", "metas", "whole", "buf", "parity", "c", "heads", "version", "_key")

    def __init__(self, n: int, metas: list[Meta], whole: np.ndarray, c: int, version: int = -1,
                 key: int | None = None, heads: bool = True) -> None:
        m = len(metas)
        self.n, self.metas, self.whole, self.c, self.version, self._key = n, metas, whole, c, version, key
        # a group of one (c == 0): the data alone, no parity
        self.buf, self.parity = (whole[:(m - 1) * c], whole[(m - 1) * c:m * c]) if c else (whole, whole[:0])
        self.heads = _heads(version, self) if heads and c and version >= 0 else None

    def key(self) -> int:
        """A checksum of the group's descriptions (equal on every member holding this version)."""
        if self._key is None:
            # of their text: a pickle of equal descriptions may differ (shared objects are memoized)
            self._key = zlib.crc32(repr(self.metas).encode())
        return self._key


def _heads(version: int, e: _Entry) -> tuple[Any, Any]:
    """The headers a member holding ``e`` sends a fresh rank: with the group's descriptions, and without."""
    values = (version, e.c, e.n)
    return head_encode(values, e.metas), head_encode(values, None)


def _perm(g: list[int], s: int, f: int) -> list[int]:
    """Where member ``s``'s buffer holds each of the ``m`` chunks of fresh member ``f``'s vector
    (module docstring): chunk indices of ``s``'s ``whole``, in ``f``'s order."""
    spos, fpos = g.index(s), g.index(f)
    m = len(g)
    out = [m - 1 if i == s else _slot(spos, ipos) for ipos, i in enumerate(g) if i != f]
    return out + [_slot(spos, fpos)]


class XorStore(PeerStore):
    """Checkpoints in memory protected by XOR parity over groups of ``group_size`` ranks.

    Survives the loss of one rank per group (per version); two lost ranks in one group make
    the version unrestorable from this store.
    """

    name = "xor"
    speed_rank = 1

    def __init__(self, group_size: int = 4) -> None:
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2, not {group_size}")
        self.group_size = int(group_size)
        self._data: dict[int, _Entry] = {}
        self._inflight: list[object] = []
        self._me = 0                     # this rank's position in its group (at the last save/restore)
        self._scratch: list[np.ndarray] = []   # receive buffers of a save's chunks, kept from save to save
        self._done = Completion()        # the nonblocking barrier that completes the last save

    def __repr__(self) -> str:
        return f"XorStore(group_size={self.group_size})"

    # -- save ----------------------------------------------------------------------------------
    def _save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        """The chunks to the group, each member's parity XORed as they arrive; the group's
        descriptions exchanged first only when some member's differs from the previous save's.

        No closing barrier: the version is completed by a nonblocking barrier the next save
        waits for (``Completion``), as in ``MemoryStore``.
        """
        ph = Phases()
        version = check_version(version)
        n, r = comm.size, comm.rank
        g = group_of(r, n, self.group_size)
        settled = self._done.settle(comm)        # raises FailureError before anything changed
        ph.mark("settle")
        if len(g) < 2:          # a job of one rank: nothing to protect against
            meta, buf = pack(state)
            self._add_version(version, _Entry(n, [meta], buf, 0))
            self._done.start(comm)
            if not settled:
                self._done.finish()
            return
        self._me = g.index(r)
        meta = describe(state)
        base = self._base(version, n, g)
        pool = self._pool(version, settled, lambda e: (e.whole,))
        entry = self._save_unchanged(comm, version, state, meta, g, base, pool, ph)
        if entry is None:
            entry = self._save_described(comm, version, state, meta, g, pool, ph)
        pool.clear()
        self._complete(comm, settled, lambda: self._add_version(version, entry), ph)

    def _base(self, version: int, n: int, g: list[int]) -> _Entry | None:
        """The newest version held before ``version``, when this group of ``n`` ranks saved it."""
        older = [v for v in self._data if v < version]
        e = self._data[max(older)] if older else None
        return e if e is not None and e.c and e.n == n and len(e.metas) == len(g) else None

    def _buffers(self, state: dict[str, np.ndarray], meta: Meta, m: int, c: int,
                 pool: BufferPool) -> tuple[np.ndarray, list[np.ndarray]]:
        """This rank's data cut to ``m - 1`` chunks of ``c`` bytes, followed by room for its parity
        chunk (one buffer, as a fresh rank receives it), and where the others' chunks land.

        The first chunk to come lands in the parity chunk itself, and each later one, received
        into a scratch buffer this store keeps from save to save (no new memory to fault in), is
        XORed into it in place (``_fold``). Two scratch chunks XORed into the parity chunk would
        write memory that no operand brought into the cache: a third more memory traffic."""
        _, whole = pack(state, extra=(m - 1) * c - meta.nbytes, pool=pool, spare=c, meta=meta)
        k = m - 2
        if len(self._scratch) != k or any(b.size != c for b in self._scratch):
            self._scratch = [np.empty(c, dtype=np.uint8) for _ in range(k)]
        return whole, [whole[(m - 1) * c:]] + self._scratch

    @staticmethod
    def _fold(parity: np.ndarray, into: list[np.ndarray], k: int) -> None:
        """The ``k``-th chunk received (into ``into[k]``; the first into ``parity`` itself) folded
        into ``parity``."""
        if k:
            _xor_into(parity, into[k])

    def _save_unchanged(self, comm: Comm, version: int, state: dict[str, np.ndarray], meta: Meta,
                        g: list[int], base: _Entry | None, pool: BufferPool, ph: Phases) -> _Entry | None:
        """The save without a round of descriptions, cut as the previous version (``base``) was.

        This rank's chunks go out at once behind a fixed-size header (version, chunk size, the
        previous version and a checksum of the group's descriptions at it; chunk size -1 and no
        chunks when this rank's description changed or it holds no such version): a receiver
        learns from the header how many bytes follow. The new version, or None on every member
        alike when some member's header differs from this rank's (the group then exchanges its
        descriptions: ``_save_described``)."""
        me, m, c = self._me, len(g), -1
        if base is not None and base.metas[me] == meta:
            c = base.c
        key = np.array([version, c, base.version if base else -1, base.key() if base else -1], dtype=np.int64)
        others = [x for x in g if x != comm.rank]
        whole, into = self._buffers(state, meta, m, c, pool) if c >= 0 else (None, [])
        ph.mark("copy")
        heads = [np.empty(key.size, dtype=np.int64) for _ in others]
        self._inflight = [key, heads, whole, into]
        hreqs = [comm.Irecv(h, source=x, tag=TAG_META) for h, x in zip(heads, others, strict=True)]
        sends = [comm.Isend(key, dest=x, tag=TAG_META) for x in others]
        if whole is not None:
            for x in others:
                s = _slot(me, g.index(x))
                sends.append(comm.Isend(whole[s * c:(s + 1) * c], dest=x, tag=TAG_PARITY))
        parity = whole[(m - 1) * c:] if whole is not None else None
        same = self._gather_parity(comm, key, heads, hreqs, others, parity, into)
        for q in sends:
            q.Wait()
        ph.mark("exchange")
        if not same:
            if whole is not None:
                pool.give(whole)
            return None
        assert base is not None and whole is not None
        return _Entry(comm.size, base.metas, whole, c, version, base.key())

    def _gather_parity(self, comm: Comm, key: np.ndarray, heads: list[np.ndarray], hreqs: list[Any],
                       others: list[int], parity: np.ndarray | None, into: list[np.ndarray]) -> bool:
        """Each member's chunk received as its header comes in and folded into ``parity``;
        whether every header equals this rank's ``key``."""
        free = list(into)
        same = parity is not None
        recvs: list[tuple[np.ndarray, Any]] = []
        for i in arrivals(hreqs):
            h = heads[i]
            same = same and bool((h == key).all())
            if h[1] > 0:           # a chunk follows: received even when it is not used
                b = free.pop(0) if same else np.empty(int(h[1]), dtype=np.uint8)
                recvs.append((b, comm.Irecv(b, source=others[i], tag=TAG_PARITY)))
        self._inflight.append(recvs)
        for k, (_, q) in enumerate(recvs):
            q.Wait()
            if same and parity is not None and len(into) > 1:
                self._fold(parity, into, k)
        return same

    def _save_described(self, comm: Comm, version: int, state: dict[str, np.ndarray], meta: Meta,
                        g: list[int], pool: BufferPool, ph: Phases) -> _Entry:
        """Descriptions to the group, then the chunks, cut to the longest state of the group."""
        m, me = len(g), self._me
        others = [x for x in g if x != comm.rank]
        sends = [comm.isend(meta, x, TAG_META) for x in others]
        metas = [meta if x == comm.rank else comm.recv(source=x, tag=TAG_META) for x in g]
        for q in sends:
            q.Wait()
        ph.mark("metadata")
        c = chunk_len(max(mt.nbytes for mt in metas), m)
        whole, into = self._buffers(state, meta, m, c, pool)
        ph.mark("copy")
        self._inflight = [whole, into]
        recvs = [comm.Irecv(into[k], source=x, tag=TAG_PARITY) for k, x in enumerate(others)]
        sends = []
        for x in others:
            s = _slot(me, g.index(x))
            sends.append(comm.Isend(whole[s * c:(s + 1) * c], dest=x, tag=TAG_PARITY))
        for k, q in enumerate(recvs):
            q.Wait()
            ph.mark("exchange")
            if len(into) > 1:
                self._fold(whole[(m - 1) * c:], into, k)
                ph.mark("xor")
        for q in sends:
            q.Wait()
        ph.mark("exchange")
        return _Entry(comm.size, metas, whole, c, version)

    # -- restore ---------------------------------------------------------------------------------
    def _restorable_groups(self, n: int, fresh: set[int]) -> bool:
        """Whether every group lost at most one member, and no group of one lost its only member."""
        for g in groups(n, self.group_size):
            lost = [x for x in g if x in fresh]
            if len(lost) > 1 or (lost and len(g) < 2):
                return False
        return True

    def _held_by(self, rank: int, version: int, entry: Any) -> int | None:
        return int(entry.n)

    def _possible(self, n: int, fresh: set[int]) -> bool:
        return self._restorable_groups(n, fresh)

    def restore(self, comm: Comm, version: int, fresh: set[int],
                into: dict[str, np.ndarray] | None = None, offers: list[Any] | None = None) -> dict[str, np.ndarray]:
        """The surviving members of a fresh rank's group send it their chunks, no collective first.

        A member that lacks the version sends nothing but its status (-1); whether the restore
        went through is settled at the end by statuses and verdicts (``Verdict``). Survivors
        change nothing (``into``, versions kept) before the verdict. With ``offers`` showing that
        every survivor holds the version (``CheckpointStore.restore``), no statuses are sent: a
        fresh rank learns the chunk size from the chunks themselves.
        """
        version = check_version(version)
        fresh = check_fresh(comm, fresh)
        n, r = comm.size, comm.rank
        self._done.forget(False)          # a barrier of a save before the failure is never waited for
        if not self._restorable_groups(n, fresh):
            raise CheckpointError(f"xor checkpoint version {version} cannot be restored "
                                  f"with fresh ranks {sorted(fresh)}")
        e = self._data.get(version)
        if e is not None and e.n != n:
            e = None
        if not fresh:                                   # a roll-back: every rank has its own data
            if not all_true(comm, e is not None):
                raise CheckpointError(f"xor checkpoint version {version} is not held by every rank")
            assert e is not None                        # held everywhere (above)
            return self._keep(version, r, n, e, into)
        # a member's sends first: the fresh rank of its group waits for nothing else
        reqs = self._send_rebuild(comm, version, e, fresh) if r not in fresh else []
        agreed = self._agreed(offers, version, n, fresh)
        verdict = Verdict(comm, fresh)
        if r in fresh:
            return self._restore_fresh(comm, version, verdict, agreed)
        return self._restore_member(comm, version, verdict, e, reqs, into, agreed)

    def _send_rebuild(self, comm: Comm, version: int, e: _Entry | None, fresh: set[int]) -> list[Any]:
        """A survivor's sends to the fresh member of its group, if any: a header (version, chunk size
        or -1 when it lacks the version, ranks at save; the group's descriptions from its first
        survivor), then its data and parity as one message. The requests."""
        n, r = comm.size, comm.rank
        g = group_of(r, n, self.group_size)
        lost = [x for x in g if x in fresh]
        self._inflight = []
        if not lost:
            return []
        f = lost[0]
        first = r == (g[1] if g[0] == f else g[0])
        if e is None:
            head = head_encode((version, -1, -1), None)
        else:
            if e.heads is None:          # an entry rebuilt by a restore: its headers made now
                e.heads = _heads(version, e)
            head = e.heads[0] if first else e.heads[1]
        reqs = send_head(comm, f, TAG_REBUILD, head, self._inflight)
        if e is not None:
            # the store's own buffer, as it is: the fresh rank puts the chunks in its order
            self._inflight.append(e.whole)
            reqs.append(comm.Isend(e.whole, dest=f, tag=TAG_RESEED))
        return reqs

    def _restore_member(self, comm: Comm, version: int, verdict: Verdict, e: _Entry | None, reqs: list[Any],
                        into: dict[str, np.ndarray] | None, agreed: bool) -> dict[str, np.ndarray]:
        """A survivor, its sends (``reqs``) posted: its status (unless ``agreed``), then the verdict;
        its own data unpacked after it."""
        n, r = comm.size, comm.rank
        if not agreed:
            reqs += verdict.tell(e.c if e is not None else -1)
        ok = verdict.outcome()
        # its own data only now: copied while the fresh rank receives, it would slow that down
        out = self._keep(version, r, n, e, into) if ok and e is not None else None
        for q in reqs:
            q.Wait()
        self._inflight = []
        if out is None:
            raise CheckpointError(f"xor checkpoint version {version} cannot be restored "
                                  f"with fresh ranks {sorted(verdict.fresh)}: not every rank holds it")
        return out

    def _keep(self, version: int, r: int, n: int, e: _Entry,
              into: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """A survivor's side of a restore that went through: drop newer versions, unpack its own data."""
        self._data = {v: x for v, x in self._data.items() if v <= version}
        g = group_of(r, n, self.group_size)
        self._me = g.index(r)
        self._done.settled = True         # every rank holds ``version``: the restore went through
        return unpack(e.metas[self._me], e.buf, into=into)

    def _restore_fresh(self, comm: Comm, version: int, verdict: Verdict, agreed: bool) -> dict[str, np.ndarray]:
        """A fresh rank: each survivor's buffer received, the chunks XORed together in this rank's
        order (data and parity).

        The receives of the survivors' fixed-size headers (``_head``) are posted first; each
        survivor's data receive the moment its header is in, whichever enters the restore first.
        """
        ph = Phases()
        n, r = comm.size, comm.rank
        g = group_of(r, n, self.group_size)
        m = len(g)
        survivors = [x for x in g if x != r]
        heads = [np.empty(HEAD_BYTES, dtype=np.uint8) for _ in survivors]
        hreqs = [comm.Irecv(h, source=x, tag=TAG_REBUILD) for h, x in zip(heads, survivors, strict=True)]
        status, sreqs = verdict.listen() if not agreed else (np.zeros(0, dtype=np.int64), [])
        bufs: dict[int, np.ndarray] = {}
        self._inflight = [status, heads, bufs]
        got: dict[int, tuple[list[int], Any]] = {}
        reqs: list[tuple[int, Any]] = []
        for i in arrivals(hreqs):
            ph.mark("wait")                      # for the member to enter the restore and send
            x = survivors[i]
            got[x] = head_decode(heads[i], comm, x)
            c = got[x][0][1]
            if c >= 0:
                bufs[x] = WARM.take(m * c)
                reqs.append((x, comm.Irecv(bufs[x], source=x, tag=TAG_RESEED)))
            ph.mark("receive")
        problem = self._head_problem(version, got, survivors)
        acc, order = None, None        # the first buffer in, in its sender's order until the second
        for x, req in reqs:
            req.Wait()
            ph.mark("receive")
            if problem:
                continue
            if acc is None:
                acc, order = bufs.pop(x), _perm(g, x, r)
                continue
            if order is not None:
                _reorder_xor(acc, order, bufs.pop(x), _perm(g, x, r))
                order = None
            else:
                _gather_xor(acc, bufs.pop(x), _perm(g, x, r))
            ph.mark("xor")
        if acc is not None and order is not None:       # a group of two: one survivor
            _reorder_xor(acc, order)
        bufs.clear()
        out, entry = None, None
        if not problem:
            assert acc is not None
            (_, c, n_saved), metas = got[survivors[0]]
            entry = _Entry(n_saved, metas, acc, c, version, heads=False)
            out = unpack(metas[g.index(r)], entry.buf, pool=WARM)
            ph.mark("copy")

        def commit() -> None:
            assert entry is not None
            self._add_version(version, entry)
            self._me = g.index(r)
        self._announce(version, verdict, status, sreqs, problem, ph, commit)
        assert out is not None
        return out

    @staticmethod
    def _head_problem(version: int, got: dict[int, tuple[list[int], Any]], survivors: list[int]) -> str:
        """What is wrong with the survivors' headers (``{member: ([version, chunk size, ranks], metas)}``), or ''."""
        if any(v[1] < 0 for v, _ in got.values()):
            return "a member of its group does not hold it"
        keys = {(v[0], v[1], v[2]) for v, _ in got.values()}
        metas = got[survivors[0]][1]
        if len(keys) != 1 or next(iter(keys))[0] != version or not isinstance(metas, list) \
                or len(metas) != len(survivors) + 1:
            return f"the members of its group disagree on it ({sorted(keys)})"
        return ""

    def footprint(self) -> list[int]:
        if not self._data:
            return []
        e = self._data[max(self._data)]
        if e.c == 0:                     # a group of one: no parity, nothing to rebuild from
            return []
        m = len(e.metas)
        return [m * e.c] * m + [e.metas[self._me].nbytes]

    # -- continuing on fewer ranks ---------------------------------------------------------------
    def _parts(self, e: _Entry, g: list[int], me: int, f: int) -> list[np.ndarray]:
        """The ``m`` chunks member ``me`` of group ``g`` contributes to rebuilding ``f``, as views (module docstring)."""
        c = e.c
        mpos, fpos = g.index(me), g.index(f)
        parts = []
        for ipos, i in enumerate(g):
            if i == f:
                continue
            s = _slot(mpos, ipos)
            parts.append(e.parity if i == me else e.buf[s * c:(s + 1) * c])
        s = _slot(mpos, fpos)
        parts.append(e.buf[s * c:(s + 1) * c])
        return parts

    def _vector(self, e: _Entry, g: list[int], me: int, f: int) -> np.ndarray:
        """The chunks of :meth:`_parts` in one new vector (to be XORed into on a survivor)."""
        return np.concatenate(self._parts(e, g, me, f))

    def _lost_usable(self, inv: list[dict[int, int]], logical: list[int | None], old_size: int) -> set[int]:
        live = [d for d, lg in zip(inv, logical, strict=True) if lg is not None]
        if not live:
            return set()
        candidates = set(live[0])
        for d in live[1:]:
            candidates &= set(d)
        candidates = {v for v in candidates if all(d[v] == old_size for d in live)}
        present = {lg for lg in logical if lg is not None}
        for g in groups(old_size, self.group_size):
            gone = [x for x in g if x not in present]
            if len(gone) > 1 or (gone and len(g) < 2):
                return set()
        return candidates

    def _lost_inventory(self, comm: Comm, logical: list[int | None]) -> list[dict[int, int]]:
        mine = {} if logical[comm.rank] is None else {v: e.n for v, e in self._data.items()}
        return comm.allgather(mine)

    def recover_lost(self, comm: Comm, version: int, logical: list[int | None],
                     old_size: int) -> tuple[dict[str, np.ndarray] | None, dict[int, dict[str, np.ndarray]]]:
        """A lost member's state is XORed together on the lowest surviving member of its group."""
        version, _, _ = self._recovering(comm, version, logical, old_size)
        me = logical[comm.rank]
        mine: dict[str, np.ndarray] | None = None
        found: dict[int, dict[str, np.ndarray]] = {}
        if me is not None:
            where = {lg: rank for rank, lg in enumerate(logical) if lg is not None}
            g = group_of(me, old_size, self.group_size)
            e = self._data[version]
            mine = unpack(e.metas[g.index(me)], e.buf)
            gone = [x for x in g if x not in where]
            if gone:
                f = gone[0]
                members = sorted(where[x] for x in g if x != f)      # comm ranks of the survivors
                vec = self._vector(e, g, me, f)
                self._inflight = [vec]
                if comm.rank == members[0]:
                    bufs = {x: np.empty_like(vec) for x in members[1:]}
                    self._inflight.append(bufs)
                    reqs = [comm.Irecv(bufs[x], source=x, tag=TAG_RESEED) for x in members[1:]]
                    for req, x in zip(reqs, members[1:], strict=True):
                        req.Wait()
                        _xor_into(vec, bufs.pop(x))
                    found[f] = unpack(e.metas[g.index(f)], vec[:(len(g) - 1) * e.c])
                else:
                    comm.Send(vec, dest=members[0], tag=TAG_RESEED)
        self._inflight = []
        self._data = {v: e for v, e in self._data.items() if v <= version}
        comm.Barrier()
        return mine, found
