"""Second step of the offline analysis: collective matching (paper 000 §2.3 step 4).

The ranks inside a collective are grouped by collective instance (communicator, sequence number);
for every group, the members that have not arrived (their counter on that communicator is behind
the instance, and they are not inside it) are its laggards. Groups, waiters, members and laggards
are flat arrays with offsets per group, found by one sorted lookup of every (communicator, rank)
counter.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from planaria.diagnose.findings import TEXT_LINES, rank_phrase
from planaria.diagnose.prepare import Prepared, uniq
from planaria.diagnose.state import NULL, ListTable

_UNKNOWN = object()


@dataclass(frozen=True, eq=False)
class EnteredLookup:
    """Collectives entered per (communicator, rank), as sorted keys ``comm * size + rank``."""

    keys: np.ndarray
    counts: np.ndarray

    def entered(self, p: Prepared, comm_codes: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """Collectives entered on each (comm, rank): 0 if the rank does not report the comm, -1 if it has no state."""
        keys = self.keys
        if not keys.size:
            return np.where(p.answered[ranks], 0, -1)
        q = comm_codes * p.size + ranks
        pos = np.minimum(np.searchsorted(keys, q), keys.size - 1)
        out = np.where(keys[pos] == q, self.counts[pos], 0)
        return np.where(p.answered[ranks], out, -1)


@dataclass(frozen=True, eq=False)
class Collectives:
    """Groups of ranks inside the same collective instance: who is inside, who is a member, who lags."""

    n_groups: int
    group_comm: np.ndarray           # group -> communicator (string code)
    group_seq: np.ndarray            # group -> sequence number on it
    group_size: np.ndarray           # group -> members of its communicator
    group_of_row: np.ndarray         # row -> its group, -1 when not in a collective
    waiter_rank: np.ndarray          # ranks inside a collective, grouped
    waiter_group: np.ndarray         # their group
    waiter_off: np.ndarray           # group -> slice of waiter_rank
    member_rank: np.ndarray          # members of each distinct communicator, flattened
    member_off: np.ndarray           # communicator index -> slice of member_rank
    group_comm_index: np.ndarray     # group -> communicator index of member_off
    laggard_rank: np.ndarray         # members that have not arrived, grouped
    laggard_group: np.ndarray        # their group (sorted)
    laggard_off: np.ndarray          # group -> slice of laggard_rank
    lookup: EnteredLookup
    evidence: tuple[str, ...]

    def waiters(self, g: int) -> np.ndarray:
        return self.waiter_rank[self.waiter_off[g]:self.waiter_off[g + 1]]

    def laggards(self, g: int) -> np.ndarray:
        return self.laggard_rank[self.laggard_off[g]:self.laggard_off[g + 1]]

    def members(self, g: int) -> np.ndarray:
        k = self.group_comm_index[g]
        return self.member_rank[self.member_off[k]:self.member_off[k + 1]]

    def group_text(self, p: Prepared, g: int) -> str:
        """The call of group ``g`` as its first waiter makes it: "Allreduce #4 on world"."""
        return p.op_text(int(self.waiter_rank[self.waiter_off[g]]))


def match_collectives(p: Prepared) -> Collectives:
    """Group collective waiters by (comm, seq) and find every group's members that have not arrived."""
    c, size = p.cols, p.size
    evidence: list[str] = []
    rows = np.flatnonzero(p.is_coll)
    comm = c["op_comm"][rows].astype(np.int64)
    seq = c["op_seq"][rows].copy()
    lookup = entered_lookup(p, uniq(comm))
    nul = seq == NULL
    if nul.any():   # no seq in the op: use the rank's counter for that comm
        seq[nul] = np.maximum(lookup.entered(p, comm[nul], p.rank[rows[nul]]), 0)
    gkey, ginv = group_keys(comm, seq)
    n_groups = int(gkey.shape[1])
    group_comm, group_seq = gkey[0], gkey[1]
    group_of_row = np.full(p.n, -1, dtype=np.int64)
    group_of_row[rows] = ginv
    group_of_rank = np.full(size, -1, dtype=np.int64)
    group_of_rank[p.rank[rows]] = ginv
    order = np.argsort(ginv, kind="stable") if n_groups > 1 else np.arange(rows.size)
    waiter_rank = p.rank[rows[order]]
    waiter_group = ginv[order]
    waiter_off = offsets(np.bincount(ginv, minlength=n_groups))
    ucomm, gci = np.unique(group_comm, return_inverse=True)
    gci = gci.ravel()
    member_rank, member_off = _member_table(p, ucomm, np.stack([comm, p.rank[rows]], axis=1), evidence)
    mlen = np.diff(member_off)[gci]
    pg = np.repeat(np.arange(n_groups, dtype=np.int64), mlen)
    pm = member_rank[segments(member_off[:-1][gci], mlen)]
    ent = lookup.entered(p, group_comm[pg], pm)
    lag = (ent < group_seq[pg]) & (group_of_rank[pm] != pg)
    laggard_group, laggard_rank = pg[lag], pm[lag]               # pg is sorted: laggards come grouped
    if n_groups:
        evidence.extend(_outsiders(p, ucomm, member_rank, member_off, gci, group_comm, waiter_rank, waiter_group))
    return Collectives(n_groups=n_groups, group_comm=group_comm, group_seq=group_seq, group_size=mlen,
                       group_of_row=group_of_row, waiter_rank=waiter_rank, waiter_group=waiter_group,
                       waiter_off=waiter_off, member_rank=member_rank, member_off=member_off, group_comm_index=gci,
                       laggard_rank=laggard_rank, laggard_group=laggard_group,
                       laggard_off=offsets(np.bincount(laggard_group, minlength=n_groups)), lookup=lookup,
                       evidence=tuple(evidence))


