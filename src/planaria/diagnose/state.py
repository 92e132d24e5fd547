"""State files of global aggregated diagnosis ([Gao 2024] §2.3): the schema as code, atomic write, validated read.

A state file (suffix ``.state``) is one msgpack map as described in docs/diagnose.md, ``"format": "planaria-state/1"``:
``job, t, size, hosts (optional), stacks, ranks, missing, collect``, plus ``comms`` (optional): the
communicator membership table ``{comm_id: [world ranks in comm rank order] | None}`` (``None`` = every rank
0..size-1 in order, e.g. "world" and its dups). Per-record ``"comms"`` maps are hoisted into this table by
:func:`write_state` and :func:`merge_subtrees` so a member list travels once, not once per rank.

``"ranks"`` has two encodings; :func:`read_state` accepts both:

* rows: a list of per-rank state records exactly as documented in docs/diagnose.md (what collection nodes exchange);
* columns (what :func:`write_state` writes by default): unpacking 196,608 small maps costs ~1.5 s, a few
  packed arrays a few ms, so the records are stored one packed little-endian array per field::

    {"encoding": "columns/1", "n": N, "crc32": zlib.crc32 of "\\0".join(strings) then the arrays in this order,
     "strings": [str, ...],                      # string pool; string columns hold int32 codes, -1 = None
     "rank", "pid", "step": int64[N]              # int null = -2**63
     "t": float64[N]                             # float null = NaN
     "host", "status": int32[N],
     "op_name", "op_kind", "op_comm", "op_site": int32[N]   # op_name == -1: op is None (computing)
     "op_peer", "op_tag", "op_size", "op_seq": int64[N], "op_since": float64[N],
     "colls_off": int64[N+1], "colls_comm": int32[C], "colls_n": int64[C]     # record i: [off[i], off[i+1])
     "th_off": int64[N+1], "th_name": int32[T], "th_ident": int64[T], "th_stack": int32[T],
     "extra": [[row, {key: value}], ...]}         # record keys outside the schema (e.g. "ioerrors");
                                                  # extra "op" / "threads" hold unknown op / thread keys

``"hosts"`` and ``"comms"`` (32,768 hosts, as many node communicators at full scale) are written the same way:
``{"encoding": "columns/1", "names": [str], "off": int64[K+1], "flat": int64[total], "none": [indices of
None entries]}``; a plain map is accepted too.

In memory :func:`read_state` returns ``"ranks"`` as a :class:`RankTable` (numpy columns; ``len``, indexing and
iteration give ordinary record dicts) and ``"hosts"`` / ``"comms"`` as :class:`ListTable` (a read-only
mapping of lists). Records read back carry every schema key (absent ones as None).
"""
from __future__ import annotations

import gc
import itertools
import mmap
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Iterable, Iterator, TypeGuard

import msgpack
import numpy as np

from planaria.util.fsutil import atomic_write

FORMAT = "planaria-state/1"
ENCODING = "columns/1"
NULL = -(2 ** 63)

_I8, _F8, _I4 = np.dtype("<i8"), np.dtype("<f8"), np.dtype("<i4")
# column -> (dtype, length: "n" records, "n1" records + 1, "c" colls entries, "t" threads)
_COLUMNS: dict[str, tuple[np.dtype, str]] = {
    "rank": (_I8, "n"), "pid": (_I8, "n"), "step": (_I8, "n"), "t": (_F8, "n"), "host": (_I4, "n"),
    "status": (_I4, "n"), "op_name": (_I4, "n"), "op_kind": (_I4, "n"), "op_comm": (_I4, "n"),
    "op_site": (_I4, "n"),
    "op_peer": (_I8, "n"), "op_tag": (_I8, "n"), "op_size": (_I8, "n"), "op_seq": (_I8, "n"),
    "op_since": (_F8, "n"),
    "colls_off": (_I8, "n1"), "colls_comm": (_I4, "c"), "colls_n": (_I8, "c"),
    "th_off": (_I8, "n1"), "th_name": (_I4, "t"), "th_ident": (_I8, "t"), "th_stack": (_I4, "t"),
}
_STR_COLS = ("host", "status", "op_name", "op_kind", "op_comm", "op_site", "colls_comm", "th_name")
_REC_KEYS = frozenset({"rank", "host", "status", "pid", "t", "step", "op", "colls", "threads", "comms"})
_OP_STR = ("name", "kind", "comm", "site")
_OP_INT = ("peer", "tag", "size", "seq")
_OP_KEYS = frozenset(_OP_STR + _OP_INT + ("since",))
_TH_KEYS = frozenset({"name", "ident", "stack"})


