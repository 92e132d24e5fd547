"""Verification set, comparison, fault location and timeouts ([Song 2013], Definitions 5-7, Algorithm 1).

Status codes (the paper's f): UNRECOVERABLE = 0, TRANSIENT = 1, CORRECT = 10.

Verification set V (Definition 7, Property 2)
--------------------------------------------
V has 2*(N-1) rows. Boundaries k = 0..N-2 are 0-based here, where the paper counts
i = 1..N-1. Row 2k is worker k's check result for row b_k, the first row of block k+1.
Row 2k+1 is worker k+1's checked result for the same row.

Comparison
----------
``compare`` works on the raw bytes of each row, so two rows are equal when their float
bit patterns are the same. A NaN equals a NaN with the same bit pattern, so NoData cells
that are NaN compare equal. But +0.0 != -0.0, and NaNs with different payloads differ.
The paper's Equal() asks for "completely equal" arrays. Bit equality is the strict form
of that and needs no tolerance, because both workers run the same code on the same
input rows.

Algorithm 1 step (2) as the paper states it (1-based, boundary i between workers i and i+1)
--------------------------------------------------------------------------------------------
for i = 1..N-1: if Equal(V[2i-1], V[2i]), workers i and i+1 are correct (f_i = 10).
Otherwise, look at boundary i+1, that is Equal(V[2(i+1)-1], V[2(i+1)]):
  * if equal there: "worker i+1 is correct and worker i is wrong", f_{i+1} = 10, f_i = 1;
  * if unequal there too: the prose says "worker i is wrong and worker i+1 is correct",
    but the assignment printed with it is f_i = 10, f_{i+1} = 1. Only the assignment is
    consistent: worker i+1 is the one worker common to both mismatching boundaries.
    This module follows the assignment (worker i+1 faulty). The brief describing this
    task reads the paper the same way.
Located faults get TRANSIENT (1), because the paper's step (2) only writes 1. An
UNRECOVERABLE status (0) comes only from the timeouts of step (1).

Corner cases the paper leaves open, and what this module decides
-------------------------------------------------------------------
1. Last boundary (k = N-2). There is no next boundary to look at. If the previous
   boundary k-1 also mismatched, worker k is common to both and is blamed (the
   "previous boundary's verdict"). If not (the previous boundary matched, or N = 2),
   one mismatch cannot say which side is wrong. An ``edge_checks`` entry for worker N-1
   settles it: this is the masters' redundant computation, since the paper has the masters
   recompute the data of workers 1 and N. Without one, both workers are marked
   TRANSIENT (both recomputed).
2. A lone mismatch at boundary k is fundamentally ambiguous. V reads the same whether
   worker k's check row or worker k+1's first row is wrong. The paper's rule blames the
   upper worker k, so a fault in worker k+1's first row alone is *detected but
   mislocated*. With ``ambiguous="both"`` a lone mismatch marks both workers (a
   superset, never a miss). The default ``"paper"`` keeps the paper's choice.
3. First and last workers are covered by one comparison each: worker 0 only by its check
   row, worker N-1 only by its first row. ``edge_checks[w] = ok`` (a master's
   recomputation of w's covered row compared with w's own) adds a verdict for worker w:
   False marks w TRANSIENT. True settles an undecidable boundary with no usable next
   boundary (case 1) in w's favour, and it never clears a flag set by another boundary.
4. Two adjacent faulty workers k, k+1, each wrong in both covered rows, give mismatches
   at k-1, k, k+1. Flags are *sticky* here: a CORRECT verdict from one boundary never
   clears a flag set by another. So both are flagged. In the paper's sequential loop a
   later f_i = 10 would overwrite the earlier f_i = 1 and lose worker k. Two faults at one
   boundary (both rows wrong) cancel out when they are bit-identical: ``locate`` (the paper's
   scheme, V alone) then sees nothing. That is not impossible: a correlated fault does it
   (see "referee rows" below, which the runtime uses for exactly this). Two faults whose
   mismatches are not adjacent are located independently.
5. Coverage gap (undetectable faults). Only the boundary rows are compared: worker k's
   check row (row r1) and its first row (row r0). A fault in any *interior* row of a
   block, r0 < r < r1, is not covered by any comparison and is not detected. N-ABFT
   detects faults that reach a boundary row, such as a crash, a wrong NoData setting or
   a systematically wrong kernel. It does not detect a local bit flip in the middle of a
   block. With N = 1 there are no boundaries and nothing is checked.
6. A worker with status 0 (timed out) on input keeps 0. Its rows in V are meaningless, so
   a boundary touching it gives no verdict on the other worker, and a "next boundary"
   touching it counts as absent (case 1).

Extension: referee rows (the masters' third copy of every compared row)
-----------------------------------------------------------------------
Case 4's assumption fails for *correlated* faults: two neighbours that corrupt their copies of
the row they share in the same way (a common-mode fault: the same wrong NoData value, the same
bad library, the same flipped bit of the same cell) leave V's two rows equal, the comparison
passes, and the output is silently wrong. No comparison of two copies can see that. The
runtime therefore has the masters compute a third copy of every compared row, R_k for boundary
k (N-1 rows per run; the paper's masters already recompute the data of workers 1 and N), and
:func:`referee_verdict` judges each worker's row against it:

* check_k == R_k and first_{k+1} == R_k: both correct;
* exactly one differs from R_k: that worker is flagged (no ambiguity left, so a lone mismatch
  no longer recomputes both neighbours);
* both differ from R_k and from each other: both flagged;
* both differ from R_k but equal each other: a *conflict*. Either both workers are wrong in the
  same bits or the master's copy is wrong; three copies cannot say which. Both workers are
  flagged and the conflict is reported, and the runtime recomputes R_k before it believes it
  (:mod:`planaria.abft.masterworker`): a conflict that survives a fresh referee row and a fresh
  computation by both workers is reported as undecidable and the run fails (exit 3), never
  an output that silently trusts either side.

A worker with status 0 is judged by nobody; its neighbour's row is judged against R_k alone.
Rows are compared bit for bit, as in ``compare``. So every fault in a compared row, in any
number of workers at once, is found on its worker, as long as the masters' copy is right
or is recomputed right. Interior rows stay uncovered (case 5).

Extension: block digests
------------------------
``block_digest`` hashes a block's output rows with blake2b (16 bytes, over dtype, shape
and the C-ordered bytes). A runtime can take the digest on the worker right after it
computes, and again on the master after the transfer or after reading the global output
file. A mismatch then shows corruption *in transfer or storage*. The cost is one pass over
the block's bytes on each side, about 1 GB/s per core, so about 0.5 s for a 540 MB DEM
spread over the workers, plus 16 bytes per message. It does **not** catch a wrong
computation, because the digest is taken of output that is already wrong. Covering
interior rows against computation faults needs recomputation, for example of a random
sample of rows: sampling s of a block's L rows costs s/L of the work and finds a fault
confined to one row with probability s/L.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planaria.abft.partition import Block

UNRECOVERABLE = 0
TRANSIENT = 1
CORRECT = 10
STATUSES = (UNRECOVERABLE, TRANSIENT, CORRECT)


def verification_set(outputs: Sequence[np.ndarray], blocks: Sequence[Block]) -> np.ndarray:
    """Build V from each worker's computed rows (``outputs[i]`` covers ``blocks[i].computed``)."""
    n = len(blocks)
    if len(outputs) != n:
        raise ValueError("one output per block")
    for out, b in zip(outputs, blocks, strict=True):
        lo, hi = b.computed
        if out.shape[0] != hi - lo:
            raise ValueError(f"worker {b.rank}: {out.shape[0]} rows, expected {hi - lo}")
    if n < 2:
        width = outputs[0].shape[1] if n else 0
        dtype = outputs[0].dtype if n else np.float64
        return np.empty((0, width), dtype=dtype)
    return verification_rows([o[-1] for o in outputs[:-1]], [o[0] for o in outputs[1:]])