def entered_lookup(p: Prepared, comm_codes: np.ndarray) -> EnteredLookup:
    """Sorted keys comm*size+rank and their 'entered' counters, for the given communicators only."""
    c = p.cols
    cc = c["colls_comm"]
    sel = np.flatnonzero(cc == comm_codes[0] if comm_codes.size == 1 else np.isin(cc, comm_codes))
    rows = np.searchsorted(c["colls_off"], sel, side="right") - 1
    keys = cc[sel].astype(np.int64) * p.size + p.rank[rows]
    if keys.size > 1 and np.all(keys[1:] > keys[:-1]):
        return EnteredLookup(keys, c["colls_n"][sel])
    order = np.argsort(keys, kind="stable")
    return EnteredLookup(keys[order], c["colls_n"][sel][order])


def _outsiders(p: Prepared, ucomm: np.ndarray, member_rank: np.ndarray, member_off: np.ndarray, gci: np.ndarray,
               group_comm: np.ndarray, waiter_rank: np.ndarray, waiter_group: np.ndarray) -> list[str]:
    """Evidence lines for waiters that are not members of the communicator they wait on."""
    size = p.size
    partial = np.diff(member_off) < size       # a communicator of every rank has no outsiders
    if not partial[gci].any():
        return []
    mm = np.repeat(partial, np.diff(member_off))
    mkeys = np.sort(np.repeat(ucomm.astype(np.int64), np.diff(member_off))[mm] * size + member_rank[mm])
    wsel = partial[gci][waiter_group]
    wg, wr = waiter_group[wsel], waiter_rank[wsel]
    wkeys = group_comm[wg] * size + wr
    pos = np.minimum(np.searchsorted(mkeys, wkeys), max(mkeys.size - 1, 0))
    out = ~(mkeys[pos] == wkeys) if mkeys.size else np.ones(wkeys.size, dtype=bool)
    lines = []
    if out.any():
        oc = group_comm[wg[out]]
        for cc in uniq(oc).tolist()[:TEXT_LINES]:
            who = wr[out][oc == cc]
            one = who.size == 1
            lines.append(f"{rank_phrase(who)} {'waits' if one else 'wait'} in a collective on "
                         f"{p.strings[cc]} but {'is' if one else 'are'} not listed as "
                         f"{'a member' if one else 'members'}")
    return lines