# --------------------------------------------------------------------------- columnar rank table
@dataclass
class RankTable:
    """Per-rank state records held as numpy columns (see the module docstring); iterating yields records."""

    strings: list[str]
    cols: dict[str, np.ndarray]
    extra: dict[int, dict[str, Any]] = field(default_factory=dict)
    comms: dict[str, Any] = field(default_factory=dict)   # record-level "comms" gathered by from_records

    def __len__(self) -> int:
        return int(self.cols["rank"].shape[0])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.to_records())

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        return self.rows(np.array([i % n]))[0]

    def to_records(self) -> list[dict[str, Any]]:
        """Every record as a dict (slow for huge tables: the analysis works on the columns)."""
        return self.rows(np.arange(len(self)))

    def rows(self, idx: np.ndarray) -> list[dict[str, Any]]:
        """Records of the rows ``idx`` as dicts."""
        c, s = self.cols, self.strings
        idx = np.asarray(idx, dtype=np.int64)

        def ints(name: str) -> list[Any]:
            return [None if v == NULL else v for v in c[name][idx].tolist()]

        def floats(name: str) -> list[Any]:
            return [None if v != v else v for v in c[name][idx].tolist()]

        def strs(name: str) -> list[Any]:
            return [None if v < 0 else s[v] for v in c[name][idx].tolist()]

        rank, pid, step, t, host = ints("rank"), ints("pid"), ints("step"), floats("t"), strs("host")
        status = strs("status")
        op_cols = {k: strs("op_" + k) for k in _OP_STR}
        op_cols.update({k: ints("op_" + k) for k in _OP_INT})
        op_cols["since"] = floats("op_since")
        coff, toff = c["colls_off"], c["th_off"]
        cc, cn = c["colls_comm"], c["colls_n"]
        tn, ti, ts = c["th_name"], c["th_ident"], c["th_stack"]
        out = []
        for j, row in enumerate(idx.tolist()):
            op = None
            if op_cols["name"][j] is not None:
                op = {k: op_cols[k][j] for k in ("name", "kind", "comm", "peer", "tag", "size", "seq", "since",
                                                 "site")}
            a, b = int(coff[row]), int(coff[row + 1])
            colls = {s[k]: v for k, v in zip(cc[a:b].tolist(), cn[a:b].tolist(), strict=True)}
            a, b = int(toff[row]), int(toff[row + 1])
            threads = [{"name": None if nm < 0 else s[nm], "ident": None if ident == NULL else ident, "stack": st}
                       for nm, ident, st in zip(tn[a:b].tolist(), ti[a:b].tolist(), ts[a:b].tolist(), strict=True)]
            rec: dict[str, Any] = {"rank": rank[j], "host": host[j], "pid": pid[j], "t": t[j], "step": step[j],
                                   "op": op, "colls": colls, "threads": threads,
                                   "status": status[j]}
            ex = self.extra.get(row)
            if ex:
                for k, v in ex.items():
                    if k == "op" and op is not None and isinstance(v, dict):
                        op.update(v)
                    elif k == "threads" and isinstance(v, list) and len(v) == len(threads):
                        for th, more in zip(threads, v, strict=True):
                            th.update(more)
                    else:
                        rec[k] = v
            out.append(rec)
        return out

    def take(self, idx: np.ndarray) -> "RankTable":
        """The rows ``idx`` (in that order) as a new table."""
        idx = np.asarray(idx, dtype=np.int64)
        c = self.cols
        cols = {k: c[k][idx] for k, (_, kind) in _COLUMNS.items() if kind == "n"}
        for off_name, kids in (("colls_off", ("colls_comm", "colls_n")), ("th_off", ("th_name", "th_ident",
                                                                                      "th_stack"))):
            off = c[off_name]
            lens = off[idx + 1] - off[idx]
            new_off = np.zeros(idx.size + 1, dtype=np.int64)
            np.cumsum(lens, out=new_off[1:])
            pos = np.repeat(off[idx] - new_off[:-1], lens) + np.arange(int(new_off[-1]), dtype=np.int64)
            cols[off_name] = new_off
            for k in kids:
                cols[k] = c[k][pos]
        where = {int(old): new for new, old in enumerate(idx.tolist()) if int(old) in self.extra} if self.extra else {}
        extra = {new: self.extra[old] for old, new in where.items()}
        return RankTable(self.strings, cols, extra, dict(self.comms))

    # ----------------------------------------------------------------- building and (de)serializing
    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]], n_stacks: int | None = None) -> "RankTable":
        """Columns from row-form records (stacks must already be table indices; see :func:`intern_stacks`)."""
        build = _ColumnBuilder(n_stacks)
        add = build.add
        for i, rec in enumerate(records):
            add(i, rec)
        return cls(build.strings, build.arrays(), build.extra, build.comms)

    def to_wire(self) -> dict[str, Any]:
        """The columns encoding (a msgpack-able map)."""
        out: dict[str, Any] = {"encoding": ENCODING, "n": len(self), "strings": list(self.strings)}
        crc = _strings_crc(out["strings"])
        for k, (dt, _) in _COLUMNS.items():
            b = np.ascontiguousarray(self.cols[k], dtype=dt).tobytes()
            crc = zlib.crc32(b, crc)
            out[k] = b
        out["crc32"] = crc
        out["extra"] = [[int(r), v] for r, v in sorted(self.extra.items())]
        return out

    @classmethod
    def from_wire(cls, d: dict[str, Any], n_stacks: int) -> "RankTable":
        """Decode and check the columns encoding; ValueError naming the first problem."""
        if d.get("encoding") != ENCODING:
            raise ValueError(f"ranks: unknown encoding {d.get('encoding')!r} (expected {ENCODING!r})")
        n = d.get("n")
        strings = d.get("strings")
        if not isinstance(n, int) or n < 0:
            raise ValueError("ranks: bad row count 'n'")
        if not isinstance(strings, list) or not set(map(type, strings)) <= {str}:
            raise ValueError("ranks: 'strings' must be a list of strings")
        cols: dict[str, np.ndarray] = {}
        crc = _strings_crc(strings)
        for k, (dt, _) in _COLUMNS.items():
            b = d.get(k)
            if not isinstance(b, bytes) or len(b) % dt.itemsize:
                raise ValueError(f"ranks: column {k!r} missing or not a packed array")
            crc = zlib.crc32(b, crc)
            cols[k] = np.frombuffer(b, dtype=dt)
        if d.get("crc32") != crc:
            raise ValueError("ranks: checksum mismatch (corrupt file)")
        size = {"n": n, "n1": n + 1}
        for off, kind in (("colls_off", "c"), ("th_off", "t")):
            o = cols[off]
            if o.size != n + 1 or o[0] != 0 or (n and np.any(np.diff(o) < 0)):
                raise ValueError(f"ranks: bad offsets {off!r}")
            size[kind] = int(o[-1])
        for k, (_, kind) in _COLUMNS.items():
            if cols[k].size != size[kind]:
                raise ValueError(f"ranks: column {k!r} has {cols[k].size} entries, expected {size[kind]}")
        ns = len(strings)
        for k in _STR_COLS:
            a = cols[k]
            if a.size and (a.min() < -1 or a.max() >= ns):
                raise ValueError(f"ranks: column {k!r} refers past the string pool")
        if cols["colls_comm"].size and cols["colls_comm"].min() < 0:
            raise ValueError("ranks: a colls entry has no communicator")
        if n and cols["rank"].min() < 0:
            raise ValueError("ranks: negative rank")
        ts = cols["th_stack"]
        if ts.size and (ts.min() < 0 or ts.max() >= n_stacks):
            raise ValueError("ranks: a thread refers past the stack table")
        extra: dict[int, dict[str, Any]] = {}
        ex = d.get("extra", [])
        if not isinstance(ex, list):
            raise ValueError("ranks: 'extra' must be a list")
        for item in ex:
            if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], int)
                    or not 0 <= item[0] < n or not isinstance(item[1], dict)):
                raise ValueError("ranks: bad 'extra' entry")
            extra[item[0]] = item[1]
        return cls(strings, cols, extra)



