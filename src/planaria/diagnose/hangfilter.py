"""Stack-sampling hang filter ([Gao 2024], section 2.4): sample every thread's stack s times, keep the
threads whose stack never changed, and group them by that stack; the small classes are the abnormal ones.

Input layout. ``samples`` holds one stack id per thread and sampling round: either a 2-D integer array of
shape ``(n_threads, s)`` or a sequence of ``s`` 1-D per-round arrays of length ``n_threads``. Collection
naturally produces one array per round, so the fast layouts are the per-round sequence and a Fortran-order
(column-major) 2-D array; a C-order array works too but reads its columns with a stride. Stack ids index an
intern table (``stacks``), so they are small dense non-negative ints; unstable threads may carry any
value (a negative sentinel for "not sampled this round" included), stable ones must be >= 0.

Cost: O(n) vectorized passes (compare the rounds, count the stable ids, mark (class, rank) pairs in a
presence table), with an O(n log n) fallback when classes x rank span is too large for that table.
"""
from __future__ import annotations

import math
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Union

import numpy as np

from planaria.util.paths import shown

Frame = tuple[str, int, str]
Stack = tuple[Frame, ...]
Samples = Union[np.ndarray, Sequence[np.ndarray]]

# The (class, rank) presence table is used while it has at most max(_TABLE_MIN, _TABLE_PER_THREAD * stable
# threads) cells (one byte each); beyond that the grouping sorts the (class, rank) keys instead.
_TABLE_MIN = 1 << 24
_TABLE_PER_THREAD = 8