def verification_rows(check_rows: Sequence[np.ndarray], first_rows: Sequence[np.ndarray]) -> np.ndarray:
    """V from the rows alone: ``check_rows[k]`` is worker k's check result (k = 0..N-2), ``first_rows[k]``
    worker k+1's first row (its checked result), so a runtime need not move whole blocks to verify."""
    if len(check_rows) != len(first_rows):
        raise ValueError("one check row and one first row per boundary")
    rows = []
    for chk, first in zip(check_rows, first_rows, strict=True):
        rows.append(chk)      # check result of worker k (row r1 of block k)
        rows.append(first)    # checked result of worker k+1 (its row r0)
    return np.stack(rows) if rows else np.empty((0, 0))


def _row_bytes(row: np.ndarray) -> bytes:
    return np.ascontiguousarray(row).tobytes()


def compare(v: np.ndarray) -> list[bool]:
    """Per boundary: are rows 2k and 2k+1 of V bit-identical? (NaN == NaN when the bit patterns match)."""
    if v.shape[0] % 2:
        raise ValueError("V must have an even number of rows")
    return [_row_bytes(v[2 * k]) == _row_bytes(v[2 * k + 1]) for k in range(v.shape[0] // 2)]


def locate(
    f: Sequence[int],
    v: np.ndarray,
    edge_checks: Mapping[int, bool] | None = None,
    ambiguous: str = "paper",
) -> list[int]:
    """Algorithm 1 step (2): per-worker statuses from V. See the module docstring for the rule.

    ``f`` gives the statuses from step (1) (timeouts). Its length is N, and a 0 stays 0.
    ``edge_checks`` maps a worker to the result of a master's redundant check of it.
    ``ambiguous`` is ``"paper"`` (a lone mismatch blames the upper worker) or ``"both"``.
    """
    if ambiguous not in ("paper", "both"):
        raise ValueError("ambiguous must be 'paper' or 'both'")
    n = len(f)
    if v.shape[0] != 2 * max(0, n - 1):
        raise ValueError(f"V has {v.shape[0]} rows, expected {2 * max(0, n - 1)}")
    edge = dict(edge_checks or {})
    eq = compare(v)
    dead = [s == UNRECOVERABLE for s in f]
    # usable[k]: boundary k gives a verdict (neither side timed out)
    usable = [not dead[k] and not dead[k + 1] for k in range(n - 1)]
    flagged: set[int] = set()

    for w, ok in edge.items():
        if not ok and 0 <= w < n and not dead[w]:
            flagged.add(w)

    for k in range(n - 1):
        if not usable[k] or eq[k]:
            continue
        nxt = k + 1 if k + 1 < n - 1 and usable[k + 1] else None
        if nxt is not None:
            if eq[nxt]:
                # paper: worker k+1 (1-based i+1) correct, worker k wrong
                if ambiguous == "both" and not (k > 0 and usable[k - 1] and not eq[k - 1]):
                    flagged.update((k, k + 1))
                else:
                    flagged.add(k)
            else:
                flagged.add(k + 1)  # common to boundaries k and k+1
            continue
        # no usable next boundary (the last boundary, or the next one touches a dead worker)
        if k > 0 and usable[k - 1] and not eq[k - 1]:
            flagged.add(k)  # previous boundary also mismatched: worker k is common
        elif k + 1 in edge:
            flagged.add(k if edge[k + 1] else k + 1)
        elif k in edge:
            flagged.add(k + 1 if edge[k] else k)
        else:
            flagged.update((k, k + 1))  # undecidable: recompute both

    out = []
    for w in range(n):
        if dead[w]:
            out.append(UNRECOVERABLE)
        elif w in flagged:
            out.append(TRANSIENT)
        else:
            out.append(CORRECT)
    return out


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return a is not None and b is not None and _row_bytes(a) == _row_bytes(b)


@dataclass(frozen=True)
class RefereeVerdict:
    """Per-worker statuses, and the boundaries where both workers agree with each other but not with the referee row."""

    f: list[int]
    conflicts: list[int]
    mismatches: list[int]   # boundaries whose two V rows differ (the paper's detection)


def referee_verdict(
    f: Sequence[int],
    check_rows: Sequence[np.ndarray | None],
    first_rows: Sequence[np.ndarray | None],
    referee: Sequence[np.ndarray],
) -> RefereeVerdict:
    """Judge every compared row against the masters' copy R_k (see "referee rows" in the module docstring).

    ``f`` holds the step-(1) statuses of the N workers (0 stays 0). ``check_rows[k]`` is worker k's
    check row, ``first_rows[k]`` worker k+1's first row and ``referee[k]`` the masters' row, k = 0..N-2.
    """
    n = len(f)
    if not (len(check_rows) == len(first_rows) == len(referee) == max(0, n - 1)):
        raise ValueError(f"need {max(0, n - 1)} check rows, first rows and referee rows")
    dead = [s == UNRECOVERABLE for s in f]
    flagged: set[int] = set()
    conflicts: list[int] = []
    mismatches: list[int] = []
    for k in range(n - 1):
        chk, fst, ref = check_rows[k], first_rows[k], referee[k]
        up_ok = dead[k] or _same(chk, ref)
        down_ok = dead[k + 1] or _same(fst, ref)
        if not dead[k] and not dead[k + 1] and not _same(chk, fst):
            mismatches.append(k)
        if not up_ok:
            flagged.add(k)
        if not down_ok:
            flagged.add(k + 1)
        if not up_ok and not down_ok and _same(chk, fst):
            conflicts.append(k)
    out = [UNRECOVERABLE if dead[w] else TRANSIENT if w in flagged else CORRECT for w in range(n)]
    return RefereeVerdict(out, conflicts, mismatches)


def covered_rows(blocks: Sequence[Block]) -> dict[int, list[int]]:
    """Output rows of each worker that some comparison covers (its check row and its first row, when compared)."""
    n = len(blocks)
    cov: dict[int, list[int]] = {}
    for b in blocks:
        rows = []
        if b.rank > 0:
            rows.append(b.r0)
        if b.check_row is not None and n > 1:
            rows.append(b.check_row)
        cov[b.rank] = rows
    return cov


def block_digest(rows: np.ndarray) -> bytes:
    """blake2b-128 of a block's rows: dtype, shape and C-ordered bytes. An extension, see the module docstring."""
    a = np.ascontiguousarray(rows)
    h = hashlib.blake2b(digest_size=16)
    h.update(a.dtype.str.encode())
    h.update(repr(a.shape).encode())
    h.update(a.tobytes())
    return h.digest()


def timeouts(
    start_times: Mapping[int, float | None],
    finish_times: Mapping[int, float | None],
    t_now: float,
    tmaxlat: float | Mapping[int, float],
    tmaxc: float | Mapping[int, float],
    t_dispatch: float = 0.0,
) -> dict[int, int]:
    """Algorithm 1 step (1): the status of every worker whose outcome is known at ``t_now``.

    A worker's start message is due by ``t_dispatch + TMaxLat(w)``. Its finish message is due by
    ``start + TMaxC(w) + TMaxLat(w)``. A message that is missing after its deadline, or that
    arrives after it, marks the worker UNRECOVERABLE. A finish on time marks it CORRECT, but
    that is provisional until V has been checked. Workers still within their deadlines are
    left out of the result.
    """
    def per(x: float | Mapping[int, float], w: int) -> float:
        return float(x[w]) if isinstance(x, Mapping) else float(x)

    out: dict[int, int] = {}
    for w in sorted(set(start_times) | set(finish_times)):
        lat, comp = per(tmaxlat, w), per(tmaxc, w)
        s = start_times.get(w)
        start_due = t_dispatch + lat
        if s is None:
            if t_now > start_due:
                out[w] = UNRECOVERABLE
            continue
        if s > start_due:
            out[w] = UNRECOVERABLE
            continue
        fin = finish_times.get(w)
        finish_due = s + comp + lat
        if fin is None:
            if t_now > finish_due:
                out[w] = UNRECOVERABLE
        elif fin > finish_due:
            out[w] = UNRECOVERABLE
        else:
            out[w] = CORRECT
    return out