_NAN = float("nan")


def _num(v: Any, w: Any, what: str) -> int:
    """An integer column's value (the slow path: None, numpy integers, or an error)."""
    if v is None:
        return NULL
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"rank {w}: {what} must be an integer, got {v!r}"[:200])
    return int(v)


def _real(v: Any, w: Any, what: str) -> float:
    """A float column's value (the slow path: None, ints, numpy numbers, or an error)."""
    if v is None:
        return float("nan")
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"rank {w}: {what} must be a number, got {v!r}"[:200])
    return float(v)


class _ColumnBuilder:
    """Row-form records appended column by column (validated), strings interned in one pool.

    The fast paths (an int that is an int, a string already pooled) stay inline: a state of a
    large job has one record per rank."""

    def __init__(self, n_stacks: int | None) -> None:
        self.strings: list[str] = []
        self.pool: dict[str, int] = {}
        self.n_stacks = -1 if n_stacks is None else n_stacks
        self.lists: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
        self.lists["colls_off"].append(0)
        self.lists["th_off"].append(0)
        self.ncolls = self.nth = 0
        L = self.lists
        self.a_rank, self.a_pid, self.a_step, self.a_t, self.a_host, self.a_status = (
            L[k].append for k in ("rank", "pid", "step", "t", "host", "status"))
        self.a_op_s = [(L["op_" + k].append, k) for k in _OP_STR]
        self.a_op_i = [(L["op_" + k].append, k) for k in _OP_INT]
        self.a_since = L["op_since"].append
        self.extra: dict[int, dict[str, Any]] = {}
        self.comms: dict[str, Any] = {}

    def code(self, v: Any, w: Any, what: str) -> int:
        """A string column's value (the slow path: a new string, None, or an error)."""
        if v is None:
            return -1
        if not isinstance(v, str):
            raise ValueError(f"rank {w}: {what} must be a string, got {v!r}"[:200])
        k = self.pool[v] = len(self.strings)
        self.strings.append(v)
        return k

    def add(self, i: int, rec: Any) -> None:
        """Append record ``i``."""
        if type(rec) is not dict:
            raise ValueError(f"record {i} is not a map")
        r = rec.get("rank")
        if type(r) is not int or r < 0:
            if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0:
                raise ValueError(f"record {i}: rank must be an integer >= 0, got {r!r}"[:200])
            r = int(r)
        get = self.pool.get
        self.a_rank(r)
        v = rec.get("pid")
        self.a_pid(v if type(v) is int else _num(v, r, "pid"))
        v = rec.get("step")
        self.a_step(v if type(v) is int else _num(v, r, "step"))
        v = rec.get("t")
        self.a_t(v if type(v) is float else _real(v, r, "t"))
        v = rec.get("host")
        k = get(v) if type(v) is str else None
        self.a_host(k if k is not None else self.code(v, r, "host"))
        v = rec.get("status")
        k = get(v) if type(v) is str else None
        self.a_status(k if k is not None else self.code(v, r, "status"))
        ex = None
        if not rec.keys() <= _REC_KEYS:
            ex = {k2: v2 for k2, v2 in rec.items() if k2 not in _REC_KEYS} or None
        op_more = self._op(r, rec.get("op"))
        if op_more is not None:
            ex = ex or {}
            ex["op"] = op_more
        self._colls(r, rec.get("colls"))
        th_more = self._threads(r, rec.get("threads"))
        if th_more:
            ex = ex or {}
            ex["threads"] = th_more
        if ex:
            self.extra[i] = ex
        rc = rec.get("comms")
        if rc:
            if type(rc) is not dict:
                raise ValueError(f"rank {r}: comms must be a map")
            merge_comms(self.comms, rc)

    def _op(self, r: int, op: Any) -> dict[str, Any] | None:
        """Append the op columns; the op's keys no column holds, if any."""
        if op is None:
            for a, _ in self.a_op_s:
                a(-1)
            for a, _ in self.a_op_i:
                a(NULL)
            self.a_since(_NAN)
            return None
        if type(op) is not dict or type(op.get("name")) is not str:
            raise ValueError(f"rank {r}: op must be None or a map with a string 'name'")
        get = self.pool.get
        for a, kk in self.a_op_s:
            v = op.get(kk)
            k = get(v) if type(v) is str else None
            a(k if k is not None else self.code(v, r, "op." + kk))
        for a, kk in self.a_op_i:
            v = op.get(kk)
            a(v if type(v) is int else _num(v, r, "op." + kk))
        v = op.get("since")
        self.a_since(v if type(v) is float else _real(v, r, "op.since"))
        if not op.keys() <= _OP_KEYS:
            return {k2: v2 for k2, v2 in op.items() if k2 not in _OP_KEYS}
        return None

    def _colls(self, r: int, colls: Any) -> None:
        """Append the collectives entered per communicator."""
        L = self.lists
        if colls:
            if type(colls) is not dict:
                raise ValueError(f"rank {r}: colls must be a map")
            get, a_cc, a_cn = self.pool.get, L["colls_comm"].append, L["colls_n"].append
            for kk, v in colls.items():
                k = get(kk) if type(kk) is str else None
                a_cc(k if k is not None else self.code(kk, r, "colls key"))
                a_cn(v if type(v) is int else _num(v, r, f"colls[{kk!r}]"))
            self.ncolls += len(colls)
        L["colls_off"].append(self.ncolls)

    def _threads(self, r: int, threads: Any) -> list[dict[str, Any]] | None:
        """Append the threads; per thread the keys no column holds, if any thread has some."""
        L = self.lists
        tmore: list[dict[str, Any]] | None = None
        if threads:
            if type(threads) is not list:
                raise ValueError(f"rank {r}: threads must be a list")
            get, nst = self.pool.get, self.n_stacks
            for j, th in enumerate(threads):
                if type(th) is not dict:
                    raise ValueError(f"rank {r}: a thread entry is not a map")
                st = th.get("stack")
                if type(st) is not int or st < 0 or (nst >= 0 and st >= nst):
                    if isinstance(st, bool) or not isinstance(st, (int, np.integer)) or st < 0 or (
                            nst >= 0 and st >= nst):
                        raise ValueError(f"rank {r}: thread stack must be an index into the stack table, "
                                         f"got {st!r}"[:200])
                    st = int(st)
                v = th.get("name")
                k = get(v) if type(v) is str else None
                L["th_name"].append(k if k is not None else self.code(v, r, "thread name"))
                v = th.get("ident")
                L["th_ident"].append(v if type(v) is int else _num(v, r, "thread ident"))
                L["th_stack"].append(st)
                if not th.keys() <= _TH_KEYS:
                    tmore = tmore or [{} for _ in threads]
                    tmore[j] = {k2: v2 for k2, v2 in th.items() if k2 not in _TH_KEYS}
            self.nth += len(threads)
        L["th_off"].append(self.nth)
        return tmore

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as typed arrays."""
        cols = {}
        for k, (dt, _) in _COLUMNS.items():
            try:
                cols[k] = np.array(self.lists[k], dtype=dt)
            except OverflowError:
                raise ValueError(f"column {k}: value out of range") from None
        return cols

class ListTable(Mapping):
    """A ``{name: [ints] | None}`` map ("hosts", "comms") held as packed arrays; reads like a dict of lists."""

    def __init__(self, names: list[str], off: np.ndarray, flat: np.ndarray, none: np.ndarray | None = None) -> None:
        self.names, self.off, self.flat = names, off, flat
        self.none = np.zeros(len(names), dtype=bool) if none is None else none
        self._idx: dict[str, int] | None = None

    def index(self, name: str) -> int:
        """Position of ``name``; KeyError if absent."""
        if self._idx is None:
            self._idx = {k: i for i, k in enumerate(self.names)}
        return self._idx[name]

    def array(self, name: str) -> np.ndarray | None:
        """The entry as an int64 array (None stays None); KeyError if absent."""
        i = self.index(name)
        return None if self.none[i] else self.flat[self.off[i]:self.off[i + 1]]

    def __getitem__(self, name: str) -> list[int] | None:
        a = self.array(name)
        return None if a is None else a.tolist()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], what: str) -> "ListTable":
        """Pack a ``{name: [ints] | None}`` map; ValueError naming ``what`` if it is not one."""
        if isinstance(d, ListTable):
            return d
        names = list(d)
        vals = list(d.values())
        if not all(isinstance(k, str) for k in names):
            raise ValueError(f"'{what}' keys must be strings")
        none = np.array([v is None for v in vals], dtype=bool)
        try:
            lens = np.array([0 if v is None else len(v) for v in vals], dtype=np.int64)
            flat = np.fromiter(itertools.chain.from_iterable(v for v in vals if v is not None), dtype=np.int64,
                               count=int(lens.sum()))
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"'{what}' must map names to lists of ranks") from None
        off = np.zeros(len(names) + 1, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        return cls(names, off, flat, none)

    def to_wire(self) -> dict[str, Any]:
        return {"encoding": ENCODING, "names": list(self.names), "off": self.off.astype(_I8).tobytes(),
                "flat": self.flat.astype(_I8).tobytes(), "none": np.flatnonzero(self.none).tolist()}

    @classmethod
    def from_wire(cls, d: dict[str, Any], what: str) -> "ListTable":
        names, off, flat, none = d.get("names"), d.get("off"), d.get("flat"), d.get("none", [])
        if (not isinstance(names, list) or not set(map(type, names)) <= {str}
                or not isinstance(off, bytes) or not isinstance(flat, bytes) or len(off) % 8 or len(flat) % 8
                or not isinstance(none, list)):
            raise ValueError(f"'{what}': bad columns encoding")
        o = np.frombuffer(off, dtype=_I8)
        f = np.frombuffer(flat, dtype=_I8)
        if o.size != len(names) + 1 or o[0] != 0 or np.any(np.diff(o) < 0) or o[-1] != f.size:
            raise ValueError(f"'{what}': bad offsets")
        if len(set(names)) != len(names):
            raise ValueError(f"'{what}': duplicate names")
        mask = np.zeros(len(names), dtype=bool)
        try:
            mask[np.asarray(none, dtype=np.int64)] = True
        except (IndexError, ValueError, TypeError):
            raise ValueError(f"'{what}': bad 'none' list") from None
        return cls(names, o, f, mask)


def _is_columns(v: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(v, dict) and v.get("encoding") == ENCODING


def _strings_crc(strings: list[str]) -> int:
    return zlib.crc32("\0".join(strings).encode("utf-8", "surrogatepass"))


# --------------------------------------------------------------------------- stacks, comms, merging
def _stack_key(stack: Any) -> tuple:
    if not isinstance(stack, (list, tuple)):
        raise ValueError(f"a stack must be a list of frames, got {stack!r}"[:200])
    try:
        return tuple((str(f[0]), int(f[1]), str(f[2])) for f in stack)
    except (TypeError, ValueError, IndexError):
        raise ValueError(f"a frame must be [filename, lineno, funcname]: {stack!r}"[:200]) from None


class _Interner:
    """Stack table with de-duplication by frame content."""

    def __init__(self) -> None:
        self.table: list[list[list[Any]]] = []
        self.index: dict[tuple, int] = {}

    def add(self, stack: Any) -> int:
        key = _stack_key(stack)
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.table)
            self.table.append([list(f) for f in key])
        return i


def _reintern(records: Iterable[dict[str, Any]], part_stacks: list[Any], it: _Interner,
              where: str) -> list[dict[str, Any]]:
    remap: list[int] | None = None
    out = []
    for rec in records:
        threads = rec.get("threads")
        if not threads:
            out.append(rec)
            continue
        new = []
        for th in threads:
            st = th.get("stack")
            if isinstance(st, (int, np.integer)) and not isinstance(st, bool):
                if remap is None:
                    remap = [it.add(s) for s in part_stacks]
                if not 0 <= st < len(remap):
                    raise ValueError(f"{where}: rank {rec.get('rank')}: stack index {st} past the stack table")
                new.append({**th, "stack": remap[st]})
            else:
                new.append({**th, "stack": it.add(st)})
        out.append({**rec, "threads": new})
    return out


def intern_stacks(records: Iterable[dict[str, Any]],
                  stacks: list[Any] | None = None) -> tuple[list[list[list[Any]]], list[dict[str, Any]]]:
    """Replace literal thread stacks by indices into a de-duplicated table: returns ``(stacks, records)``.

    Input records are not modified. A thread whose ``"stack"`` is already an int refers to ``stacks``.
    """
    it = _Interner()
    recs = _reintern(records, list(stacks or []), it, "intern_stacks")
    return it.table, recs


def merge_comms(into: dict[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """Add a communicator membership table to ``into``; ValueError if one comm id has two member lists."""
    for k, v in more.items():
        if not isinstance(k, str) or not (v is None or isinstance(v, (list, tuple, np.ndarray))):
            raise ValueError(f"comms: bad entry {k!r}")
        if k in into:
            old = into[k]
            same = old is v or (old is None and v is None) or (
                old is not None and v is not None and list(old) == list(v))
            if not same:
                raise ValueError(f"comms: communicator {k!r} has two different member lists")
        else:
            into[k] = v if v is None or isinstance(v, list) else list(v)
    return into


def merge_subtrees(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge partial states of collection subtrees into one: ranks and missing concatenated, stacks re-interned.

    Each part is ``{"stacks", "ranks", "missing"[, "hosts", "comms"]}`` (stacks may also be literal in the
    records). Record-level ``"comms"`` are hoisted into the result's ``"comms"``; ``"missing"`` is
    de-duplicated, sorted, and loses ranks that answered in another part.
    """
    it = _Interner()
    ranks: list[dict[str, Any]] = []
    missing: set[int] = set()
    hosts: dict[str, list[int]] = {}
    comms: dict[str, Any] = {}
    for k, part in enumerate(parts):
        if not isinstance(part, dict):
            raise ValueError(f"part {k} is not a map")
        recs = part.get("ranks") or []
        if isinstance(recs, RankTable):
            merge_comms(comms, recs.comms)
            recs = recs.to_records()
        for rec in _reintern(recs, part.get("stacks") or [], it, f"part {k}"):
            rc = rec.get("comms")
            if rc is not None:
                merge_comms(comms, rc)
                rec = {kk: v for kk, v in rec.items() if kk != "comms"}
            ranks.append(rec)
        for m in part.get("missing") or []:
            missing.add(int(m))
        for h, rs in (part.get("hosts") or {}).items():
            have = hosts.setdefault(h, [])
            have.extend(r for r in rs if r not in have)
        merge_comms(comms, part.get("comms") or {})
    answered = {rec.get("rank") for rec in ranks}
    out: dict[str, Any] = {"stacks": it.table, "ranks": ranks, "missing": sorted(missing - answered)}
    if hosts:
        out["hosts"] = hosts
    if comms:
        out["comms"] = comms
    return out


