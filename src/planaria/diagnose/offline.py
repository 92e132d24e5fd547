"""Offline analysis of a state file ([Gao 2024] §2.3): names the ranks and call sites a hung job waits on.

Steps as the paper: (1) merge and sort by rank; (2) classify per communicator (collective waits, p2p waits,
computing); (3) count check: ranks with no state are dead or unreachable, grouped by host; (4) collective
matching: per (communicator, collective #seq), the members that have not arrived and what they do instead,
dependencies across communicators, and a wait-for graph over ranks (Recv/Send from/to peer p: waits on p;
ANY_SOURCE: unknown) and collectives (waits on every member not yet arrived), followed to its ROOT CAUSES:
ranks others (transitively) wait on that wait on nobody (no state, computing, blocked outside MPI), cycles
(deadlock), collectives every member has entered that do not complete (suspect the network: step 5);
(5) nobody waiting: no hang found.

Scale: the analysis works on numpy columns (planaria.diagnose.state.RankTable), never on per-rank Python
objects: chains are resolved by pointer jumping (log2 n vector passes), collective groups by one sorted
lookup of every (communicator, rank) counter; Python loops run only over groups, root causes and cycles.
"""
from __future__ import annotations

import itertools
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planaria.comm.flight import OPS, bytes_text, mismatch_text
from planaria.graphs import cyclic_components
from planaria.diagnose.state import NULL, ListTable, RankTable, columns
from planaria.diagnose.pyspy import STOPPED_STATUS

RECV_NAMES = frozenset({"recv", "irecv", "probe", "iprobe", "mprobe", "improbe", "mrecv"})
SEND_NAMES = frozenset({"send", "ssend", "bsend", "rsend", "isend", "issend", "ibsend", "irsend"})
BOTH_NAMES = frozenset({"sendrecv", "sendrecv_replace"})
BLOCKING_FUNCS = frozenset({"sleep", "read", "readinto", "readline", "recv", "recv_into", "recvfrom", "accept",
                            "select", "poll", "wait", "acquire", "join", "input", "flock", "lockf", "fsync",
                            "connect", "getaddrinfo"})
FINISHED = frozenset({"finished", "exited", "done"})
VERDICTS = ("deadlock", "dead-ranks", "hang", "no-hang")
_TEXT_RANKS = 160   # characters of a rank-range string shown in the text report
_TEXT_LINES = 12    # lines per list shown in the text report
_EXAMPLES = 32      # root causes that get an example sentence
_SINK_KINDS = frozenset({"no-state", "computing", "blocked-outside-mpi", "finished", "any-source", "unknown-wait",
                         "self-wait", "injected"})


# --------------------------------------------------------------------------- small helpers
def ranges(ranks: Any) -> str:
    """Sorted unique ranks as a range string: [0, 1, 2, 3, 5] -> "0-3,5"."""
    a = np.asarray(ranks, dtype=np.int64).ravel()
    if a.size > 1 and not np.all(a[1:] > a[:-1]):
        a = np.unique(a)
    if not a.size:
        return ""
    br = np.flatnonzero(np.diff(a) != 1)
    starts = np.concatenate(([a[0]], a[br + 1])).tolist()
    ends = np.concatenate((a[br], [a[-1]])).tolist()
    return ",".join(str(s) if s == e else f"{s}-{e}" for s, e in zip(starts, ends))


def _clip(text: str, n: int = _TEXT_RANKS) -> str:
    return text if len(text) <= n else text[:n].rsplit(",", 1)[0] + ",..."


def _short(site: str | None) -> str:
    """"path/to/solver.py:88 in f" -> "solver.py:88 in f"."""
    if not site:
        return "an unknown site"
    head, sep, tail = site.partition(" in ")
    return os.path.basename(head) + sep + tail


def _rs(ranks: np.ndarray, one: str = "rank", many: str = "ranks") -> str:
    return f"{one} {int(ranks[0])}" if ranks.size == 1 else f"{many} {_clip(ranges(ranks))}"


# planaria's own machinery (the frames a program's call passes through), the standard library,
# installed third-party packages: none is where a user can act on a hang
_MACHINERY = re.compile(r"/planaria/(?:comm|runtime|inject|localize|diagnose|launch|events)/")
_LIBRARY = re.compile(r"/lib/python\d+(?:\.\d+)?/|/(?:site|dist)-packages/")


def _frame_rank(path: str) -> int:
    """0: the user's own file; 1: planaria's application-level code (demo, ABFT, fragments, recovery);
    2: planaria's machinery, the standard library or a third-party package."""
    p = path.replace("\\", "/")
    if p.startswith("<") or _MACHINERY.search(p) or p.endswith((".pyx", ".pxi")):   # Cython: mpi4py's own
        return 2
    if "/planaria/" in p:
        return 1
    if _LIBRARY.search(p) or p.split("/")[-1] in ("threading.py", "socket.py", "selectors.py", "queue.py"):
        return 2
    return 0


_SITE = re.compile(r"^(.*):(\d+)(?: in (.*))?$")   # "path/x.py:12 in f" -> path, line, function


def ran_past(site: str | None, other: str | None) -> bool:
    """``site`` is a later line of the same function of the same file as ``other``: a rank at ``site``
    has run past the call at ``other`` (straight-line code; a loop's next iteration is not seen)."""
    a, b = _SITE.match(site or ""), _SITE.match(other or "")
    return bool(a and b and (a[1], a[3]) == (b[1], b[3]) and int(a[2]) > int(b[2]))


def frame_site(stack: list[Any]) -> str | None:
    """Site of the innermost frame a user can act on: in the user's own files, else in planaria's
    application-level code, else the innermost frame. A rank spinning in numpy's ``_sum`` is named
    at the program's line that called it, a rank hung in ``threading.wait`` at the line that waits."""
    if not stack:
        return None
    ranks = [_frame_rank(str(f[0])) for f in stack]
    best = min(ranks)
    f = stack[max(i for i, r in enumerate(ranks) if r == best)]
    return f"{f[0]}:{f[1]} in {f[2]}"


# --------------------------------------------------------------------------- report
@dataclass
class RootCause:
    """Ranks the hang comes from, why, and where."""

    kind: str                  # no-state | computing | blocked-outside-mpi | finished | any-source | unknown-wait
    #                            | self-wait | deadlock | stuck-transfer | stuck-collective | collective-mismatch
    #                            | injected (a hang planaria's --inject made)
    ranks: list[int]
    reason: str
    op: str | None = None
    comm: str | None = None
    site: str | None = None
    host: str | None = None
    waiters: int = 0           # ranks that wait on these, directly or transitively
    example: str = ""          # one sentence: who waits on it, where
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ranks": ranges(self.ranks), "n_ranks": len(self.ranks),
                "rank_list": list(self.ranks), "reason": self.reason, "op": self.op, "comm": self.comm,
                "site": self.site, "host": self.host, "waiters": self.waiters, "example": self.example,
                "details": list(self.details)}


@dataclass
class Report:
    """Outcome of :func:`diagnose`: a verdict, root causes, who waits where, and the evidence behind it."""

    verdict: str
    job: str | None
    size: int
    answered: int
    missing: list[int]
    root_causes: list[RootCause]
    waiting: list[dict[str, Any]]
    evidence: list[str]
    computing: int = 0
    unmatched: list[dict[str, Any]] = field(default_factory=list)
    n_unmatched: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"verdict": self.verdict, "job": self.job, "size": self.size, "answered": self.answered,
                "missing": ranges(self.missing), "n_missing": len(self.missing),
                "computing": self.computing,
                "root_causes": [rc.to_dict() for rc in self.root_causes], "waiting": self.waiting,
                "unmatched": self.unmatched, "n_unmatched": self.n_unmatched, "evidence": list(self.evidence),
                "analysis_seconds": self.seconds}

    def to_text(self) -> str:
        """Human-readable report: verdict first, then root causes with one example each."""
        out = [f"job {self.job or '?'}: {self.size} ranks, {self.answered} answered, "
               f"{len(self.missing)} without state, {self.computing} not in MPI"]
        head = {"deadlock": "ranks wait on each other in a cycle",
                "dead-ranks": "ranks without state: dead or unreachable",
                "hang": "ranks are blocked in MPI waiting for others",
                "no-hang": "no hang found: no rank is waiting in MPI"}[self.verdict]
        out.append(f"verdict: {self.verdict} ({head})")
        if self.root_causes:
            out.append("")
            out.append("root causes:")
            for i, rc in enumerate(self.root_causes[:_TEXT_LINES], 1):
                where = []
                if rc.host:
                    where.append(f"on {rc.host}")
                if rc.site:
                    where.append(f"at {_short(rc.site)}")
                out.append(f"  {i}. {' '.join([_rs(np.asarray(rc.ranks)), *where])}: {rc.reason}")
                if rc.waiters:
                    out.append(f"     {rc.waiters} rank{'s' if rc.waiters != 1 else ''} wait on "
                               f"{'it' if len(rc.ranks) == 1 else 'them'}")
                if rc.example:
                    out.append(f"     {rc.example}")
                for d in rc.details[:_TEXT_LINES]:
                    out.append(f"     {d}")
                if len(rc.details) > _TEXT_LINES:
                    out.append(f"     ... {len(rc.details) - _TEXT_LINES} more")
            if len(self.root_causes) > _TEXT_LINES:
                out.append(f"  ... {len(self.root_causes) - _TEXT_LINES} more root causes (see --json)")
        if self.waiting:
            out.append("")
            out.append("waiting:")
            for w in self.waiting[:_TEXT_LINES]:
                out.append("  " + w["text"])
            if len(self.waiting) > _TEXT_LINES:
                out.append(f"  ... {len(self.waiting) - _TEXT_LINES} more (see --json)")
        if self.evidence:
            out.append("")
            out.append("evidence:")
            for e in self.evidence[:3 * _TEXT_LINES]:
                out.append("  - " + e)
            if len(self.evidence) > 3 * _TEXT_LINES:
                out.append(f"  - ... {len(self.evidence) - 3 * _TEXT_LINES} more (see --json)")
        return "\n".join(out)


