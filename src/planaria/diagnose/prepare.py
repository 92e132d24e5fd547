"""First step of the offline analysis: the rank table merged, sorted and checked, with per-rank columns.

Paper 000 §2.3 steps 1-3: merge and sort the states by rank (the newest of duplicates kept), classify
each answering rank (in a collective, in a point-to-point wait, not in MPI, finished), and the count
check (ranks without state, grouped by host). Everything is a numpy column over ranks or rows; the
few per-rank descriptions a report needs are methods that read them.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from planaria.diagnose.findings import clip, frame_site, rank_phrase, ranges, short_site
from planaria.diagnose.state import NULL, ListTable, RankTable, columns

RECV_NAMES = frozenset({"recv", "irecv", "probe", "iprobe", "mprobe", "improbe", "mrecv"})
SEND_NAMES = frozenset({"send", "ssend", "bsend", "rsend", "isend", "issend", "ibsend", "irsend"})
BOTH_NAMES = frozenset({"sendrecv", "sendrecv_replace"})
BLOCKING_FUNCS = frozenset({"sleep", "read", "readinto", "readline", "recv", "recv_into", "recvfrom", "accept",
                            "select", "poll", "wait", "acquire", "join", "input", "flock", "lockf", "fsync",
                            "connect", "getaddrinfo"})
FINISHED = frozenset({"finished", "exited", "done"})


@dataclass(frozen=True, eq=False)
class Census:
    """The count check: ranks without state, and the hosts that lost all or some of their ranks."""

    missing: np.ndarray                          # ranks without state, sorted
    down_hosts: dict[int, int]                   # host code -> its rank count (every rank missing)
    partial_hosts: dict[int, tuple[int, int]]    # host code -> (missing, total)
    evidence: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Prepared:
    """The state as columns: one row per answering rank (sorted by rank), lookups rank -> row and
    rank -> host, and what each row is doing."""

    state: dict[str, Any]
    stacks: list[Any]
    comms: Any                       # communicator name -> members (None: every rank), or a ListTable
    table: RankTable
    strings: list[str]               # the string pool the table's codes index
    rank: np.ndarray                 # rank of each row
    n: int                           # rows (ranks that answered)
    size: int                        # ranks in the job
    row_of: np.ndarray               # rank -> row, -1 without state
    answered: np.ndarray             # rank -> has a state
    reported_missing: np.ndarray     # rank -> the collection named it missing
    is_recv_name: np.ndarray         # string code + 1 -> that op name receives (index 0: no op)
    is_send_name: np.ndarray         # string code + 1 -> that op name sends
    in_mpi: np.ndarray               # row -> blocked in an MPI call
    is_coll: np.ndarray              # row -> in a collective
    is_p2p: np.ndarray               # row -> in a point-to-point call
    computing: np.ndarray            # row -> not in MPI
    finished: np.ndarray             # row -> not in MPI, its program has ended
    host_names: list[str]
    host_of: np.ndarray              # rank -> host code, -1 unknown
    census: Census
    evidence: tuple[str, ...]        # from merging and checking the table (the census has its own)

    @property
    def cols(self) -> dict[str, np.ndarray]:
        return self.table.cols

    # ------------------------------------------------------------------ per-rank descriptions (few ranks)
    def string(self, code: int) -> str | None:
        return None if code < 0 else self.strings[code]

    def host(self, r: int) -> str | None:
        h = int(self.host_of[r])
        if h >= 0:
            return self.host_names[h]
        row = int(self.row_of[r])
        return self.string(int(self.cols["host"][row])) if row >= 0 else None

    def main_stack(self, row: int) -> list[Any] | None:
        c = self.cols
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
            return self.string(int(self.cols["op_site"][row]))
        return frame_site(self.main_stack(row) or [])

    def op_text(self, r: int) -> str:
        """"Recv from rank 12" / "Allreduce #4 on world" / "Send to rank 3 (tag 5)"."""
        c, row = self.cols, int(self.row_of[r])
        nm = self.string(int(c["op_name"][row])) or "?"
        comm = self.string(int(c["op_comm"][row]))
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
            down = self.census.down_hosts
            if h >= 0 and h in down:
                why = f"host {self.host_names[h]} down or unreachable: all {down[h]} of its ranks missing"
            return f"has no state ({why})"
        if self.finished[row]:
            return f"has finished ({self.string(int(self.cols['status'][row]))})"
        if self.computing[row]:
            return f"is not in MPI ({self.computing_reason(row)} at {short_site(self.site(r))})"
        return f"waits in {self.op_text(r)} at {short_site(self.site(r))}"

    def computing_reason(self, row: int) -> str:
        st = self.main_stack(row) or []
        if st and str(st[-1][2]) in BLOCKING_FUNCS:
            why = f"blocked outside MPI in {st[-1][2]}()"
        else:
            why = "computing: endless loop or slow"
        status = self.string(int(self.cols["status"][row]))
        if status and status.startswith("unresponsive"):   # read from outside (py-spy): its agent could not answer
            why = f"{status}; {why}"
        return why

    def only(self, row: int, flag: np.ndarray) -> bool:
        """Row's op is only a receive (flag=is_recv_name) or only a send (flag=is_send_name)."""
        nm = self.cols["op_name"][row]
        return bool(flag[nm] and not (self.is_recv_name[nm] and self.is_send_name[nm]))

    def sites_of(self, ranks: np.ndarray) -> str:
        """The (at most three) commonest call sites of ``ranks``, most common first."""
        codes, cnt = uniq(self.cols["op_site"][self.row_of[ranks]], counts=True)
        order = np.argsort(-cnt, kind="stable")
        parts = [short_site(self.string(int(codes[i]))) for i in order[:3]]
        return " / ".join(parts) + (f" / {codes.size - 3} more sites" if codes.size > 3 else "")