def _members_of(p: Prepared, cc: int, waiting: np.ndarray, evidence: list[str]) -> Any:
    """Members of communicator ``cc`` (a list or an array): the state's list, every rank for world or
    None, else the ranks that report the communicator."""
    name = p.strings[cc]
    m: Any
    if isinstance(p.comms, ListTable):
        try:
            m = p.comms.array(name)
        except KeyError:
            m = _UNKNOWN
    else:
        m = p.comms.get(name, _UNKNOWN)
    if m is None or (m is _UNKNOWN and name == "world"):
        return np.arange(p.size, dtype=np.int64)
    if m is _UNKNOWN:
        rows = np.repeat(np.arange(p.n, dtype=np.int64), np.diff(p.cols["colls_off"]))
        have = np.union1d(p.rank[rows[p.cols["colls_comm"] == cc]], waiting[waiting[:, 0] == cc, 1])
        evidence.append(f"membership of communicator {name} is not in the state; using the {have.size} "
                        f"ranks that report it (members without state go unseen)")
        return have
    return m if isinstance(m, list) else np.asarray(m, dtype=np.int64)


def _member_table(p: Prepared, ucomm: np.ndarray, waiting: np.ndarray,
                  evidence: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Members of each communicator in ``ucomm`` (pool codes), flattened: (members, offsets).
    ``waiting`` holds a (communicator, rank) row per collective waiter."""
    items = [_members_of(p, cc, waiting, evidence) for cc in ucomm.tolist()]
    lens = np.array([len(x) for x in items], dtype=np.int64)
    off = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    flat = np.empty(int(off[-1]), dtype=np.int64)
    lists = [i for i, x in enumerate(items) if isinstance(x, list)]
    if lists:
        try:
            vals = np.fromiter(itertools.chain.from_iterable(items[i] for i in lists), dtype=np.int64,
                               count=int(lens[lists].sum()))
        except (TypeError, ValueError, OverflowError):
            raise ValueError("comms: a member list holds something that is not a rank") from None
        flat[segments(off[lists], lens[lists])] = vals
    for i, x in enumerate(items):
        if not isinstance(x, list):
            flat[off[i]:off[i + 1]] = x
    bad = (flat < 0) | (flat >= p.size)
    if bad.any():
        evidence.append(f"ignored {int(bad.sum())} communicator members outside 0..{p.size - 1}")
        seg = np.repeat(np.arange(lens.size), lens)[~bad]
        flat = flat[~bad]
        np.cumsum(np.bincount(seg, minlength=lens.size), out=off[1:])
    return flat, off


def offsets(counts: np.ndarray) -> np.ndarray:
    """Start of each segment, and the end of the last: [0, c0, c0+c1, ...]."""
    off = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    return off


def segments(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated index ranges [starts[i], starts[i] + lens[i])."""
    lens = np.asarray(lens, dtype=np.int64)
    total = int(lens.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    shift = np.asarray(starts, dtype=np.int64) - (np.cumsum(lens) - lens)
    return np.repeat(shift, lens) + np.arange(total, dtype=np.int64)


def group_keys(comm: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (comm, seq) pairs as a (2, G) array, and each waiter's group index."""
    if not comm.size:
        return np.zeros((2, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)
    if comm.min() == comm.max() and seq.min() == seq.max():
        return np.array([[comm[0]], [seq[0]]], dtype=np.int64), np.zeros(comm.size, dtype=np.int64)
    s0 = int(seq.min())
    span = int(seq.max()) - s0 + 1
    if span < 2 ** 62 // max(int(comm.max()) + 1, 1):
        key = comm * span + (seq - s0)
        u, inv = np.unique(key, return_inverse=True)
        return np.stack([u // span, u % span + s0]), inv.ravel()
    u, inv = np.unique(np.stack([comm, seq]), axis=1, return_inverse=True)
    return u, np.asarray(inv).ravel()