def columns(state: dict[str, Any]) -> tuple[RankTable, list[Any], Mapping[str, Any]]:
    """``(ranks as a RankTable, stack table, comms table)`` of an in-memory state in either form."""
    ranks = state.get("ranks")
    stacks: list[Any] = state.get("stacks") or []
    if ranks is None:
        ranks = []
    if isinstance(ranks, list):
        if _has_literal_stacks(ranks):
            stacks, ranks = intern_stacks(ranks, stacks)
        table = RankTable.from_records(ranks, n_stacks=len(stacks))
    elif isinstance(ranks, RankTable):
        table = ranks
    else:
        raise ValueError("'ranks' must be a list of records or a RankTable")
    comms = state.get("comms") or {}
    if not isinstance(comms, Mapping):
        raise ValueError("'comms' must be a map")
    if table.comms:
        comms = merge_comms(dict(comms), table.comms)
    return table, stacks, comms


def _has_literal_stacks(records: list[Any]) -> bool:
    return any(not isinstance(th.get("stack"), (int, np.integer))
               for rec in records if isinstance(rec, dict)
               for th in (rec.get("threads") or []) if isinstance(th, dict))


# --------------------------------------------------------------------------- file I/O
def encode_state(state: dict[str, Any], encoding: str = "columns") -> bytes:
    """The bytes of a state file for ``state`` (``encoding`` "columns" or "rows"); ValueError if it cannot be."""
    if not isinstance(state, dict):
        raise ValueError("state must be a map")
    fmt = state.get("format", FORMAT)
    if fmt != FORMAT:
        raise ValueError(f"state has format {fmt!r}, expected {FORMAT!r}")
    if encoding not in ("columns", "rows"):
        raise ValueError(f"unknown encoding {encoding!r} (columns or rows)")
    out = {k: v for k, v in state.items()}
    out["format"] = FORMAT
    stacks = state.get("stacks") or []
    ranks = state.get("ranks") or []
    if isinstance(ranks, list) and _has_literal_stacks(ranks):
        stacks, ranks = intern_stacks(ranks, stacks)
    out["stacks"] = [[list(f) for f in s] for s in stacks]
    table = ranks if isinstance(ranks, RankTable) else RankTable.from_records(ranks, n_stacks=len(stacks))
    comms = state.get("comms") or {}
    if table.comms:
        comms = merge_comms(dict(comms), table.comms)
    if comms:
        out["comms"] = ListTable.from_dict(comms, "comms").to_wire() if encoding == "columns" else dict(comms)
    if state.get("hosts") is not None:
        out["hosts"] = (ListTable.from_dict(state["hosts"], "hosts").to_wire() if encoding == "columns"
                        else dict(state["hosts"]))
    out["ranks"] = table.to_wire() if encoding == "columns" else [
        {k: v for k, v in rec.items()} for rec in (ranks if isinstance(ranks, list) else table.to_records())]
    if encoding == "rows":
        for rec in out["ranks"]:
            rec.pop("comms", None)
    out["missing"] = sorted(int(m) for m in (state.get("missing") or []))
    try:
        return msgpack.packb(out, use_bin_type=True, default=_no_default)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"state cannot be encoded: {e}".splitlines()[0]) from None