# --------------------------------------------------------------------------- the step
def prepare(state: dict[str, Any]) -> Prepared:
    """Columns of ``state`` (as read by read_state, or in memory with row-form records), merged,
    sorted by rank, bounded by the job size, classified and counted."""
    table, stacks, comms = columns(state)
    evidence: list[str] = []
    table = _merge_sort(table, evidence)
    host_codes, host_ranks, host_names = _host_lists(state)
    explicit = np.asarray(state.get("missing") or [], dtype=np.int64)
    size = _job_size(state, table.cols["rank"], explicit, host_ranks, evidence)
    rank = table.cols["rank"]
    if rank.size and int(rank.max()) >= size:
        keep = np.flatnonzero(rank < size)
        evidence.append(f"ignored {rank.size - keep.size} records of ranks >= size {size}")
        table = table.take(keep)
        rank = table.cols["rank"]
    n = int(rank.size)
    row_of = np.full(size, -1, dtype=np.int64)
    row_of[rank] = np.arange(n, dtype=np.int64)
    answered = row_of >= 0
    reported_missing = np.zeros(size, dtype=bool)
    reported_missing[explicit[(explicit >= 0) & (explicit < size)]] = True
    c, strings = table.cols, table.strings
    is_recv_name = _name_flags(strings, c["op_name"], lambda s: s in RECV_NAMES or s in BOTH_NAMES)
    is_send_name = _name_flags(strings, c["op_name"], lambda s: s in SEND_NAMES or s in BOTH_NAMES)
    is_finished_status = _name_flags(strings, c["status"], lambda s: s in FINISHED)
    in_mpi = c["op_name"] >= 0
    is_coll = in_mpi & (c["op_kind"] == {s: i for i, s in enumerate(strings)}.get("coll", -2))
    computing = ~in_mpi
    host_of = np.full(size, -1, dtype=np.int64)
    ok = (host_ranks >= 0) & (host_ranks < size)
    host_of[host_ranks[ok]] = host_codes[ok]
    census = count_check(size, n, answered, reported_missing, host_of, host_names)
    return Prepared(state=state, stacks=stacks, comms=comms, table=table, strings=strings, rank=rank, n=n,
                    size=size, row_of=row_of, answered=answered, reported_missing=reported_missing,
                    is_recv_name=is_recv_name, is_send_name=is_send_name, in_mpi=in_mpi, is_coll=is_coll,
                    is_p2p=in_mpi & ~is_coll, computing=computing,
                    finished=computing & is_finished_status[c["status"]], host_names=host_names, host_of=host_of,
                    census=census, evidence=tuple(evidence))