# --------------------------------------------------------------------------- how many samples
def samples_needed(n_threads: int, loop_size: int = 250) -> int:
    """Smallest s >= 2 with s > 1 + ln n / ln k: then fewer than one of n threads looping over k
    instructions is expected to show the same PC in all s samples (n * k**(1-s) < 1)."""
    for name, v in (("n_threads", n_threads), ("loop_size", loop_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, not {v!r}")
    if n_threads < 1:
        raise ValueError(f"n_threads must be >= 1, got {n_threads}")
    if loop_size < 2:
        raise ValueError(f"loop_size must be >= 2 (a one-instruction loop never changes its PC), got {loop_size}")
    n, k = int(n_threads), int(loop_size)
    # s > 1 + log_k(n)  <=>  k**(s-1) > n, checked in exact integer arithmetic
    s, power = 2, k
    while power <= n:
        s += 1
        power *= k
    return s


# --------------------------------------------------------------------------- input checks
def _int_1d(a: Any, what: str, n: int | None = None) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be 1-D, got shape {arr.shape}")
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64:
        arr = arr.astype(np.int64)
    if n is not None and arr.size != n:
        raise ValueError(f"{what} has {arr.size} entries, expected {n} (one per thread)")
    return arr


def _columns(samples: Samples) -> tuple[list[np.ndarray], int]:
    """The per-round columns of ``samples`` (views, no copy of a 2-D array) and the thread count."""
    if isinstance(samples, np.ndarray):
        if samples.ndim != 2:
            raise ValueError(f"samples must be 2-D (n_threads, s) or a list of per-round 1-D arrays, "
                             f"got shape {samples.shape}")
        if samples.shape[1] < 1:
            raise ValueError("samples has no sampling round (shape[1] == 0)")
        cols = [_int_1d(samples[:, j], "samples") for j in range(samples.shape[1])]
    else:
        rounds = list(samples)
        if not rounds:
            raise ValueError("samples has no sampling round")
        cols = [_int_1d(c, f"samples round {j}") for j, c in enumerate(rounds)]
        n0 = cols[0].size
        for j, c in enumerate(cols):
            if c.size != n0:
                raise ValueError(f"samples round {j} has {c.size} threads, round 0 has {n0}")
    return cols, int(cols[0].size)


def _stable_mask(cols: list[np.ndarray], n: int) -> np.ndarray:
    first = cols[0]
    if len(cols) == 1:
        return np.ones(n, dtype=bool)
    mask = np.equal(first, cols[1])
    if len(cols) > 2:
        tmp = np.empty(n, dtype=bool)
        for c in cols[2:]:
            np.equal(first, c, out=tmp)
            np.logical_and(mask, tmp, out=mask)
    return mask


def stable_threads(samples: Samples) -> np.ndarray:
    """Boolean mask over threads: True where the stack id is the same in every sample."""
    cols, n = _columns(samples)
    return _stable_mask(cols, n)


# --------------------------------------------------------------------------- text helpers
def frame_text(frame: Sequence[Any]) -> str:
    """``"file:line in func"`` for a frame ``(filename, lineno, funcname)``."""
    filename, lineno, func = frame
    return f"{filename}:{lineno} in {func}"


def _as_stack(stack: Sequence[Sequence[Any]]) -> Stack:
    return tuple((str(f[0]), int(f[1]), str(f[2])) for f in stack)


def rank_ranges(ranks: Any) -> str:
    """Compact text of a rank set, e.g. ``[0,1,2,3,5,9,10,11]`` -> ``"0-3,5,9-11"`` (sorted, deduplicated)."""
    arr = np.asarray(ranks).ravel()
    if arr.size == 0:
        return ""
    if arr.dtype.kind not in "iu":
        raise ValueError(f"ranks must be integers, got dtype {arr.dtype}")
    r = np.unique(arr)
    if r[0] < 0:
        raise ValueError(f"ranks must be >= 0, got {int(r[0])}")
    brk = np.flatnonzero(np.diff(r) != 1)
    starts = r[np.concatenate(([0], brk + 1))].tolist()
    ends = r[np.concatenate((brk, [r.size - 1]))].tolist()
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in zip(starts, ends, strict=True))


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_rank_ranges(text: str) -> np.ndarray:
    """Inverse of :func:`rank_ranges`: ``"0-3,5"`` -> ``array([0, 1, 2, 3, 5])`` (sorted, unique, int64)."""
    if not text.strip():
        return np.empty(0, dtype=np.int64)
    parts = []
    for item in text.split(","):
        m = _RANGE.match(item)
        if not m:
            raise ValueError(f"bad rank range {item!r} in {text!r} (expected N or N-M)")
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        if b < a:
            raise ValueError(f"bad rank range {item!r} in {text!r}: end before start")
        parts.append(np.arange(a, b + 1, dtype=np.int64))
    return np.unique(np.concatenate(parts))


# --------------------------------------------------------------------------- grouping
@dataclass(eq=False)
class HangClass:
    """Threads whose stack stayed at one stack id in every sample; ``ranks`` sorted unique world ranks."""

    stack_id: int
    count: int                                   # threads in the class
    ranks: np.ndarray
    names: set[str] = field(default_factory=set)  # thread names (empty when none were given)
    stack: Stack | None = None                    # frames, outermost first (when stacks were given)
    site: str | None = None                       # innermost frame "file:line in func" (when stacks were given)

    @cached_property
    def rank_ranges(self) -> str:
        """The rank set as text, e.g. ``"0-3,5,9-11"`` (built on first access)."""
        return rank_ranges(self.ranks)

    @property
    def n_ranks(self) -> int:
        return int(self.ranks.size)

    def __repr__(self) -> str:
        where = f" at {self.site}" if self.site else ""
        return f"HangClass(stack {self.stack_id}{where}: {self.count} threads on {self.n_ranks} ranks)"


def _split_sorted_keys(keys: np.ndarray, base: int, m: int) -> list[np.ndarray]:
    """Sorted unique ``class * base + value`` keys -> per class the array of values."""
    cls = keys // base
    bounds = np.searchsorted(cls, np.arange(m + 1))
    vals = keys - cls * base
    return [vals[bounds[i]:bounds[i + 1]] for i in range(m)]


def group(samples: Samples, thread_rank: Any, thread_name: Any = None,
          stacks: Sequence[Sequence[Sequence[Any]]] | None = None) -> list[HangClass]:
    """Stable threads grouped by their constant stack id, smallest class first (ties by stack id).

    ``thread_rank`` (n,) world rank of each thread; ``thread_name`` optional (n,) names; ``stacks``
    optional intern table: when given, each class carries its frames and innermost ``site``.
    """
    cols, n = _columns(samples)
    rank = _int_1d(thread_rank, "thread_rank", n)
    if thread_name is not None and len(thread_name) != n:
        raise ValueError(f"thread_name has {len(thread_name)} entries, expected {n} (one per thread)")
    mask = _stable_mask(cols, n)
    n_stable = int(np.count_nonzero(mask))
    if n_stable == 0:
        return []
    every = n_stable == n
    ids = cols[0] if every else cols[0][mask]
    r = rank if every else rank[mask]

    try:
        counts = np.bincount(ids)
    except ValueError:
        raise ValueError("a stable thread has a negative stack id (ids must index the stack table)") from None
    present = np.flatnonzero(counts)             # the classes' stack ids, ascending
    m = int(present.size)
    class_counts = counts[present]
    if stacks is not None and int(present[-1]) >= len(stacks):
        raise ValueError(f"stack id {int(present[-1])} is outside the stack table ({len(stacks)} stacks)")

    rmin, rmax = int(r.min()), int(r.max())
    if rmin < 0:
        raise ValueError(f"thread_rank must be >= 0, got {rmin}")
    width = rmax - rmin + 1
    cells = m * width
    small = cells < 2**31 and rmax < 2**31
    key_t = np.int32 if small else np.int64
    # key = class * width + (rank - rmin), built with one gather through a per-stack-id table and one add
    lut = np.zeros(counts.size, dtype=key_t)
    lut[present] = np.arange(m, dtype=key_t) * width - rmin
    key = lut[ids]
    np.add(key, r, out=key, casting="unsafe" if small else "same_kind")
    if cells <= max(_TABLE_MIN, _TABLE_PER_THREAD * n_stable):
        seen = np.zeros(cells, dtype=bool)
        seen[key] = True
        rank_sets = [np.flatnonzero(seen[i * width:(i + 1) * width]) + rmin for i in range(m)]
    else:
        rank_sets = [v + rmin for v in _split_sorted_keys(np.unique(key.astype(np.int64)), width, m)]
    del key

    name_sets: list[set[str]] = [set() for _ in range(m)]
    if thread_name is not None:
        names = np.asarray(thread_name)
        names = names if every else names[mask]
        uniq, inv = np.unique(names, return_inverse=True)
        code_of = np.zeros(counts.size, dtype=np.int64)
        code_of[present] = np.arange(m)
        nkeys = np.unique(code_of[ids] * uniq.size + inv.ravel())
        name_sets = [set(map(str, uniq[v])) for v in _split_sorted_keys(nkeys, int(uniq.size), m)]

    out = []
    for i in np.lexsort((present, class_counts)).tolist():
        sid = int(present[i])
        stack = site = None
        if stacks is not None:
            stack = _as_stack(stacks[sid])
            site = frame_text(stack[-1]) if stack else "<no frames>"
        out.append(HangClass(stack_id=sid, count=int(class_counts[i]), ranks=rank_sets[i],
                             names=name_sets[i], stack=stack, site=site))
    return out


# --------------------------------------------------------------------------- sampling this process
def _walk(frame: Any) -> Stack:
    frames = []
    while frame is not None:
        code = frame.f_code
        frames.append((shown(code.co_filename), int(frame.f_lineno or 0), code.co_name))
        frame = frame.f_back
    frames.reverse()
    return tuple(frames)


def sample_local(rounds: int = 4, interval: float = 0.1) -> tuple[np.ndarray, list[str], list[Stack]]:
    """Sample this process's Python threads ``rounds`` times, ``interval`` seconds apart.

    Returns ``(samples, names, stacks)``: samples (n_threads, rounds) int32 Fortran-order stack ids,
    thread names, and the interned stack table (frames ``(filename, lineno, funcname)``, outermost
    first). Only threads alive in every round are listed; the calling thread is left out.
    """
    _idents, samples, names, stacks = sample_threads(rounds, interval)
    return samples, names, stacks


def sample_threads(rounds: int = 4, interval: float = 0.1, skip: tuple[str, ...] = ()
                   ) -> tuple[list[int], np.ndarray, list[str], list[Stack]]:
    """``sample_local`` plus the threads' idents; threads whose name starts with one of ``skip`` are left out."""
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if not isinstance(interval, (int, float)) or not math.isfinite(interval) or interval < 0:
        raise ValueError(f"interval must be a finite number of seconds >= 0, got {interval!r}")
    me = threading.get_ident()
    table: dict[Stack, int] = {}
    stacks: list[Stack] = []
    per_round: list[dict[int, int]] = []
    names: dict[int, str] = {}
    t0 = time.monotonic()
    for i in range(int(rounds)):
        if i:
            pause = t0 + i * interval - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        frames = sys._current_frames()
        ids: dict[int, int] = {}
        for ident, frame in frames.items():
            if ident == me:
                continue
            st = _walk(frame)
            sid = table.get(st)
            if sid is None:
                sid = table[st] = len(stacks)
                stacks.append(st)
            ids[ident] = sid
        del frames
        names.update((t.ident, t.name) for t in threading.enumerate() if t.ident is not None)
        if skip:
            ids = {t: v for t, v in ids.items() if not names.get(t, "").startswith(skip)}
        per_round.append(ids)
    alive = set(per_round[0])
    for d in per_round[1:]:
        alive &= set(d)
    idents = sorted(alive)
    samples = np.empty((len(idents), len(per_round)), dtype=np.int32, order="F")
    for j, d in enumerate(per_round):
        samples[:, j] = [d[t] for t in idents]
    return idents, samples, [names.get(t, f"thread-{t}") for t in idents], stacks