# --------------------------------------------------------------------------- analysis
def diagnose(state: dict[str, Any]) -> Report:
    """Analyse a state (as read by read_state, or in memory with row-form records) and name the root causes."""
    t0 = time.perf_counter()
    table, stacks, comms = columns(state)
    rep = _Analysis(state, table, stacks, comms).run()
    rep.seconds = time.perf_counter() - t0
    return rep


class _Analysis:
    def __init__(self, state: dict[str, Any], table: RankTable, stacks: list[Any], comms: dict[str, Any]) -> None:
        self.state, self.stacks, self.comms = state, stacks, comms
        self.evidence: list[str] = []
        self.table = self._merge_sort(table)
        self._setup()

    # ------------------------------------------------------------------ step 1: merge and sort
    def _merge_sort(self, table: RankTable) -> RankTable:
        rank = table.cols["rank"]
        if rank.size and not np.all(rank[1:] > rank[:-1]):
            t = table.cols["t"]
            order = np.lexsort((np.nan_to_num(t, nan=-np.inf), rank))
            rs = rank[order]
            last = np.ones(rs.size, dtype=bool)
            last[:-1] = rs[1:] != rs[:-1]
            if not last.all():
                dup = np.unique(rs[~last])
                self.evidence.append(f"{_rs(dup)} answered more than once; kept the newest state")
            table = table.take(order[last])
        return table

    def _setup(self) -> None:
        st, c = self.state, self.table.cols
        self.strings = self.table.strings
        self.code = {s: i for i, s in enumerate(self.strings)}
        self.rank = c["rank"]
        self.n = int(self.rank.size)
        explicit = np.asarray(st.get("missing") or [], dtype=np.int64)
        host_ranks = self._host_lists()
        size = st.get("size")
        if not isinstance(size, int):
            cands = [int(self.rank.max()) + 1 if self.n else 0, int(explicit.max()) + 1 if explicit.size else 0,
                     int(host_ranks[1].max()) + 1 if host_ranks[1].size else 0]
            size = max(cands)
            self.evidence.append(f"state has no job size; assuming {size} ranks")
        self.size = size
        if self.n and int(self.rank.max()) >= size:
            keep = np.flatnonzero(self.rank < size)
            self.evidence.append(f"ignored {self.n - keep.size} records of ranks >= size {size}")
            self.table = self.table.take(keep)
            c = self.table.cols
            self.rank, self.n = c["rank"], int(keep.size)
        self.c = c
        self.row_of = np.full(size, -1, dtype=np.int64)
        self.row_of[self.rank] = np.arange(self.n, dtype=np.int64)
        self.answered = self.row_of >= 0
        self.explicit = np.zeros(size, dtype=bool)
        self.explicit[explicit[(explicit >= 0) & (explicit < size)]] = True
        ns = len(self.strings)
        used = np.flatnonzero(np.bincount(c["op_name"] + 1, minlength=ns + 1)[1:]).tolist()

        def flag(pred: Any) -> np.ndarray:  # per pool string (op names only), plus False at index -1 (None)
            out = np.zeros(ns + 1, dtype=bool)
            out[[k for k in used if pred(self.strings[k].lower())]] = True
            return out

        self.is_recv_s = flag(lambda s: s in RECV_NAMES or s in BOTH_NAMES)
        self.is_send_s = flag(lambda s: s in SEND_NAMES or s in BOTH_NAMES)
        self.is_fin_s = np.zeros(ns + 1, dtype=bool)
        for k in np.flatnonzero(np.bincount(c["status"] + 1, minlength=ns + 1)[1:]).tolist():
            self.is_fin_s[k] = self.strings[k].lower() in FINISHED
        kind = c["op_kind"]
        name = c["op_name"]
        self.in_mpi = name >= 0
        self.is_coll = self.in_mpi & (kind == self.code.get("coll", -2))
        self.is_p2p = self.in_mpi & ~self.is_coll
        self.computing = ~self.in_mpi
        self.finished = self.computing & self.is_fin_s[c["status"]]
        self.host_names, self.host_of = host_ranks[2], np.full(size, -1, dtype=np.int64)
        ok = (host_ranks[1] >= 0) & (host_ranks[1] < size)
        self.host_of[host_ranks[1][ok]] = host_ranks[0][ok]
        self._ns = ns

    def _host_lists(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        hosts = self.state.get("hosts") or {}
        if isinstance(hosts, ListTable):
            return np.repeat(np.arange(len(hosts), dtype=np.int64), np.diff(hosts.off)), hosts.flat, hosts.names
        try:
            names = [str(h) for h in hosts]
            lens = [len(v) for v in hosts.values()]
            flat = np.fromiter(itertools.chain.from_iterable(hosts.values()), dtype=np.int64, count=sum(lens))
        except (TypeError, ValueError, OverflowError, AttributeError):
            raise ValueError("'hosts' must map host names to lists of ranks") from None
        codes = np.repeat(np.arange(len(names), dtype=np.int64), lens)
        return codes, flat, names

    # ------------------------------------------------------------------ per-rank descriptions (few ranks)
    def s(self, code: int) -> str | None:
        return None if code < 0 else self.strings[code]

    def host(self, r: int) -> str | None:
        h = int(self.host_of[r])
        if h >= 0:
            return self.host_names[h]
        row = int(self.row_of[r])
        return self.s(int(self.c["host"][row])) if row >= 0 else None

    def main_stack(self, row: int) -> list[Any] | None:
        c = self.c
        a, b = int(c["th_off"][row]), int(c["th_off"][row + 1])
        if a == b:
            return None
        names = c["th_name"][a:b].tolist()
        pick = next((i for i, nm in enumerate(names) if nm >= 0 and self.strings[nm] == "MainThread"), 0)
        st = int(c["th_stack"][a + pick])
        return self.stacks[st] if 0 <= st < len(self.stacks) else None

    def site(self, r: int) -> str | None:
        row = int(self.row_of[r])
        if row < 0:
            return None
        if self.in_mpi[row]:
            return self.s(int(self.c["op_site"][row]))
        return frame_site(self.main_stack(row) or [])

    def op_text(self, r: int) -> str:
        """"Recv from rank 12" / "Allreduce #4 on world" / "Send to rank 3 (tag 5)"."""
        c, row = self.c, int(self.row_of[r])
        nm = self.s(int(c["op_name"][row])) or "?"
        comm = self.s(int(c["op_comm"][row]))
        peer, tag, seq = int(c["op_peer"][row]), int(c["op_tag"][row]), int(c["op_seq"][row])
        if self.is_coll[row]:
            txt = f"{nm} #{seq}" if seq != NULL else nm
            txt += f" on {comm}" if comm else ""
            if peer != NULL:
                txt += f" (root {peer})"
            return txt
        low = nm.lower()
        if peer == NULL and low in RECV_NAMES | BOTH_NAMES:
            txt = f"{nm} from ANY_SOURCE"
        elif peer == NULL:
            txt = nm
        elif low in SEND_NAMES:
            txt = f"{nm} to rank {peer}"
        else:
            txt = f"{nm} from rank {peer}"
        if tag != NULL:
            txt += f" (tag {tag})"
        return txt

    def state_text(self, r: int) -> str:
        """What rank r is doing, as a predicate: "has no state (...)", "waits in Recv from rank 3 at x.py:9"."""
        row = int(self.row_of[r])
        if row < 0:
            why = "dead or unreachable"
            h = int(self.host_of[r])
            if h >= 0 and h in self.down_hosts:
                why = f"host {self.host_names[h]} down or unreachable: all {self.down_hosts[h]} of its ranks missing"
            return f"has no state ({why})"
        if self.finished[row]:
            return f"has finished ({self.s(int(self.c['status'][row]))})"
        if self.computing[row]:
            return f"is not in MPI ({self._computing_reason(row)} at {_short(self.site(r))})"
        return f"waits in {self.op_text(r)} at {_short(self.site(r))}"

    def _computing_reason(self, row: int) -> str:
        st = self.main_stack(row) or []
        if st and str(st[-1][2]) in BLOCKING_FUNCS:
            why = f"blocked outside MPI in {st[-1][2]}()"
        else:
            why = "computing: endless loop or slow"
        status = self.s(int(self.c["status"][row]))
        if status and status.startswith("unresponsive"):   # read from outside (py-spy): its agent could not answer
            why = f"{status}; {why}"
        return why

    # ------------------------------------------------------------------ step 3: count check
    def count_check(self) -> None:
        no_state = ~self.answered
        self.missing = np.flatnonzero(no_state)
        silent = np.flatnonzero(no_state & ~self.explicit)
        self.down_hosts: dict[int, int] = {}
        self.partial_hosts: dict[int, tuple[int, int]] = {}
        if not self.missing.size:
            return
        ev = self.evidence
        ev.append(f"count check: {self.size} ranks expected, {self.n} answered; no state: {_clip(ranges(self.missing))}")
        if silent.size and silent.size != self.missing.size:
            ev.append(f"{_rs(silent)} neither answered nor {'was' if silent.size == 1 else 'were'} reported missing "
                      f"by the collection")
        known = self.host_of >= 0
        if known.any():
            H = len(self.host_names)
            total = np.bincount(self.host_of[known], minlength=H)
            miss = np.bincount(self.host_of[no_state & known], minlength=H)
            mk = self.missing[self.host_of[self.missing] >= 0]
            mh = self.host_of[mk]
            order = np.argsort(mh, kind="stable")
            mk, mh = mk[order], mh[order]
            for h in np.flatnonzero(miss).tolist():
                if miss[h] == total[h]:
                    self.down_hosts[h] = int(total[h])
                    ev.append(f"host {self.host_names[h]}: all {total[h]} ranks missing -> node down or unreachable")
                else:
                    self.partial_hosts[h] = (int(miss[h]), int(total[h]))
                    rs = mk[np.searchsorted(mh, h):np.searchsorted(mh, h, side="right")]
                    ev.append(f"host {self.host_names[h]}: {miss[h]} of {total[h]} ranks missing ({ranges(rs)}) "
                              f"-> processes killed or crashed, the node answers")

    # ------------------------------------------------------------------ step 4: collective groups
    def _entered_lookup(self, comm_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sorted keys comm*size+rank and their 'entered' counters, for the given communicators only."""
        c = self.c
        cc = c["colls_comm"]
        sel = np.flatnonzero(cc == comm_codes[0] if comm_codes.size == 1 else np.isin(cc, comm_codes))
        rows = np.searchsorted(c["colls_off"], sel, side="right") - 1
        keys = cc[sel].astype(np.int64) * self.size + self.rank[rows]
        if keys.size > 1 and np.all(keys[1:] > keys[:-1]):
            return keys, c["colls_n"][sel]
        order = np.argsort(keys, kind="stable")
        return keys[order], c["colls_n"][sel][order]

    def _entered(self, comm_codes: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """Collectives entered on each (comm, rank): 0 if the rank does not report the comm, -1 if it has no state."""
        keys = self.keys
        if not keys.size:
            return np.where(self.answered[ranks], 0, -1)
        q = comm_codes * self.size + ranks
        pos = np.minimum(np.searchsorted(keys, q), keys.size - 1)
        out = np.where(keys[pos] == q, self.vals[pos], 0)
        return np.where(self.answered[ranks], out, -1)

    def _member_table(self, ucomm: np.ndarray, w_comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Members of each communicator in ``ucomm`` (pool codes), flattened: (members, offsets)."""
        items: list[Any] = []
        for cc in ucomm.tolist():
            name = self.strings[cc]
            if isinstance(self.comms, ListTable):
                try:
                    m = self.comms.array(name)
                except KeyError:
                    m = _UNKNOWN
            else:
                m = self.comms.get(name, _UNKNOWN)
            if m is None or (m is _UNKNOWN and name == "world"):
                items.append(np.arange(self.size, dtype=np.int64))
            elif m is _UNKNOWN:
                rows = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.c["colls_off"]))
                have = np.union1d(self.rank[rows[self.c["colls_comm"] == cc]], w_comm[w_comm[:, 0] == cc, 1])
                self.evidence.append(f"membership of communicator {name} is not in the state; using the {have.size} "
                                     f"ranks that report it (members without state go unseen)")
                items.append(have)
            else:
                items.append(m if isinstance(m, list) else np.asarray(m, dtype=np.int64))
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
            flat[_segments(off[lists], lens[lists])] = vals
        for i, x in enumerate(items):
            if not isinstance(x, list):
                flat[off[i]:off[i + 1]] = x
        bad = (flat < 0) | (flat >= self.size)
        if bad.any():
            self.evidence.append(f"ignored {int(bad.sum())} communicator members outside 0..{self.size - 1}")
            seg = np.repeat(np.arange(lens.size), lens)[~bad]
            flat = flat[~bad]
            np.cumsum(np.bincount(seg, minlength=lens.size), out=off[1:])
        return flat, off

    def groups(self) -> None:
        """Group collective waiters by (comm, seq) and find every group's members that have not arrived."""
        c, size = self.c, self.size
        rows = np.flatnonzero(self.is_coll)
        comm = c["op_comm"][rows].astype(np.int64)
        seq = c["op_seq"][rows].copy()
        self.keys, self.vals = self._entered_lookup(_uniq(comm))
        nul = seq == NULL
        if nul.any():   # no seq in the op: use the rank's counter for that comm
            seq[nul] = np.maximum(self._entered(comm[nul], self.rank[rows[nul]]), 0)
        gkey, ginv = _group_keys(comm, seq)
        G = self.G = int(gkey.shape[1])
        self.g_comm, self.g_seq = gkey[0], gkey[1]
        self.group_of_row = np.full(self.n, -1, dtype=np.int64)
        self.group_of_row[rows] = ginv
        group_of_rank = np.full(size, -1, dtype=np.int64)
        group_of_rank[self.rank[rows]] = ginv
        order = np.argsort(ginv, kind="stable") if G > 1 else np.arange(rows.size)
        self.w_rank = self.rank[rows[order]]                       # waiters, grouped
        self.w_group = ginv[order]
        self.w_off = _offsets(np.bincount(ginv, minlength=G))
        ucomm, gci = np.unique(self.g_comm, return_inverse=True)
        gci = gci.ravel()
        mem_flat, mem_off = self._member_table(ucomm, np.stack([comm, self.rank[rows]], axis=1))
        self.mem_flat, self.mem_off, self.g_ci = mem_flat, mem_off, gci
        mlen = np.diff(mem_off)[gci]
        self.g_nmem = mlen
        pg = np.repeat(np.arange(G, dtype=np.int64), mlen)
        pm = mem_flat[_segments(mem_off[:-1][gci], mlen)]
        ent = self._entered(self.g_comm[pg], pm)
        lag = (ent < self.g_seq[pg]) & (group_of_rank[pm] != pg)
        self.lag_g, self.lag_r = pg[lag], pm[lag]                 # laggards, grouped (pg is sorted)
        self.l_off = _offsets(np.bincount(self.lag_g, minlength=G))
        # waiters that are not members of the communicator they wait on
        partial = np.diff(mem_off) < size       # a communicator of every rank has no outsiders
        if G and partial[gci].any():
            mm = np.repeat(partial, np.diff(mem_off))
            mkeys = np.sort(np.repeat(ucomm.astype(np.int64), np.diff(mem_off))[mm] * size + mem_flat[mm])
            wsel = partial[gci][self.w_group]
            wg, wr = self.w_group[wsel], self.w_rank[wsel]
            wkeys = self.g_comm[wg] * size + wr
            pos = np.minimum(np.searchsorted(mkeys, wkeys), max(mkeys.size - 1, 0))
            out = ~(mkeys[pos] == wkeys) if mkeys.size else np.ones(wkeys.size, dtype=bool)
            if out.any():
                oc = self.g_comm[wg[out]]
                for cc in _uniq(oc).tolist()[:_TEXT_LINES]:
                    who = wr[out][oc == cc]
                    one = who.size == 1
                    self.evidence.append(f"{_rs(who)} {'waits' if one else 'wait'} in a collective on "
                                         f"{self.strings[cc]} but {'is' if one else 'are'} not listed as "
                                         f"{'a member' if one else 'members'}")

    def waiters(self, g: int) -> np.ndarray:
        return self.w_rank[self.w_off[g]:self.w_off[g + 1]]

    def lag(self, g: int) -> np.ndarray:
        return self.lag_r[self.l_off[g]:self.l_off[g + 1]]

    def members(self, g: int) -> np.ndarray:
        k = self.g_ci[g]
        return self.mem_flat[self.mem_off[k]:self.mem_off[k + 1]]

    # ------------------------------------------------------------------ wait-for graph
    def graph(self) -> None:
        """succ over ranks + groups; pointer jumping gives each node its terminal and hop count."""
        c, size = self.c, self.size
        N = size + self.G
        f0 = np.arange(N, dtype=np.int64)
        p2p = np.flatnonzero(self.is_p2p)
        peer = c["op_peer"][p2p]
        valid = (peer != NULL) & (peer >= 0) & (peer < size)
        f0[self.rank[p2p[valid]]] = peer[valid]
        self.bad_peer_rows = p2p[(peer != NULL) & ~valid]
        coll = np.flatnonzero(self.is_coll)
        f0[self.rank[coll]] = size + self.group_of_row[coll]
        self.f0 = f0
        nxt, dist = f0.copy(), (f0 != np.arange(N)).astype(np.int64)
        for _ in range(int(np.ceil(np.log2(max(N, 2)))) + 1):   # f^(2^k): fixed point or on a cycle
            if np.array_equal(nxt[nxt], nxt):
                break
            dist = dist + dist[nxt]
            nxt = nxt[nxt]
        self.term, self.dist = nxt, dist
        self.self_wait = self.rank[p2p[valid & (peer == self.rank[p2p])]]

    def rank_cycles(self) -> list[list[int]]:
        term, f0, size = self.term, self.f0, self.size
        cand = np.unique(term[:size][f0[term[:size]] != term[:size]])
        seen: set[int] = set()
        cycles = []
        for x in cand.tolist():
            if x in seen:
                continue
            cyc, y = [], x
            while y not in seen:
                seen.add(y)
                cyc.append(y)
                y = int(f0[y])
            if y in cyc:
                cyc = cyc[cyc.index(y):]
                k = cyc.index(min(cyc))
                cycles.append(cyc[k:] + cyc[:k])      # start at the lowest rank
        return cycles

    # ------------------------------------------------------------------ root causes
    def run(self) -> Report:
        self.count_check()
        self.groups()
        self.graph()
        size, term, G = self.size, self.term, self.G
        waiting_ranks = self.rank[self.in_mpi]
        t_w = term[waiting_ranks]
        basin = np.bincount(t_w[t_w >= size] - size, minlength=G)          # ranks that end up in each group
        lt = term[self.lag_r]                                                # where each laggard's waits end
        # group -> group edges (a laggard waits, maybe via p2p chains, in another collective)
        ge = lt >= size
        pairs = np.unique(self.lag_g[ge] * max(G, 1) + (lt[ge] - size))
        edges: dict[int, set[int]] = {}
        for a, b in zip((pairs // max(G, 1)).tolist(), (pairs % max(G, 1)).tolist()):
            edges.setdefault(a, set()).add(b)
        self.anc = _ancestors(edges)

        def anc_of(g: int) -> set[int]:
            return self.anc.get(g) or {g}

        causes: list[RootCause] = []
        cause_of_rank = np.full(size, -1, dtype=np.int64)
        on_cycle = np.zeros(size, dtype=bool)
        # (a) rank cycles (p2p only): deadlock, or a matched send/recv pair whose message does not arrive
        for cyc in self.rank_cycles():
            on_cycle[cyc] = True
            cause_of_rank[cyc] = len(causes)
            causes.append(self._cycle_cause(cyc))
        # (b) sink ranks reached by a wait, waiting ranks with no known peer, and every rank without state
        sinks = np.unique(np.concatenate([t_w[t_w < size], lt[lt < size]]))
        sinks = np.union1d(sinks[~on_cycle[sinks]], self.missing)
        for rc in self._sink_causes(sinks):
            cause_of_rank[rc.ranks] = len(causes)
            causes.append(rc)
        # waiters of rank-level causes: p2p chains ending on them + ranks in collectives lacking them
        direct = np.bincount(t_w[(t_w < size) & (t_w != waiting_ranks)], minlength=size)
        onto = np.bincount(t_w[t_w < size], minlength=size)     # cycle members land on the cycle themselves
        weight = np.where(on_cycle, onto, direct)
        has = np.flatnonzero(cause_of_rank >= 0)
        count = np.bincount(cause_of_rank[has], weights=weight[has], minlength=len(causes))
        sel = lt < size
        cg, gg = cause_of_rank[lt[sel]], self.lag_g[sel]
        ok = cg >= 0
        cgp = np.unique(cg[ok] * max(G, 1) + gg[ok])
        cgc, cgg = cgp // max(G, 1), cgp % max(G, 1)
        if self.anc:   # expand groups reached through other groups
            extra = {(c_, h) for c_, g in zip(cgc.tolist(), cgg.tolist()) if g in self.anc for h in self.anc[g]}
            if extra:
                ex = np.array(sorted(extra), dtype=np.int64)
                cgp = np.unique(np.concatenate([cgp, ex[:, 0] * G + ex[:, 1]]))
                cgc, cgg = cgp // G, cgp % G
        count += np.bincount(cgc, weights=basin[cgg], minlength=len(causes))
        for i, rc in enumerate(causes):
            rc.waiters = int(count[i])
        # (c) group-level cycles: collectives waiting on ranks that wait on the collective (cross-op deadlock)
        for scc in cyclic_components(edges):
            n_wait = sum(int(basin[g]) for g in set().union(*map(anc_of, scc)))
            causes.append(self._cross_comm_mismatch(scc, n_wait) or self._group_cycle_cause(scc, n_wait))
        # (d) collectives every member has entered, and mismatched collectives
        causes.extend(self._group_causes(basin, anc_of))
        causes.sort(key=lambda x: (-x.waiters, _KIND_ORDER.get(x.kind, 99), x.ranks[:1]))
        for x in causes[:_EXAMPLES]:   # one O(size) pass each: only for the root causes a reader sees first
            if not x.example and x.kind in _SINK_KINDS:
                x.example = self._example(np.asarray(x.ranks, dtype=np.int64))
        unmatched, n_unmatched = self._unmatched()
        verdict = ("deadlock" if any(x.kind == "deadlock" for x in causes) else
                   "dead-ranks" if self.missing.size else
                   "hang" if waiting_ranks.size else "no-hang")
        if verdict == "no-hang":
            self.evidence.append(f"no rank is waiting in MPI ({self.n} answered, all computing)")
        return Report(verdict=verdict, job=self.state.get("job"), size=size, answered=self.n,
                      missing=self.missing.tolist(), root_causes=causes, waiting=self._waiting_summary(),
                      evidence=self.evidence, computing=int(self.computing.sum()), unmatched=unmatched,
                      n_unmatched=n_unmatched)

    def _cycle_cause(self, cyc: list[int]) -> RootCause:
        c = self.c
        rows = [int(self.row_of[r]) for r in cyc]
        details = [f"rank {r} waits in {self.op_text(r)} at {_short(self.site(r))}" for r in cyc]
        ring = " -> ".join(str(r) for r in cyc + cyc[:1])
        if len(cyc) == 2:
            a, b = cyc
            if not self._pure(int(self.row_of[a]), self.is_recv_s):
                a, b = b, a
            ra, rb = int(self.row_of[a]), int(self.row_of[b])
            if self._pure(ra, self.is_recv_s) and self._pure(rb, self.is_send_s):
                ta, tb = int(c["op_tag"][ra]), int(c["op_tag"][rb])
                comm_a, comm_b = int(c["op_comm"][ra]), int(c["op_comm"][rb])
                example = (f"rank {a} is stuck in {self.op_text(a)} at {_short(self.site(a))}; "
                           f"rank {b} {self.state_text(b)}")
                if ta not in (NULL, -1) and tb != ta:
                    return RootCause("deadlock", sorted(cyc), f"tag mismatch: rank {b} sends tag {tb} to rank {a}, "
                                     f"which waits for tag {ta}", op=self.s(int(c["op_name"][ra])),
                                     comm=self.s(comm_a), site=self.site(a), host=self.host(a), example=example)
                if comm_a == comm_b:
                    ha, hb = self.host(a), self.host(b)
                    link = f"between {ha} and {hb}" if ha != hb else f"inside {ha}"
                    return RootCause("stuck-transfer", sorted(cyc),
                                     f"matching send and receive both waiting: the message does not arrive "
                                     f"-> suspect the network or transport {link}",
                                     op=self.s(int(c["op_name"][ra])), comm=self.s(comm_a), site=self.site(a),
                                     host=ha if ha == hb else None, example=example)
        r0 = cyc[0]
        return RootCause("deadlock", sorted(cyc), f"wait cycle {ring}: each waits for the next (deadlock)",
                         op=self.s(int(c["op_name"][rows[0]])), comm=self.s(int(c["op_comm"][rows[0]])),
                         site=self.site(r0) if len({self.site(r) for r in cyc}) == 1 else None,
                         host=self.host(r0) if len({self.host(r) for r in cyc}) == 1 else None, details=details)

    def _pure(self, row: int, flag: np.ndarray) -> bool:
        """Row's op is only a receive (flag=is_recv_s) or only a send (flag=is_send_s)."""
        nm = self.c["op_name"][row]
        return bool(flag[nm] and not (self.is_recv_s[nm] and self.is_send_s[nm]))

    def _group_text(self, g: int) -> str:
        return self.op_text(int(self.w_rank[self.w_off[g]]))

    def _cross_comm_mismatch(self, scc: list[int], waiters: int) -> RootCause | None:
        """Collectives on different communicators that wait for each other's ranks, every rank missing
        from one being inside another (no point-to-point wait between): the ranks disagree on which
        collective comes next. The ranks of the collective with strictly the fewest ranks inside are the
        odd ones, at their call (or at the call they skipped, when they have run past it); None when the
        cycle goes through a point-to-point wait or no collective is strictly the smallest."""
        inside = np.asarray(scc, dtype=np.int64) + self.size
        if any(not np.isin(self.f0[self.lag(g)], inside).all() for g in scc):
            return None
        nw = np.array([self.waiters(g).size for g in scc])
        if (nw == nw.min()).sum() != 1:
            return None
        g, h = scc[int(np.argmin(nw))], scc[int(np.argmax(nw))]
        odd, major = self.waiters(g), self.waiters(h)
        orow, mrow = int(self.row_of[odd[0]]), int(self.row_of[major[0]])
        osites = _uniq(self.c["op_site"][self.row_of[odd]])
        site = self.s(int(osites[0])) if osites.size == 1 else None
        call = f"{self._group_text(g)} at {_short(site) if site else self._sites_of(odd)}"
        msite = self.s(int(self.c["op_site"][mrow]))
        mcall = f"{self._group_text(h)} at {_short(msite)}"
        they = "they wait" if odd.size > 1 else "it waits"
        at = g                       # the collective whose call is to fix
        if self._ahead(orow, mrow):
            site, at = msite, h
            reason = (f"{_rs(odd)} skipped {mcall}, which {_rs(major)} {'wait' if major.size > 1 else 'waits'} "
                      f"in: {they} in {call}, which lacks {_rs(self.lag(g))}")
        else:
            reason = (f"{_rs(odd)} called {call} where {_rs(major)} called {mcall}: {they} for "
                      f"{_rs(self.lag(g))}, which wait{'s' if self.lag(g).size == 1 else ''} for "
                      f"{'them' if odd.size > 1 else 'it'} (collectives on different communicators)")
        self.evidence.append(f"collective mismatch across communicators: {reason}")
        row = orow if at == g else mrow
        return RootCause("collective-mismatch", odd.tolist(), reason, op=self.s(int(self.c["op_name"][row])),
                         comm=self.strings[int(self.g_comm[at])], site=site, waiters=waiters)

    def _skipped_step(self, scc: list[int], waiters: int) -> RootCause | None:
        """A rank missing from a collective whose members all wait in it at step s (``pl.step``), while
        it waits in a point-to-point call at a later step: it went round its loop without the
        collective (a wait cycle of its point-to-point call and the collective is the symptom)."""
        st = self.c["step"]
        for g in scc:
            inside = self.waiters(g)
            steps = np.unique(st[self.row_of[inside]]) if inside.size and (self.row_of[inside] >= 0).all() else []
            if len(steps) != 1 or steps[0] < 0:
                continue
            s = int(steps[0])
            ahead = [int(r) for r in self.lag(g).tolist()
                     if self.row_of[r] >= 0 and st[self.row_of[r]] > s and self.is_p2p[self.row_of[r]]]
            if not ahead:
                continue
            odd = np.asarray(ahead, dtype=np.int64)
            site = self.site(int(inside[0]))
            later = sorted({int(st[self.row_of[r]]) for r in ahead})
            reason = (f"{_rs(odd)} skipped {self._group_text(g)} at {_short(site)}, which {_rs(inside)} "
                      f"{'wait' if inside.size > 1 else 'waits'} in at step {s}: {'they are' if odd.size > 1 else 'it is'} "
                      f"already at step {', '.join(map(str, later))}, {self.state_text(ahead[0])}")
            self.evidence.append(f"collective skipped: {reason}")
            return RootCause("collective-mismatch", ahead, reason, op=self.s(int(self.c["op_name"][self.row_of[inside[0]]])),
                             comm=self.strings[self.g_comm[g]], site=site, host=self.host(ahead[0]), waiters=waiters)
        return None

    def _group_cycle_cause(self, scc: list[int], waiters: int) -> RootCause:
        skipped = self._skipped_step(scc, waiters)
        if skipped is not None:
            return skipped
        inside = np.asarray(scc, dtype=np.int64) + self.size
        ranks: set[int] = set()
        details = []
        for g in scc:
            lag = self.lag(g)
            for l in lag[np.isin(self.term[lag], inside)].tolist()[:_TEXT_LINES]:
                path, x = [l], int(self.f0[l])
                while x < self.size and len(path) < 64:
                    path.append(x)
                    x = int(self.f0[x])
                ranks.update(path)
                details.append(f"{self._group_text(g)} lacks rank {l}: " + "; ".join(
                    f"rank {p} {self.state_text(p)}" for p in path) +
                    f" (inside {self._group_text(x - self.size)}, which needs rank {l})")
        rs = sorted(ranks)
        w0 = int(self.waiters(scc[0])[0])
        # the call to fix is the point-to-point wait (the others entered a collective every member
        # calls): its site, not the collective's
        p2p = [r for r in rs if self.is_p2p[int(self.row_of[r])]]
        at = p2p[0] if p2p else (rs[0] if rs else None)
        return RootCause("deadlock", rs, "ranks wait in point-to-point operations for ranks that are inside a "
                         "collective that needs them (deadlock across operations)",
                         op=self.s(int(self.c["op_name"][self.row_of[w0]])), comm=self.strings[self.g_comm[scc[0]]],
                         site=self.site(at) if at is not None else None, host=self.host(rs[0]) if rs else None,
                         waiters=waiters, example=details[0] if details else "", details=details[1:])

    def _sink_causes(self, sinks: np.ndarray) -> list[RootCause]:
        """Group sink ranks by what they do (and host / site) into root causes."""
        c = self.c
        if not sinks.size:
            return []
        rows = self.row_of[sinks]
        self_wait = set(self.self_wait.tolist())
        keys: dict[tuple, list[int]] = {}
        hung_by_plan = self._injected_hangs()
        for r, row in zip(sinks.tolist(), rows.tolist()):
            if r in hung_by_plan and (row < 0 or not self.finished[row]):
                key: tuple = ("injected", hung_by_plan[r])
            elif row < 0:
                key = ("no-state", int(self.host_of[r]))
            elif self.finished[row]:
                key = ("finished", int(c["status"][row]))
            elif self.s(int(c["status"][row])) == STOPPED_STATUS:   # alive, not running: no state of its own
                key = ("stopped", self.site(r))
            elif self.computing[row]:
                blocked = self._computing_reason(row).startswith("blocked")
                key = ("blocked-outside-mpi" if blocked else "computing", self.site(r))
            elif r in self_wait:
                key = ("self-wait", int(c["op_name"][row]), int(c["op_site"][row]))
            elif self.is_p2p[row] and int(c["op_peer"][row]) == NULL and self.is_recv_s[c["op_name"][row]]:
                key = ("any-source", int(c["op_name"][row]), int(c["op_comm"][row]), int(c["op_site"][row]))
            else:
                key = ("unknown-wait", int(c["op_name"][row]), int(c["op_comm"][row]), int(c["op_site"][row]))
            keys.setdefault(key, []).append(r)
        bad_peer = set(self.rank[self.bad_peer_rows].tolist())
        out = []
        for key, rs in keys.items():
            kind, r0 = key[0], rs[0]
            row0 = int(self.row_of[r0])
            op = comm = None
            hosts = {self.host(r) for r in rs[:64]}
            host = self.host(r0) if len(hosts) == 1 else None
            if kind == "injected":
                reason = f"hangs as the fault plan asked ({key[1]}; planaria --inject), not by a fault of the program"
            elif kind == "no-state":
                h = key[1]
                if h in self.down_hosts:
                    reason = (f"no state -- host {self.host_names[h]}: all {self.down_hosts[h]} ranks missing "
                              f"-> node down or unreachable")
                elif h in self.partial_hosts:
                    m, t = self.partial_hosts[h]
                    reason = (f"no state -- process dead or unreachable ({m} of {t} ranks of host "
                              f"{self.host_names[h]} missing; the node answers)")
                else:
                    reason = "no state (dead or unreachable)"
            elif kind == "finished":
                reason = f"has finished ({self.strings[key[1]]}) while other ranks still wait for it"
            elif kind == "stopped":
                kind, reason = "no-state", "is stopped (SIGSTOP or a debugger): alive but not running"
            elif kind == "computing":
                reason = f"not in MPI: computing (endless loop or slow){self._step_note(rs)}"
            elif kind == "blocked-outside-mpi":
                reason = f"not in MPI: {self._computing_reason(row0)}{self._step_note(rs)}"
            else:
                op, comm = self.s(int(c["op_name"][row0])), self.s(int(c["op_comm"][row0]))
                reason = {"self-wait": "waits for a message from itself",
                          "any-source": "waits for a message from any source (ANY_SOURCE); no rank is sending to it",
                          "unknown-wait": "waits in MPI with no known peer"}[kind]
                if kind == "unknown-wait" and bad_peer.intersection(rs):
                    reason = f"waits on a peer outside the job (size {self.size})"
            site = self.site(r0) if len({self.site(r) for r in rs[:64]}) == 1 else None
            if kind == "finished" and len(rs) == 1:
                site = self._finished_site(r0)
            out.append(RootCause(kind, rs, reason, op=op, comm=comm, site=site, host=host))
        return out

    def _finished_site(self, r: int) -> str | None:
        """Where finished rank ``r`` left (its ``sys.exit``, told in its bye), else the call of a rank
        still waiting for it (the one it never matched)."""
        got = ((self.state.get("known") or {}).get("exit_sites") or {}).get(str(r))
        if got:
            return str(got)
        rows = np.flatnonzero((self.c["op_peer"] == r) & self.in_mpi)
        return self.s(int(self.c["op_site"][rows[0]])) if rows.size else None

    def _injected_hangs(self) -> dict[int, str]:
        """Ranks a planned ``hang`` fault stopped (the controller's records), with its description."""
        out: dict[int, str] = {}
        for inj in (self.state.get("known") or {}).get("injected") or []:
            if inj.get("kind") == "hang" and isinstance(inj.get("rank"), int):
                out[inj["rank"]] = str(inj.get("detail") or "injected hang")
        return out

    def _step_note(self, rs: list[int]) -> str:
        st = self.c["step"]
        mine = st[self.row_of[np.asarray(rs)]]
        mine = mine[mine != NULL]
        others = st[st != NULL]
        if not mine.size or not others.size:
            return ""
        med = int(np.median(others))
        lo = int(mine.min())
        return f"; last step {lo}, most ranks at step {med}" if lo != med else f"; last step {lo}"

    def _example(self, rs: np.ndarray) -> str:
        """One sentence: a rank that waits directly on one of ``rs`` (p2p), or a collective that lacks them."""
        size = self.size
        f0 = self.f0[:size]
        hit = np.flatnonzero(np.isin(f0, rs) & (f0 != np.arange(size)))
        if hit.size:
            w = int(hit[0])
            tgt = int(f0[w])
            more = hit.size - 1
            who = f"rank {w} is" if not more else f"rank {w} and {more} more rank{'s' if more > 1 else ''} are"
            text = f"{who} stuck in {self.op_text(w)} at {_short(self.site(w))}; rank {tgt} {self.state_text(tgt)}"
            chained = np.flatnonzero(np.isin(self.term[:size], rs) & (self.dist[:size] >= 2))
            if chained.size:
                far = int(chained[np.argmax(self.dist[chained])])
                path, x = [far], int(f0[far])
                while len(path) < 200 and x != path[-1]:
                    path.append(x)
                    if int(f0[x]) == x:
                        break
                    x = int(f0[x])
                shown = path if len(path) <= 8 else path[:4] + ["..."] + path[-3:]
                text += f"; longest wait chain: {' -> '.join(map(str, shown))} ({len(path) - 1} hops)"
            return text
        hit = np.flatnonzero(np.isin(self.lag_r, rs))
        if hit.size:
            g = int(self.lag_g[hit[0]])
            inter = np.intersect1d(self.lag(g), rs)
            w = self.waiters(g)
            pred = self.state_text(int(inter[0]))
            if inter.size > 1:
                pred = _plural(pred)
            are = "ranks are" if w.size != 1 else "rank is"
            return (f"{w.size} {are} stuck in {self._group_text(g)} at {self._sites_of(w)}; "
                    f"{_rs(inter)} {'have' if inter.size > 1 else 'has'} not arrived: "
                    f"{'they' if inter.size > 1 else 'it'} {pred}")
        return ""

    def _sites_of(self, ranks: np.ndarray) -> str:
        codes, cnt = _uniq(self.c["op_site"][self.row_of[ranks]], counts=True)
        order = np.argsort(-cnt, kind="stable")
        parts = [_short(self.s(int(codes[i]))) for i in order[:3]]
        return " / ".join(parts) + (f" / {codes.size - 3} more sites" if codes.size > 3 else "")

    def _call_text(self, row: int) -> str:
        """"Bcast (root 0)" / "Allreduce": a collective call as its members must agree on it."""
        nm = self.s(int(self.c["op_name"][row])) or "?"
        peer = int(self.c["op_peer"][row])
        return nm if peer == NULL else f"{nm} (root {peer})"

    def _ahead(self, a: int, b: int) -> bool:
        """Rank of row ``a`` has run past the call rank of row ``b`` is in: a later step, or in the same
        step (or without steps) a later line of the same function of the same file. Then ``a``'s rank
        skipped ``b``'s call, and that call is the one to fix."""
        st = self.c["step"]
        if st[a] != NULL and st[b] != NULL and st[a] != st[b]:
            return bool(st[a] > st[b])
        return ran_past(self.s(int(self.c["op_site"][a])), self.s(int(self.c["op_site"][b])))

    def _odd_ones(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(odd ranks, ranks of the largest other class, members that completed the collective) of group
        ``g``, or None when no class is strictly smaller than every other.

        The ranks inside are partitioned by (call, root). Members that entered the collective and have
        left it (completed) form a class of their own: they are counted with the class whose root is among
        its own ranks when exactly one class has that (the root they got their data from), and they are
        never the odd ones (what they called is not known). A single class inside against more members
        that completed is odd unless it holds its own root (a root still collecting from senders that left)."""
        c = self.c
        w = self.waiters(g)
        wr = self.row_of[w]
        peer = c["op_peer"][wr]
        peer = np.where((peer >= 0) & (peer < self.size), peer, -1)
        key = c["op_name"][wr].astype(np.int64) * (self.size + 1) + peer + 1
        ukey, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
        inv = inv.ravel()
        mem = self.members(g)
        ent = self._entered(np.full(mem.size, self.g_comm[g], dtype=np.int64), mem)
        done = mem[(ent >= self.g_seq[g]) & ~np.isin(mem, w)]
        own_root = np.array([bool(np.isin(ukey[k] % (self.size + 1) - 1, w[inv == k])) for k in range(ukey.size)])
        sizes = cnt.copy()
        rest = done.size
        if done.size and own_root.sum() == 1:
            sizes[own_root] += done.size
            rest = 0
        if ukey.size == 1 and (not rest or own_root[0]):
            return None
        low = int(sizes.min())
        if (sizes == low).sum() != 1 or (rest and rest <= low):
            return None
        k = int(np.argmin(sizes))
        others = np.flatnonzero(np.arange(ukey.size) != k)
        major = w[inv == others[np.argmax(cnt[others])]] if others.size else w[:0]
        return w[inv == k], major, done

    def _odd_cause(self, g: int, basin: np.ndarray, anc_of: Any) -> RootCause | None:
        """The collective-mismatch of the odd ranks of group ``g`` (see :meth:`_odd_ones`), or None."""
        found = self._odd_ones(g)
        if found is None:
            return None
        odd, major, done = found
        orow = int(self.row_of[odd[0]])
        comm = self.strings[int(self.g_comm[g])]
        inst = f"collective #{self.g_seq[g]} on {comm}"
        osites = _uniq(self.c["op_site"][self.row_of[odd]])
        site = self.s(int(osites[0])) if osites.size == 1 else None
        call = f"{self._call_text(orow)} at {_short(site) if site else self._sites_of(odd)}"
        op_row = orow
        if major.size:
            mrow = int(self.row_of[major[0]])
            msite = self.s(int(self.c["op_site"][mrow]))
            mcall = f"{self._call_text(mrow)} at {_short(msite)}"
            if self._ahead(orow, mrow):
                site, op_row = msite, mrow
                reason = (f"{_rs(odd)} skipped {mcall} ({inst}), which {_rs(major)} "
                          f"{'wait' if major.size > 1 else 'waits'} in: {'they are' if odd.size > 1 else 'it is'} "
                          f"already in {call}")
            else:
                reason = f"{_rs(odd)} called {call} where {_rs(major)} called {mcall} ({inst})"
            if done.size:
                reason += f"; {_rs(done)} {'have' if done.size > 1 else 'has'} completed it"
        else:
            reason = (f"{_rs(odd)} {'are' if odd.size > 1 else 'is'} still in {call} ({inst}), which "
                      f"{_rs(done)} {'have' if done.size > 1 else 'has'} completed: "
                      f"{'their calls do' if odd.size > 1 else 'its call does'} not match theirs "
                      f"(another collective, root or count), or {'their' if odd.size > 1 else 'its'} data was lost")
        self.evidence.append(f"collective mismatch on {comm} #{self.g_seq[g]}: {reason}")
        return RootCause("collective-mismatch", odd.tolist(), reason, op=self.s(int(self.c["op_name"][op_row])),
                         comm=comm, site=site, waiters=sum(int(basin[h]) for h in anc_of(g)))

    def _group_causes(self, basin: np.ndarray, anc_of: Any) -> list[RootCause]:
        """Mismatched collectives, and collectives every member has entered (grouped by op and site)."""
        c, G = self.c, self.G
        if not G:
            return []
        wrow = self.row_of[self.w_rank]
        ns = len(self.strings) + 1
        names = np.unique(self.w_group * ns + c["op_name"][wrow] + 1)
        peers = c["op_peer"][wrow]
        peers = np.where((peers >= 0) & (peers < self.size), peers + 1, 0)
        roots = np.unique(self.w_group * (self.size + 1) + peers)
        n_names = np.bincount(names // ns, minlength=G)
        n_roots = np.bincount(roots // (self.size + 1), minlength=G)
        mismatch = (n_names > 1) | (n_roots > 1)
        nw = np.diff(self.w_off)
        # every member entered, more of them have completed it than are still inside: a mismatch, not a stall
        passed = (np.diff(self.l_off) == 0) & ~mismatch & (nw < self.g_nmem - nw)
        out = []
        for g in np.flatnonzero(passed).tolist()[:_MAX_MISMATCH]:
            rc = self._odd_cause(g, basin, anc_of)
            if rc is None:
                passed[g] = False
            else:
                out.append(rc)
        for g in np.flatnonzero(mismatch).tolist()[:_MAX_MISMATCH]:
            rc = self._odd_cause(g, basin, anc_of)
            if rc is not None:
                out.append(rc)
                continue
            w = self.waiters(g)
            wr = self.row_of[w]
            nm_codes = _uniq(c["op_name"][wr])
            comm = self.strings[int(self.g_comm[g])]
            what = ", ".join(
                f"{_rs(w[c['op_name'][wr] == nm])} in {self.strings[int(nm)]} at "
                f"{_short(self.s(int(c['op_site'][wr[c['op_name'][wr] == nm]][0])))}" for nm in nm_codes.tolist())
            if nm_codes.size == 1:
                what += "; roots " + ", ".join("none" if x == NULL else str(x) for x in _uniq(c["op_peer"][wr])[:8])
            self.evidence.append(f"collective mismatch on {comm} #{self.g_seq[g]}: {what}")
            out.append(RootCause("collective-mismatch", w.tolist(),
                                 f"ranks entered different collectives (or roots) as #{self.g_seq[g]} on {comm}: "
                                 f"{what}", comm=comm, waiters=sum(int(basin[h]) for h in anc_of(g))))
        stuck = np.flatnonzero((np.diff(self.l_off) == 0) & ~mismatch & ~passed)
        sized = [rc for rc in (self._size_cause(g, basin, anc_of) for g in stuck[:_MAX_MISMATCH].tolist())
                 if rc is not None]
        if sized:
            out.extend(rc for rc, _ in sized)
            stuck = np.setdiff1d(stuck, [g for _, g in sized])
        if stuck.size:
            first = self.row_of[self.w_rank[self.w_off[stuck]]]
            key = c["op_name"][first].astype(np.int64) * ns + c["op_site"][first] + 1
            for k in _uniq(key).tolist():
                gs = stuck[key == k]
                sel = np.zeros(G, dtype=bool)
                sel[gs] = True
                ranks = self.w_rank[sel[self.w_group]]
                g0 = int(gs[0])
                comm = self.strings[int(self.g_comm[g0])]
                site = self.s(int(k % ns) - 1)
                hosts = {self.host(int(r)) for r in ranks[:64]}
                waiters = sum(int(basin[h]) for h in set().union(*map(anc_of, gs.tolist())))
                if gs.size == 1:
                    reason = (f"all {self.g_nmem[g0]} members of {comm} entered {self._group_text(g0)} and it does "
                              f"not complete -> suspect the network or transport (hardware scan of the collective "
                              f"tree needed)")
                else:
                    names = ", ".join(self.strings[int(self.g_comm[g])] for g in gs[:4].tolist())
                    reason = (f"in each of {gs.size} communicators ({names}{', ...' if gs.size > 4 else ''}) all "
                              f"members entered {self.s(int(k // ns))} and it does not complete -> suspect the "
                              f"network or transport (hardware scan of the collective trees needed)")
                out.append(RootCause(
                    "stuck-collective", ranks.tolist(), reason, op=self.s(int(k // ns)),
                    comm=comm if gs.size == 1 else None, site=site, host=next(iter(hosts)) if len(hosts) == 1 else None,
                    waiters=waiters,
                    example=f"{ranks.size} rank{'s are' if ranks.size != 1 else ' is'} stuck in "
                            f"{self._group_text(g0) if gs.size == 1 else self.s(int(k // ns))} at {_short(site)}"))
        return out

    def _size_cause(self, g: int, basin: np.ndarray, anc_of: Any) -> tuple[RootCause, int] | None:
        """A collective every member entered but whose buffers disagree in size (a count
        mismatch: MPI leaves it undefined, it may hang), with ``g``; None when the sizes agree or
        the operation's counts may differ by rank."""
        w = self.waiters(g)
        wr = self.row_of[w]
        name = self.s(int(self.c["op_name"][wr[0]]))
        if name not in _COUNT_CHECKED:
            return None
        sizes = self.c["op_size"][wr]
        known = sizes > 0
        vals, counts = np.unique(sizes[known], return_counts=True)
        if vals.size < 2:
            return None
        i = min(range(vals.size), key=lambda j: (int(counts[j]), -int(vals[j])))
        odd, others = w[known & (sizes == vals[i])], w[known & (sizes != vals[i])]
        comm = self.strings[int(self.g_comm[g])]
        call = f"{name} #{self.g_seq[g]} on {comm}"
        reason = mismatch_text(_clip(ranges(odd)), int(vals[i]), _clip(ranges(others)),
                               sorted(int(v) for v in vals if v != vals[i]), call)
        site = self.s(int(self.c["op_site"][self.row_of[int(odd[0])]]))
        self.evidence.append(f"count mismatch in {call}: " + ", ".join(
            f"{_rs(w[known & (sizes == v)])} passed {bytes_text(int(v))}" for v in vals.tolist()))
        return RootCause("collective-mismatch", odd.tolist(), reason, op=name, comm=comm, site=site,
                         waiters=sum(int(basin[h]) for h in anc_of(g))), g

    # ------------------------------------------------------------------ unmatched receives
    def _unmatched(self) -> tuple[list[dict[str, Any]], int]:
        c = self.c
        rows = np.flatnonzero(self.is_p2p & self.is_recv_s[c["op_name"]] & ~self.is_send_s[c["op_name"]])
        peer = c["op_peer"][rows]
        ok = (peer != NULL) & (peer >= 0) & (peer < self.size)
        rows, peer = rows[ok], peer[ok]
        prow = self.row_of[peer]
        ans = prow >= 0
        rows, peer, prow = rows[ans], peer[ans], prow[ans]
        me = self.rank[rows]
        # the peer has moved past the send: it is in a collective, has finished, or receives from us too
        recv_from_me = self.is_p2p[prow] & self.is_recv_s[c["op_name"][prow]] & (c["op_peer"][prow] == me)
        blocked = self.is_coll[prow] | self.finished[prow] | recv_from_me
        sel = np.flatnonzero(blocked)
        out = []
        for i in sel[:100].tolist():
            r, p = int(me[i]), int(peer[i])
            tag = int(c["op_tag"][rows[i]])
            out.append({"rank": r, "peer": p, "tag": None if tag == NULL else tag, "site": self.site(r),
                        "peer_state": self.state_text(p)})
        for u in out[:_TEXT_LINES]:
            tag = f", tag {u['tag']}" if u["tag"] is not None else ""
            self.evidence.append(f"unmatched receive: rank {u['rank']} waits in "
                                 f"{self.op_text(u['rank']).split(' (tag')[0]}{tag} at {_short(u['site'])}; "
                                 f"rank {u['peer']} is not sending to it: it {u['peer_state']}")
        if sel.size > _TEXT_LINES:
            self.evidence.append(f"... {sel.size - _TEXT_LINES} more unmatched receives")
        return out, int(sel.size)

    # ------------------------------------------------------------------ step 2: per-communicator summary
    def _waiting_summary(self) -> list[dict[str, Any]]:
        c, out = self.c, []
        nw = np.diff(self.w_off)
        order = np.argsort(-nw, kind="stable")
        for g in order[:_DETAIL].tolist():
            w, lag = self.waiters(g), self.lag(g)
            comm = self.strings[int(self.g_comm[g])]
            wr = self.row_of[w]
            codes, cnt = _uniq(c["op_site"][wr], counts=True)
            sites = {self.s(int(k)) or "?": int(n) for k, n in zip(codes.tolist(), cnt.tolist())}
            cats = self._lag_categories(lag, g)
            ops = "/".join(self.strings[int(k)] for k in _uniq(c["op_name"][wr]).tolist())
            na = "; ".join(f"{_clip(ranges(v), 60)} ({k})" for k, v in cats.items())
            out.append({"comm": comm, "kind": "coll", "op": ops, "seq": int(self.g_seq[g]), "waiting": int(w.size),
                        "members": int(self.g_nmem[g]), "sites": sites, "not_arrived": ranges(lag),
                        "n_not_arrived": int(lag.size),
                        "not_arrived_by_state": {k: ranges(v) for k, v in cats.items()},
                        "text": f"{comm}: {w.size} of {self.g_nmem[g]} members in {self._group_text(g)} at "
                                f"{self._sites_of(w)}" + (f"; not arrived: {na}" if na else "; all arrived")})
            for k, v in cats.items():
                if k.startswith("in ") and " on " in k:
                    self.evidence.append(f"cross-communicator dependency: {self._group_text(g)} lacks "
                                         f"{_rs(v)}, which {'wait' if v.size > 1 else 'waits'} {k}")
        if self.G > _DETAIL:
            rest = order[_DETAIL:]
            sel = np.zeros(self.G, dtype=bool)
            sel[rest] = True
            lag = self.lag_r[sel[self.lag_g]]
            w = self.w_rank[sel[self.w_group]]
            ops = "/".join(self.strings[int(k)] for k in _uniq(c["op_name"][self.row_of[w]]).tolist())
            cats = {k: int(v.size) for k, v in self._lag_categories(lag, -1, by_op=False).items()}
            out.append({"comm": f"{rest.size} more communicators", "kind": "coll", "op": ops, "seq": None,
                        "waiting": int(w.size), "members": int(self.g_nmem[rest].sum()), "n_not_arrived": int(lag.size),
                        "not_arrived_by_state": cats,
                        "text": f"{rest.size} more collectives: {w.size} ranks in {ops} at {self._sites_of(w)}; "
                                f"not arrived: {lag.size} ranks" + (" (" + ", ".join(f"{v} {k}" for k, v in
                                                                                     cats.items()) + ")" if cats else "")})
        p2p = np.flatnonzero(self.is_p2p)
        if p2p.size:
            comm = c["op_comm"][p2p].astype(np.int64)
            codes, cnt = _uniq(comm, counts=True)
            corder = np.argsort(-cnt, kind="stable")
            for cc in codes[corder[:_DETAIL]].tolist():
                rows = p2p[comm == cc]
                nm = self.s(cc) or "?"
                ranks = self.rank[rows]
                names = "/".join(self.strings[int(x)] for x in _uniq(c["op_name"][rows]).tolist())
                scodes, scnt = _uniq(c["op_site"][rows], counts=True)
                out.append({"comm": nm, "kind": "p2p", "op": names, "seq": None, "waiting": int(rows.size),
                            "members": None, "ranks": ranges(ranks),
                            "sites": {self.s(int(k)) or "?": int(n) for k, n in zip(scodes.tolist(), scnt.tolist())},
                            "text": f"{nm}: {_rs(ranks)} in point-to-point waits ({names}) at {self._sites_of(ranks)}"})
            if codes.size > _DETAIL:
                rest = codes[corder[_DETAIL:]]
                rows = p2p[np.isin(comm, rest)]
                out.append({"comm": f"{rest.size} more communicators", "kind": "p2p", "op": None, "seq": None,
                            "waiting": int(rows.size), "members": None, "ranks": ranges(self.rank[rows]),
                            "text": f"{rest.size} more communicators: {rows.size} ranks in point-to-point waits at "
                                    f"{self._sites_of(self.rank[rows])}"})
        out.sort(key=lambda e: -e["waiting"])
        return out

    def _lag_categories(self, lag: np.ndarray, g: int, by_op: bool = True) -> dict[str, np.ndarray]:
        """Not-arrived members by what they do: no state / computing / p2p wait / other collective."""
        c = self.c
        cats: dict[str, np.ndarray] = {}
        if not lag.size:
            return cats
        rows = self.row_of[lag]
        nost = rows < 0
        if nost.any():
            cats["no state"] = lag[nost]
        ar, rws = lag[~nost], rows[~nost]
        comp = self.computing[rws]
        if comp.any():
            cats["computing"] = ar[comp]
        p2p = self.is_p2p[rws]
        coll = self.is_coll[rws]
        if not by_op:
            if p2p.any():
                cats["in point-to-point waits"] = ar[p2p]
            if coll.any():
                cats["in other collectives"] = ar[coll]
            return cats
        if p2p.any():
            names = c["op_name"][rws[p2p]]
            for nm in _uniq(names).tolist()[:_TEXT_LINES]:
                cats[f"in {self.strings[nm]} (point-to-point)"] = ar[p2p][names == nm]
        if coll.any():
            gg = self.group_of_row[rws[coll]]
            for h in _uniq(gg).tolist()[:_TEXT_LINES]:
                label = f"in {self._group_text(h)}" if h != g else "in the same collective"
                cats[label] = ar[coll][gg == h]
        return cats


# --------------------------------------------------------------------------- module helpers
_UNKNOWN = object()
_DETAIL = 32          # collective groups / p2p communicators listed one by one in the summary
_MAX_MISMATCH = 100   # mismatched collectives reported one by one
_COUNT_CHECKED = frozenset(OPS)     # collectives whose buffer size must agree on every rank


def _offsets(counts: np.ndarray) -> np.ndarray:
    off = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    return off


def _segments(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated index ranges [starts[i], starts[i] + lens[i])."""
    lens = np.asarray(lens, dtype=np.int64)
    total = int(lens.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    shift = np.asarray(starts, dtype=np.int64) - (np.cumsum(lens) - lens)
    return np.repeat(shift, lens) + np.arange(total, dtype=np.int64)


def _ancestors(edges: dict[int, set[int]]) -> dict[int, set[int]]:
    """For each group in the edge subgraph, the groups that reach it (itself included)."""
    rev: dict[int, list[int]] = {}
    for g, es in edges.items():
        for h in es:
            rev.setdefault(h, []).append(g)
    nodes = set(edges) | set(rev)
    anc = {}
    for g in nodes:
        seen, stack = {g}, [g]
        while stack:
            for p in rev.get(stack.pop(), ()):
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        anc[g] = seen
    return anc


def _uniq(a: np.ndarray, counts: bool = False) -> Any:
    """np.unique with a fast path for the common all-equal column."""
    if a.size and a.min() == a.max():
        return (a[:1].copy(), np.array([a.size])) if counts else a[:1].copy()
    return np.unique(a, return_counts=counts)


def _group_keys(comm: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _plural(pred: str) -> str:
    """"has no state" -> "have no state", "is not" -> "are not", "waits in" -> "wait in"."""
    first, sep, rest = pred.partition(" ")
    return {"has": "have", "is": "are", "waits": "wait"}.get(first, first) + sep + rest


_KIND_ORDER = {"injected": -1, "deadlock": 0, "no-state": 1, "stuck-transfer": 2, "collective-mismatch": 3, "computing": 4,
               "blocked-outside-mpi": 5, "finished": 6, "stuck-collective": 7, "any-source": 8, "self-wait": 9,
               "unknown-wait": 10}