def _merge_sort(table: RankTable, evidence: list[str]) -> RankTable:
    """Rows sorted by rank; of a rank that answered more than once, the newest state."""
    rank = table.cols["rank"]
    if rank.size and not np.all(rank[1:] > rank[:-1]):
        t = table.cols["t"]
        order = np.lexsort((np.nan_to_num(t, nan=-np.inf), rank))
        rs = rank[order]
        last = np.ones(rs.size, dtype=bool)
        last[:-1] = rs[1:] != rs[:-1]
        if not last.all():
            dup = np.unique(rs[~last])
            evidence.append(f"{rank_phrase(dup)} answered more than once; kept the newest state")
        table = table.take(order[last])
    return table


def _job_size(state: dict[str, Any], rank: np.ndarray, explicit: np.ndarray, host_ranks: np.ndarray,
              evidence: list[str]) -> int:
    """The state's job size, else the largest rank any part of it names, plus one."""
    size = state.get("size")
    if isinstance(size, int):
        return size
    cands = [int(rank.max()) + 1 if rank.size else 0, int(explicit.max()) + 1 if explicit.size else 0,
             int(host_ranks.max()) + 1 if host_ranks.size else 0]
    size = max(cands)
    evidence.append(f"state has no job size; assuming {size} ranks")
    return size


def _name_flags(strings: list[str], codes: np.ndarray, pred: Callable[[str], bool]) -> np.ndarray:
    """Per pool string used in ``codes``, whether ``pred`` holds for it (lower-cased), plus False at
    index -1 (no string): index with a code column directly."""
    ns = len(strings)
    out = np.zeros(ns + 1, dtype=bool)
    used = np.flatnonzero(np.bincount(codes + 1, minlength=ns + 1)[1:]).tolist()
    out[[k for k in used if pred(strings[k].lower())]] = True
    return out


def _host_lists(state: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(host code of each entry, rank of each entry, host names) of the state's ``hosts`` map."""
    hosts = state.get("hosts") or {}
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


def count_check(size: int, n: int, answered: np.ndarray, reported_missing: np.ndarray, host_of: np.ndarray,
                host_names: list[str]) -> Census:
    """Ranks without state are dead or unreachable; a host all of whose ranks are missing is down."""
    no_state = ~answered
    missing = np.flatnonzero(no_state)
    down: dict[int, int] = {}
    partial: dict[int, tuple[int, int]] = {}
    if not missing.size:
        return Census(missing, down, partial, ())
    silent = np.flatnonzero(no_state & ~reported_missing)
    ev = [f"count check: {size} ranks expected, {n} answered; no state: {clip(ranges(missing))}"]
    if silent.size and silent.size != missing.size:
        ev.append(f"{rank_phrase(silent)} neither answered nor {'was' if silent.size == 1 else 'were'} reported "
                  f"missing by the collection")
    known = host_of >= 0
    if known.any():
        n_hosts = len(host_names)
        total = np.bincount(host_of[known], minlength=n_hosts)
        miss = np.bincount(host_of[no_state & known], minlength=n_hosts)
        mk = missing[host_of[missing] >= 0]
        mh = host_of[mk]
        order = np.argsort(mh, kind="stable")
        mk, mh = mk[order], mh[order]
        for h in np.flatnonzero(miss).tolist():
            if miss[h] == total[h]:
                down[h] = int(total[h])
                ev.append(f"host {host_names[h]}: all {total[h]} ranks missing -> node down or unreachable")
            else:
                partial[h] = (int(miss[h]), int(total[h]))
                rs = mk[np.searchsorted(mh, h):np.searchsorted(mh, h, side="right")]
                ev.append(f"host {host_names[h]}: {miss[h]} of {total[h]} ranks missing ({ranges(rs)}) "
                          f"-> processes killed or crashed, the node answers")
    return Census(missing, down, partial, tuple(ev))


def uniq(a: np.ndarray, counts: bool = False) -> Any:
    """np.unique with a fast path for the common all-equal column."""
    if a.size and a.min() == a.max():
        return (a[:1].copy(), np.array([a.size])) if counts else a[:1].copy()
    if counts:
        return np.unique(a, return_counts=True)
    return np.unique(a)