def _no_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} object")


def write_state(path: str | os.PathLike[str], state: dict[str, Any], *, encoding: str = "columns") -> None:
    """Write ``state`` to ``path`` atomically (msgpack; the old file stays intact if encoding fails)."""
    atomic_write(path, encode_state(state, encoding))


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a state file; ``"ranks"`` comes back as a RankTable. One-line ValueError if unusable."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            mm = None
            if os.fstat(f.fileno()).st_size > 0:
                try:   # map the file: no copy, and no fresh pages to fault in for a 50 MB buffer
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except (OSError, ValueError):
                    mm = None
            if mm is not None:
                with mm:
                    return decode_state(mm, str(p))
            data = f.read()    # empty, or not mappable (a pipe, a special file)
    except FileNotFoundError:
        raise ValueError(f"{p}: no such state file") from None
    except IsADirectoryError:
        raise ValueError(f"{p}: is a directory, not a state file") from None
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror})") from None
    if not data:
        raise ValueError(f"{p}: empty file, not a planaria state file")
    return decode_state(data, str(p))


def decode_state(data: bytes | mmap.mmap, name: str = "state") -> dict[str, Any]:
    """Parse and check the bytes of a state file (see :func:`read_state`)."""
    enabled = gc.isenabled()
    gc.disable()   # unpacking creates many containers and nothing cyclic: collections would only cost time
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises many types for bad input
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{name}: unreadable state file: corrupt, truncated or not msgpack ({msg})") from None
    finally:
        if enabled:
            gc.enable()
    if not isinstance(obj, dict) or "format" not in obj:
        raise ValueError(f"{name}: not a planaria state file (no 'format' field)")
    if obj["format"] != FORMAT:
        raise ValueError(f"{name}: wrong format {obj['format']!r}, expected {FORMAT!r}"[:300])
    try:
        _check(obj)
    except ValueError as e:
        raise ValueError(f"{name}: bad state file: {e}") from None
    return obj


def _check(obj: dict[str, Any]) -> None:
    """Validate a decoded state in place; turn 'ranks' into a RankTable."""
    stacks = obj.get("stacks", [])
    if not isinstance(stacks, list):
        raise ValueError("'stacks' must be a list")
    for s in stacks:
        _stack_key(s)
    size = obj.get("size")
    if size is not None and (not isinstance(size, int) or size < 0):
        raise ValueError(f"'size' must be an integer >= 0, got {size!r}"[:200])
    missing = obj.get("missing", [])
    if not isinstance(missing, list) or not all(isinstance(m, int) and m >= 0 for m in missing):
        raise ValueError("'missing' must be a list of ranks")
    ranks = obj.get("ranks", [])
    if isinstance(ranks, dict):
        table = RankTable.from_wire(ranks, len(stacks))
    elif isinstance(ranks, list):
        table = RankTable.from_records(ranks, n_stacks=len(stacks))
    else:
        raise ValueError("'ranks' must be a list of records or a columns map")
    hosts = obj.get("hosts")
    if _is_columns(hosts):
        obj["hosts"] = hosts = ListTable.from_wire(hosts, "hosts")
        if hosts.none.any():
            raise ValueError("'hosts' has an entry without ranks")
    elif hosts is not None:
        if not isinstance(hosts, dict) or not all(isinstance(v, list) for v in hosts.values()):
            raise ValueError("'hosts' must map host names to lists of ranks")
    comms = obj.get("comms") or {}
    if _is_columns(comms):
        comms = ListTable.from_wire(comms, "comms")
    elif not isinstance(comms, dict) or not all(
            isinstance(k, str) and (v is None or type(v) is list) for k, v in comms.items()):
        raise ValueError("'comms' must map communicator ids to member lists")
    if table.comms:
        comms = merge_comms(dict(comms), table.comms)
        table.comms = {}
    obj["comms"] = comms
    if size is not None:
        r = table.cols["rank"]
        if r.size and r.max() >= size:
            raise ValueError(f"rank {int(r.max())} is not below size {size}")
        if missing and max(missing) >= size:
            raise ValueError(f"missing rank {max(missing)} is not below size {size}")
    obj["ranks"] = table
    obj.setdefault("missing", [])
    obj.setdefault("stacks", [])
