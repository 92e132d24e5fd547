"""N-ABFT on real MPI ranks ([Song 2013], sections 1-2): two masters verify N row-block workers.

Run with N+2 ranks::

    python -m planaria.abft.masterworker --kernel slope|cutdepth --dem IN --out OUT \
        [--mode abft|plain|duplicate] [--error-rate p --seed s] [--force KIND:WORKER] [--report FILE] [--bench]

usually under ``planaria run`` (``planaria abft`` does that). Rank 0 is the primary master,
rank 1 its replica, ranks 2..N+1 the workers; worker rank w starts with block w-2.

Protocol (object point-to-point only; every receive is an ``irecv`` polled with ``Test``
against a deadline, so a dead or hung peer never blocks a master):

* worker -> both masters: ``start`` (tag 11), ``result`` (tag 12), ``finish`` (tag 13). A
  worker reads only its slab (rows [in0, in1), :func:`planaria.terrain.read_dem_rows`:
  rasterio window / one read at the ``.npy`` header's offset), computes rows [r0, r1+1), writes its owned
  rows [r0, r1) as a ``.npy`` part file in ``--parts`` (default ``OUT.parts/``, one file per
  block and attempt) and sends only its first row, its check row, the part's name and its
  timings (``None`` with an error when the slab could not be read or the memory not
  allocated). The master writes the output from the verified parts one block at a time
  (:func:`planaria.terrain.write_dem_rows`), so no rank holds the raster whole (except for
  ``.npz`` output, which is assembled in memory).
* master -> worker: ``("compute", block, attempt)`` or ``("stop",)`` (tag 14). Workers
  poll both masters, so commands from the replica work after a takeover. A worker ends only
  on ``stop`` (or when both masters have failed), so the finishing master sends ``stop`` to
  every worker the communicator has not reported failed, *including* workers it excluded
  for a timeout (they may be alive: slow, or their answer lost), and the replica sends it
  too right after its ack, in case the primary dies before its own.
* primary -> replica (tag 16): every command it sends (so the replica knows owners and
  attempts), a heartbeat, and at the end ``("final", F, owners, digest)``; the replica
  answers ``("ack", agreed)`` (tag 17). The worker's answer to a command can reach the
  replica before the primary's mirror of that command (two senders, no order between
  them): messages for an attempt newer than a master knows are kept and taken when the
  mirror arrives, not dropped as stale. After a takeover the replica's commands skip one
  attempt number, since the primary may have sent attempt k+1 and died before mirroring
  it, and two commands must never share a task and attempt (the part file's name). At a
  takeover the replica also sends again, with the same attempt, every command whose ``start``
  it has not seen: a command the primary sent just before it died can be lost (a worker that
  has seen the primary fail stops receiving from it). A worker ignores a (task, attempt) it
  already has.

Timeouts (Algorithm 1 step 1): TMaxLat = 5 s for start/finish messages and between the
masters (a task queued behind another on the same worker has no start deadline while the
worker is busy with a started task, and is due TMaxLat after the worker's previous result); TMaxC = max(20 s, 2e-6 s per output cell x window^2 / 9) per block computation.
Both floors are generous because the ranks share few cores. On real ULFM a crashed worker
is noticed at once (the pending ``irecv`` raises ProcFailedError); the deadlines catch hung
workers.

Verification: V from the current result of every block (the paper's comparison), and a third
copy of every compared row computed by the masters themselves, the *referee* rows R_k (row r1
of block k, k = 0..N-2; computed while the workers compute, once per job; see
:func:`planaria.abft.verify.referee_verdict`). Each worker's first and check rows are judged
against R_k (:func:`abft_judge`), so a faulty row is found on its own worker, whatever its
neighbours did: two neighbours that corrupt their copies of the same row in the same bits (a
correlated fault, which a comparison of two copies passes) are both flagged. When both
workers agree and R_k does not (a *conflict*: both workers wrong alike, or the master wrong),
the master recomputes R_k once; if its fresh copy agrees with the workers, it is taken,
otherwise both workers recompute. A conflict at the same boundary in a second round (after
both workers and the master computed the row again) is undecidable: the report lists it
under ``undecidable``, no output is written and the exit status is 3. Recovery is
:func:`planaria.abft.taskrecovery.plan`, repeated until every block is CORRECT, or
``NoLiveWorkerError`` (exit status 3).

Modes (``--mode``; the same ranks, partition, protocol, part files and output writer):

* ``abft`` (default): the check row, the masters' referee rows and the verification above.
* ``plain``: the baseline the overhead is measured against. Workers compute only their
  owned rows [r0, r1) from [r0-h, r1+h); no check row, no referee rows, no comparison (timeouts
  and reported errors still lead to recovery; the report says ``verified: false``).
* ``duplicate``: redundant processes. Every block is computed twice, by worker b and by
  worker b+1 (mod N), as tasks b and N+b; each copy sends a
  :func:`planaria.abft.verify.block_digest` of its owned rows (taken on the worker) and the
  masters compare the two digests. A mismatch cannot say which copy is wrong, so both are
  recomputed in place. Needs N >= 2 for the copies to be on different workers (a
  reassigned copy may land next to its twin).

``--bench``: all ranks pass a barrier after start-up (imports, communicator), and rank 0
reports ``timings.wall``: from that barrier to the end of ``finish`` (output written, replica
acknowledged, workers stopped), plus per-task worker times (read, compute, write, digest).
It also reports ``timings.cpu``: every rank's process CPU time (``time.process_time``, all
threads) from the same barrier to the end of its work in the timed region: a worker's when it
receives ``stop``, the replica's when it sends its ``ack`` (the value rides on the ack), the
finishing master's when its wall timer stops. Waits sleep-poll, so this counts the work a mode
costs rather than its waiting. Workers send theirs (tag 18) to both masters after ``stop``; the finisher collects
them after its wall timer stopped, against a TMaxLat deadline, skipping ranks it knows dead:
``per_rank`` (None for a rank that did not answer), ``total``, ``workers_max`` and ``masters``
(each None when a rank it needs is missing).

``--dtype float32|float64``: the output's dtype (default: the DEM's float type, float32 for integer
DEMs); workers compute, compare and write their rows in it, and the masters' referee rows too.

Fault injection (``--error-rate p``: each worker with probability p from its own RNG
seeded by (seed, rank); ``--force KIND:WORKER``: worker WORKER (index 0..N-1, MPI rank
WORKER+2) for sure), on the worker's first computation only (a transient fault). The
report lists the injected faults (``injected``: kind, worker, rank, block, where):

* ``crash``: :func:`planaria.fail_stop` before computing.
* ``silent``: one bit flipped in a compared row (:func:`silent_site`): the same cell and bit
  (modulo the output dtype's width) in every silent worker of a run (a correlated fault); the check row or the first row,
  alternating with worker + seed, so that neighbours k, k+1 with k + seed even corrupt both
  copies of their shared row alike. Faults in interior rows are not covered by N-ABFT and
  are not injected.
* ``nodata``: the kernel runs with a wrong NoData value (None instead of the DEM's): visible
  only when NoData cells fall in the windows of covered rows.
* ``readerror``: OSError reading the slab; reported as f=0, the block is reassigned.
* ``memory``: MemoryError allocating the output; same.

``--inject`` plans of ``planaria run`` also work: workers call ``planaria.step(k)`` with
k = 0 (start), 1 (compute), 2 (send) and the masters k = 10 + round.

Known limits:

* Part files are scratch (not fsynced); the primary removes ``--parts`` at the end. A worker
  declared dead that is only slow may still write a part, but under its own block/attempt
  name, which the masters no longer read.
* The referee rows cost the masters N-1 rows of computation per run (and the replica as
  many, while it waits). A fault that corrupts the master's copy is caught as a conflict
  and recomputed; the masters' other data is not checked (next item).
* The replica takes over when it hears nothing from the primary for TMaxLat (heartbeats
  every 0.5 s while the primary waits for workers; while it writes the output it announces
  a grace of TMaxLat + 1 s per 50 MB of output and beats before every block). A primary
  busy for longer than that in one step would be taken over spuriously; both would then
  write the same bytes (atomic renames). After a takeover, the report holds the
  errors and recoveries the replica saw itself, not the primary's earlier rounds.
* The masters' own data (results, F) is not checked against memory corruption; only
  the final F/owners/state-digest cross-check between the masters. That digest covers what both
  masters received (owners, part names, first/check rows, block digests), not the parts'
  contents.

Rank 0 (or the replica when it took over) writes the output with
:func:`planaria.terrain.write_dem_rows` (atomic; GeoTIFF keeps its profile) and the JSON report.
The report's ``digest`` is the output's (:meth:`Master.output_digest`: blake2b-128 of the values in
the output's dtype, taken after the timed region), so byte-identical outputs have equal digests in any run.
Exit status: 0 every block verified, 3 no live worker left or an undecidable conflict, 2 usage error.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import planaria
from planaria import events
from planaria.abft.names import KINDS, MODES
from planaria.abft.partition import Block, partition
from planaria.abft.taskrecovery import NoLiveWorkerError, plan
from planaria.abft.verify import (CORRECT, TRANSIENT, UNRECOVERABLE, RefereeVerdict, block_digest,
                                  referee_verdict)
from planaria.comm.errors import FailureError
from planaria.terrain import DemInfo, dem_info, kernels, read_dem_rows, write_dem_rows
from planaria.terrain.dispatch import worth_loading
from planaria.terrain.window import output_dtype, slab_bounds

T_START, T_RESULT, T_FINISH, T_CMD, T_MASTER, T_ACK, T_CPU = 11, 12, 13, 14, 16, 17, 18
TMAXLAT = 5.0
POLL = 0.002


def tmaxc(block: Block, width: int, window: int) -> float:
    cells = (block.computed[1] - block.computed[0]) * width
    return max(20.0, 2e-6 * cells * window * window / 9.0)


def task_rows(block: Block, mode: str) -> tuple[int, int]:
    """Output rows a task computes: owned rows plus the check row in ``abft`` mode, owned rows only otherwise."""
    return block.computed if mode == "abft" else (block.r0, block.r1)


def initial_owner(task: int, n: int) -> int:
    """Rank that starts with ``task``: block b on rank b+2; in duplicate mode task N+b (block b's
    second copy) on the next worker, rank (b+1) mod N + 2."""
    return task + 2 if task < n else (task - n + 1) % n + 2


# ------------------------------------------------------------------------ worker

def compute_rows(dem_path: str, info: DemInfo, kernel: str, rows: tuple[int, int],
                 nodata: Any = "dem", dtype: np.dtype | str | None = None) -> tuple[np.ndarray, float, float]:
    """Rows ``[r0, r1)`` of ``kernel`` over the DEM file, reading only their slab; (rows, read s, compute s).
    ``dtype``: the output's (default: the DEM's float type, :func:`out_dtype`)."""
    fn, window = kernels[kernel]
    s0, s1 = slab_bounds(rows[0], rows[1], info.shape[0], window)
    t0 = time.perf_counter()
    slab = read_dem_rows(dem_path, s0, s1)
    t1 = time.perf_counter()
    nd = info.nodata if nodata == "dem" else nodata
    out = fn(slab.data, cell_size=info.cell_size, nodata=nd, rows=rows, dtype=out_dtype(info, dtype))
    return out, t1 - t0, time.perf_counter() - t1


def out_dtype(info: DemInfo, requested: np.dtype | str | None = None) -> np.dtype:
    """The output's dtype: ``requested``, else the DEM file's float type (float32 for integer DEMs)."""
    return output_dtype(info.stored_dtype or info.dtype, requested)


def choose_fault(rank: int, seed: int, rate: float, force: dict[int, str]) -> str | None:
    """The fault worker rank ``rank`` injects on its first computation: forced (keyed by rank), drawn at ``rate``, or None."""
    if rank in force:
        return force[rank]
    rng = np.random.default_rng([seed, rank])
    if rate > 0 and rng.random() < rate:
        return KINDS[int(rng.integers(len(KINDS)))]
    return None


def silent_site(worker: int, blocks: list[Block], seed: int, width: int, mode: str, bits: int = 64) -> dict[str, Any]:
    """Where a ``silent`` fault of ``worker`` flips a bit: the copy (``check`` or ``first`` row), its absolute
    and local row, the column and the bit.

    The column and the bit come from the seed alone, so every silent worker of a run flips the same
    cell and bit: a correlated fault. In ``abft`` mode a worker with both a first row that is compared
    (worker > 0) and a check row (worker < N-1) takes the check row when worker + seed is even, the
    first row otherwise; so neighbours k, k+1 with k + seed even both corrupt their copy of row r1 of
    block k in the same bits, the case a comparison of two copies cannot see. In the other modes the
    first owned row is hit."""
    blk = blocks[worker]
    rng = np.random.default_rng([seed, 1_000_003])
    col, bit = int(rng.integers(width)), int(rng.integers(64)) % bits  # ``bits``: of the output's dtype
    copy = "first"
    if mode == "abft" and blk.check_row is not None and (worker == 0 or (worker + seed) % 2 == 0):
        copy = "check"
    lo, hi = task_rows(blk, mode)
    row = hi - 1 if copy == "check" else lo
    return {"copy": copy, "row": row, "local_row": row - lo, "col": col, "bit": bit}


def injected_faults(args: argparse.Namespace, blocks: list[Block], width: int, bits: int = 64) -> list[dict[str, Any]]:
    """The faults this run's workers inject (the plan is deterministic in seed, rate and --force), for the report."""
    out = []
    for w, blk in enumerate(blocks):
        kind = choose_fault(w + 2, args.seed, args.error_rate, args.force)
        if kind is None:
            continue
        where: dict[str, Any]
        if kind == "silent":
            where = silent_site(w, blocks, args.seed, width, args.mode, bits)
            where.pop("local_row")
        elif kind == "crash":
            where = {"phase": "before computing its first task"}
        elif kind == "nodata":
            where = {"phase": "first task's kernel runs with a wrong NoData value", "rows": list(task_rows(blk, args.mode))}
        elif kind == "readerror":
            where = {"phase": "reading the first task's slab"}
        else:
            where = {"phase": "allocating the first task's output"}
        out.append({"kind": kind, "worker": w, "rank": w + 2, "block": w, "where": where})
    return out


def flip_bit(rows: np.ndarray, row: int, col: int, bit: int) -> None:
    """Silent wrong result: flip bit ``bit`` (modulo the dtype's width) of ``rows[row, col]`` in place."""
    uints: dict[int, type[np.unsignedinteger]] = {2: np.uint16, 4: np.uint32, 8: np.uint64}
    u = uints[rows.dtype.itemsize]
    v = rows[row].view(u)
    v[col] ^= u(1) << u(bit % (8 * rows.dtype.itemsize))


def _send(comm: Any, obj: Any, dest: int, tag: int, keep: list) -> bool:
    try:
        keep.append(comm.isend(obj, dest, tag))
        return True
    except FailureError:
        return False


def run_task(args: argparse.Namespace, info: DemInfo, blocks: list[Block], task: int, attempt: int,
             rank: int, fault: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """One task on a worker: read the slab, compute, write the part; the result message's payload."""
    n = len(blocks)
    blk = blocks[task % n]
    rows_wanted = task_rows(blk, args.mode)
    try:
        if fault == "crash":
            planaria.fail_stop(f"abft injected crash (worker {rank - 2})")
        if fault == "readerror":
            raise OSError(f"injected read error on {args.dem} rows {blk.in0}..{blk.in1}")
        if fault == "memory":
            raise MemoryError("injected allocation failure")
        wrong_nd = (None if info.nodata is not None else -1.0)
        rows, t_read, t_comp = compute_rows(args.dem, info, args.kernel, rows_wanted,
                                            nodata=wrong_nd if fault == "nodata" else "dem", dtype=args.dtype)
        planaria.watch("abft_rows", rows)
        if fault == "silent":
            site = silent_site(task % n, blocks, args.seed, rows.shape[1], args.mode, 8 * rows.dtype.itemsize)
            flip_bit(rows, site["local_row"], site["col"], site["bit"])
        t0 = time.perf_counter()
        owned = rows[: blk.local_size]
        digest = block_digest(owned) if args.mode == "duplicate" else None
        t1 = time.perf_counter()
        parts = Path(args.parts)
        parts.mkdir(parents=True, exist_ok=True)
        part = parts / f"t{task}-a{attempt}-w{rank}.npy"
        with open(part, "wb") as fh:
            np.save(fh, owned, allow_pickle=False)
        t2 = time.perf_counter()
    except (OSError, MemoryError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    check = rows[-1].copy() if (args.mode == "abft" and blk.check_row is not None) else None
    return ({"part": str(part), "first": rows[0].copy(), "check": check, "digest": digest,
             "times": {"read": t_read, "compute": t_comp, "digest": t1 - t0, "write": t2 - t1}}, None)


def worker(comm: Any, args: argparse.Namespace, info: DemInfo, blocks: list[Block]) -> int:
    cpu0 = time.process_time()  # right after the --bench barrier, like the masters' wall timer
    rank = comm.Get_rank()
    n = len(blocks)
    fault = choose_fault(rank, args.seed, args.error_rate, args.force)
    masters = {0, 1}
    keep: list = []
    ntask = 2 * n if args.mode == "duplicate" else n
    queue: list[tuple[int, int]] = [(t, 0) for t in range(ntask) if initial_owner(t, n) == rank]
    seen = set(queue)  # (task, attempt) queued or run: a master that took over may send one again
    first = True
    recvs = {m: comm.irecv_matched(source=m, tag=T_CMD) for m in masters}
    while True:
        while queue:
            task, attempt = queue.pop(0)
            planaria.step(0)
            for m in sorted(masters):
                _send(comm, ("start", rank, task, attempt), m, T_START, keep)
            planaria.step(1)
            payload, err = run_task(args, info, blocks, task, attempt, rank, fault if first else None)
            first = False
            planaria.step(2)
            for m in sorted(masters):
                _send(comm, ("result", rank, task, attempt, payload, err), m, T_RESULT, keep)
                _send(comm, ("finish", rank, task, attempt), m, T_FINISH, keep)
        # wait for a command from either master
        if not masters:
            return 0
        for m in list(masters):
            try:
                done = recvs[m].Test()
            except FailureError:
                masters.discard(m)
                continue
            if done:
                cmd = recvs[m].wait()
                if cmd[0] == "stop":
                    if args.bench:  # this worker's part of the timed region ends here
                        cpu = time.process_time() - cpu0
                        for m2 in sorted(masters):  # both masters may send stop; the finisher collects
                            _send(comm, cpu, m2, T_CPU, keep)
                    return 0
                if (cmd[1], cmd[2]) not in seen:  # a repeat was already answered to both masters
                    seen.add((cmd[1], cmd[2]))
                    queue.append((cmd[1], cmd[2]))
                recvs[m] = comm.irecv_matched(source=m, tag=T_CMD)
                break
        else:
            time.sleep(POLL)


# ------------------------------------------------------------------------ verification

def abft_judge(fin: list[int], firsts: list[np.ndarray | None], checks: list[np.ndarray | None],
               referee: Mapping[int, np.ndarray] | Callable[[int], np.ndarray]) -> RefereeVerdict:
    """Algorithm 1 step (2) on the rows the workers sent, with the masters' referee rows.

    ``fin`` holds the step-(1) statuses; a worker with status 0 gives no rows. ``referee`` maps
    boundary k (k = 0..N-2) to the masters' own copy of row r1 of block k, or is a function that
    computes it. Every compared row is judged against it
    (:func:`planaria.abft.verify.referee_verdict`): a fault in a compared row is found on its
    worker whatever the other workers did, including two neighbours wrong in the same bits
    (reported as a conflict)."""
    n = len(fin)
    get = referee if callable(referee) else referee.__getitem__
    alive = [fin[w] != UNRECOVERABLE for w in range(n)]
    chk = [checks[k] if alive[k] else None for k in range(n - 1)]
    fst = [firsts[k + 1] if alive[k + 1] else None for k in range(n - 1)]
    refs = [get(k) for k in range(n - 1)]
    return referee_verdict(fin, chk, fst, refs)


def abft_verdict(fin: list[int], firsts: list[np.ndarray | None], checks: list[np.ndarray | None],
                 referee: Mapping[int, np.ndarray] | Callable[[int], np.ndarray]) -> list[int]:
    """Per-worker statuses of :func:`abft_judge` (CORRECT, TRANSIENT, or UNRECOVERABLE for a worker that gave no rows)."""
    return abft_judge(fin, firsts, checks, referee).f


MAX_COLS = 64      # differing columns listed per compared row in the report (``n`` counts them all)


def differing_columns(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Columns where two rows of the same dtype differ bit for bit (NaN payloads and signed zeros
    included, as the comparison of the verification sees them)."""
    x = np.ascontiguousarray(a).view(np.uint8).reshape(a.size, -1)
    y = np.ascontiguousarray(b).view(np.uint8).reshape(b.size, -1)
    return np.flatnonzero((x != y).any(axis=1))


def duplicate_verdict(fin: list[int], digests: list[bytes | None]) -> list[int]:
    """Redundant processes: tasks b and N+b are the two copies of block b; different digests mark
    both TRANSIENT (two copies cannot say which is wrong). A copy alone is accepted."""
    n = len(fin) // 2
    f = list(fin)
    for b in range(n):
        a, c = b, n + b
        if fin[a] != UNRECOVERABLE and fin[c] != UNRECOVERABLE and digests[a] != digests[c]:
            f[a] = f[c] = TRANSIENT
    return f


# ------------------------------------------------------------------------ masters

class Master:
    def __init__(self, comm: Any, args: argparse.Namespace, info: DemInfo, blocks: list[Block], role: str) -> None:
        self.comm, self.args, self.info, self.blocks, self.role = comm, args, info, blocks, role
        self.mode = args.mode
        self.n = len(blocks)
        self.ntask = 2 * self.n if self.mode == "duplicate" else self.n
        self.width = info.shape[1]
        self.window = kernels[args.kernel][1]
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.assign = {t: initial_owner(t, self.n) for t in range(self.ntask)}
        self.attempt = {t: 0 for t in range(self.ntask)}
        self.issued = {t: time.monotonic() for t in range(self.ntask)}
        self.started: dict[int, float] = {}
        self.results: dict[int, tuple[dict[str, Any] | None, str | None]] = {}
        self.dead: set[int] = set()    # workers given up on: failed, or silent past a deadline
        self.failed: set[int] = set()  # the subset the communicator reported failed (not sent ``stop``)
        self.excluded: set[int] = set()
        # worker messages for an attempt newer than this master knows of, by (task, attempt): the
        # passive replica hears of a command through the primary's mirror ("cmd"), which may arrive
        # after the worker already answered it
        self.early: dict[tuple[int, int], list[tuple]] = {}
        self.skip: set[int] = set()    # tasks whose next command skips an attempt number (after a takeover)
        self.tries: dict[int, int] = {}
        self.keep: list = []
        self.recvs: dict[tuple[int, int], Any] = {}
        self.report: dict[str, Any] = {"errors": [], "located": [], "recoveries": [], "rounds": 0, "mode": self.mode,
                                       "timings": {"compute": 0.0, "verification": 0.0, "recovery": 0.0}}
        self.report["timings"]["referee_rows"] = 0.0
        self.report["injected"] = injected_faults(args, blocks, self.width, 8 * out_dtype(info, args.dtype).itemsize)
        self.report["conflicts"] = []
        self.referee: dict[int, np.ndarray] = {}  # boundary -> the masters' copy of its compared row
        self.refreshed: set[int] = set()          # boundaries whose referee row was recomputed after a conflict
        self.conflict_rounds: dict[int, int] = {}  # boundary -> rounds it was in conflict
        self.last_conflicts: list[int] = []
        self.other_dead = False
        self.last_heard = time.monotonic()
        self.grace = TMAXLAT  # silence allowed from the primary (longer while it writes the output)
        self.final_from_primary: Any = None
        self.replica_cpu: float | None = None  # the replica's CPU seconds, sent with its ack (--bench)
        self.finished = False  # set when this master wrote the output and the report

    def _referee_row(self, k: int, fresh: bool = False) -> np.ndarray:
        """The masters' own copy of boundary ``k``'s compared row (row r1 of block k), computed once, or again when ``fresh``."""
        if fresh or k not in self.referee:
            t = time.perf_counter()
            r = self.blocks[k].r1
            row = compute_rows(self.args.dem, self.info, self.args.kernel, (r, r + 1), dtype=self.args.dtype)[0][0]
            self.report["timings"]["referee_rows"] += time.perf_counter() - t
            if fresh:
                return row
            self.referee[k] = row
        return self.referee[k]

    def prefetch_referee(self) -> None:
        """Compute the next missing referee row (one per call), while the workers compute."""
        if self.mode == "abft":
            for k in range(self.n - 1):
                if k not in self.referee:
                    self._referee_row(k)
                    return

    def _recv(self, src: int, tag: int) -> Any:
        key = (src, tag)
        if key not in self.recvs:
            self.recvs[key] = self.comm.irecv_matched(source=src, tag=tag)
        r = self.recvs[key]
        if r.Test():
            del self.recvs[key]
            return r.wait()
        return None

    def poll_workers(self) -> None:
        """Take every message that has arrived; mark failed workers dead."""
        for w in range(2, self.n + 2):
            if w in self.dead:
                continue
            try:
                for tag in (T_START, T_RESULT, T_FINISH):
                    while (msg := self._recv(w, tag)) is not None:
                        self._take(msg)
            except FailureError:
                self.dead.add(w)
                self.failed.add(w)
                self.recvs = {k: v for k, v in self.recvs.items() if k[0] != w}

    def _take(self, msg: tuple) -> None:
        kind, w, t = msg[0], msg[1], msg[2]
        if self.assign.get(t) != w or self.attempt.get(t) != msg[3]:
            if t in self.attempt and msg[3] > self.attempt[t]:
                # ahead of this master's view (the replica before the primary's "cmd" for it):
                # kept, and taken when that command arrives
                self.early.setdefault((t, msg[3]), []).append(msg)
            return  # stale
        if kind == "start":
            self.started[t] = time.monotonic()
        elif kind == "result":
            self.results[t] = (msg[4], msg[5])
            # the worker's next queued task (duplicate mode: two per worker) starts only now
            now = time.monotonic()
            for t2, w2 in self.assign.items():
                if w2 == w and t2 not in self.results and t2 not in self.started:
                    self.issued[t2] = now

    def pending(self) -> list[int]:
        return [t for t in range(self.ntask) if t not in self.results]

    def wait_round(self) -> dict[int, int]:
        """Step (1): collect until every task has a result or a timeout; f0 per task."""
        t0 = time.monotonic()
        f0: dict[int, int] = {}
        while True:
            self.prefetch_referee()
            # what the workers sent is read after the referee row, which may take a while, and before
            # any task is judged late: a message that came meanwhile counts
            self.poll_workers()
            self.master_link()
            if self.role == "replica-passive":
                return {}
            now = time.monotonic()
            # a worker busy with a started task does not start its next queued one yet
            busy = {self.assign[t] for t in self.started if t not in self.results}
            for t in self.pending():
                if t in f0:
                    continue
                w = self.assign[t]
                st = self.started.get(t)
                late = (st is None and w not in busy and now > self.issued[t] + TMAXLAT) or (
                    st is not None and now > st + tmaxc(self.blocks[t % self.n], self.width, self.window) + TMAXLAT)
                if w in self.dead or late:
                    f0[t] = UNRECOVERABLE
                    if late:
                        self.dead.add(w)
            if all(t in f0 or t in self.results for t in range(self.ntask)):
                break
            time.sleep(POLL)
        self.report["timings"]["compute"] += time.monotonic() - t0
        for t, (payload, _err) in self.results.items():
            if payload is None:
                f0[t] = UNRECOVERABLE
        return f0

    def _payload(self, t: int) -> dict[str, Any] | None:
        return self.results.get(t, (None, None))[0]

    def _part(self, b: int) -> str:
        """The part file of block ``b``'s verified result (every block has one once the run is ``ok``)."""
        p = self._payload(b)
        assert p is not None, f"block {b} has no result"
        return p["part"]

    def verify(self, f0: dict[int, int]) -> list[int]:
        t0 = time.perf_counter()
        fin = []
        for t in range(self.ntask):
            p = self._payload(t)
            ok = f0.get(t) != UNRECOVERABLE and p is not None and p["first"].shape == (self.width,)
            fin.append(CORRECT if ok else UNRECOVERABLE)
        if self.mode == "abft":
            pl = [self._payload(t) for t in range(self.n)]
            firsts = [None if p is None else p["first"] for p in pl]
            checks = [None if p is None else p["check"] for p in pl]
            judged = abft_judge(fin, firsts, checks, self._referee_row)
            changed = False
            for k in judged.conflicts:
                # both workers agree and the masters' copy does not: recompute that copy once before believing it
                if k not in self.refreshed:
                    self.refreshed.add(k)
                    row = self._referee_row(k, fresh=True)
                    if row.tobytes() != self.referee[k].tobytes():
                        self.referee[k] = row
                        changed = True
            if changed:
                judged = abft_judge(fin, firsts, checks, self._referee_row)
            self.last_conflicts = judged.conflicts
            f = judged.f
        elif self.mode == "duplicate":
            f = duplicate_verdict(fin, [(p or {}).get("digest") for p in (self._payload(t) for t in range(self.ntask))])
        else:
            f = fin
        self.report["timings"]["verification"] += time.perf_counter() - t0
        return f

    def mismatch_detail(self, t: int) -> str:
        """Why task ``t`` was flagged TRANSIENT: which of its compared rows differs from the masters' copy."""
        if self.mode != "abft":
            return "mismatch" if self.mode == "plain" else "copies differ"
        p = self._payload(t) or {}
        what = []
        if t > 0 and t - 1 in self.referee and p.get("first") is not None \
                and p["first"].tobytes() != self.referee[t - 1].tobytes():
            what.append(f"first row {self.blocks[t].r0}")
        if t < self.n - 1 and t in self.referee and p.get("check") is not None \
                and p["check"].tobytes() != self.referee[t].tobytes():
            what.append(f"check row {self.blocks[t].r1}")
        return ("mismatch: " + " and ".join(what) + " differ from the masters' copy") if what else "mismatch"

    def mismatch_cells(self, t: int) -> list[dict[str, Any]]:
        """Where task ``t``'s compared rows differ from the masters' copy: one entry per row
        (``copy`` first or check, absolute ``row``, the differing ``cols``, at most MAX_COLS, and
        their count ``n``), for the report's ``errors`` and ``planaria abft --plot``."""
        if self.mode != "abft":
            return []
        p = self._payload(t) or {}
        out = []
        for copy, k, row in (("first", t - 1, self.blocks[t].r0), ("check", t, self.blocks[t].r1)):
            mine, ref = p.get(copy), self.referee.get(k)
            if mine is None or ref is None or mine.shape != ref.shape or mine.tobytes() == ref.tobytes():
                continue
            cols = differing_columns(mine, ref)
            out.append({"copy": copy, "row": row, "cols": cols[:MAX_COLS].tolist(), "n": int(cols.size)})
        return out

    def command(self, t: int, w: int) -> None:
        self.assign[t] = w
        # after a takeover, skip one attempt number: the primary may have sent attempt + 1 to a
        # worker and died before mirroring it, and two commands must never share (task, attempt)
        # (the same part file name)
        self.attempt[t] += 2 if t in self.skip else 1
        self.skip.discard(t)
        self._forget_early(t)
        self.issued[t] = time.monotonic()
        self.started.pop(t, None)
        self.results.pop(t, None)
        _send(self.comm, ("compute", t, self.attempt[t]), w, T_CMD, self.keep)
        if self.role == "primary" and not self.other_dead:
            _send(self.comm, ("cmd", t, w, self.attempt[t]), 1, T_MASTER, self.keep)

    def _forget_early(self, t: int) -> None:
        """Drop kept messages of task ``t`` for attempts up to its current one (superseded)."""
        for key in [k for k in self.early if k[0] == t and k[1] <= self.attempt[t]]:
            del self.early[key]

    def master_link(self) -> None:
        """Primary: heartbeat to the replica. Passive replica: follow the primary, take over when it is silent."""
        now = time.monotonic()
        if self.role == "primary":
            if not self.other_dead and now - self.last_heard > 0.5:
                self.other_dead |= not _send(self.comm, ("beat",), 1, T_MASTER, self.keep)
                self.last_heard = now
            return
        if self.role != "replica-passive":
            return
        try:
            while (msg := self._recv(0, T_MASTER)) is not None:
                self.last_heard = time.monotonic()
                if msg[0] == "cmd":
                    _, t, w, att = msg
                    self.assign[t], self.attempt[t] = w, att
                    self.issued[t] = time.monotonic()
                    self.started.pop(t, None)
                    self.results.pop(t, None)
                    # the worker may have answered before this mirror arrived: take what it sent
                    for early in self.early.pop((t, att), []):
                        self._take(early)
                    self._forget_early(t)
                elif msg[0] == "final":
                    self.final_from_primary = msg
                    return
                if msg[0] == "writing":
                    self.grace = msg[1]  # kept to the end: the write (and its fsync) is the last step
        except FailureError:
            self.last_heard = -1e9
        if time.monotonic() - self.last_heard > max(TMAXLAT, self.grace):
            self.other_dead = True
            self.role = "replica"
            self.report["takeover"] = True
            self.skip = set(range(self.ntask))
            now = time.monotonic()
            for t in self.pending():
                self.issued[t] = now  # fresh deadlines from the takeover
                w = self.assign[t]
                if t not in self.started and w not in self.dead:
                    # the primary's command may have been lost with it (a worker that saw the
                    # primary fail no longer receives from it): send it again, same attempt; a
                    # worker ignores a command it already has
                    _send(self.comm, ("compute", t, self.attempt[t]), w, T_CMD, self.keep)

    def run(self) -> int:
        rnd = 0
        while True:
            planaria.step(10 + rnd)
            f0 = self.wait_round()
            if self.role == "replica-passive":
                if self.final_from_primary is not None:
                    return self.acknowledge()
                self.prefetch_referee()
                time.sleep(POLL)
                continue
            f = self.verify(f0)
            self.report["rounds"] = rnd + 1
            for k in self.last_conflicts:
                self.conflict_rounds[k] = self.conflict_rounds.get(k, 0) + 1
                self.report["conflicts"].append({"round": rnd, "boundary": k, "row": self.blocks[k].r1,
                                                 "workers": [self.assign[k], self.assign[k + 1]]})
            stuck = sorted(k for k, c in self.conflict_rounds.items() if c >= 2 and k in self.last_conflicts)
            if stuck:
                self.report["undecidable"] = [{"boundary": k, "row": self.blocks[k].r1, "blocks": [k, k + 1]}
                                              for k in stuck]
                self.report["fatal"] = (
                    "undecidable: " + "; ".join(
                        f"blocks {k} and {k + 1} computed row {self.blocks[k].r1} alike twice, and the masters' "
                        f"copy (computed twice) differs from both" for k in stuck)
                    + "; the comparison cannot tell which is right, so no output is written")
                self.finish(ok=False)
                return 3
            bad = [t for t in range(self.ntask) if f[t] != CORRECT]
            # a task that verifies clears its in-place retry (recovery.mark_verified)
            self.tries = {t: (0 if f[t] == CORRECT else k) for t, k in self.tries.items()}
            for t in bad:
                err = self.results.get(t, (None, None))[1]
                self.report["errors"].append({"round": rnd, "block": t, "worker": self.assign[t],
                                              "status": f[t], "error": err or ("timeout/crash" if f[t] == 0 else self.mismatch_detail(t))})
                if f[t] == TRANSIENT:
                    self.report["located"].append(self.assign[t])
                    self.report["errors"][-1]["cells"] = self.mismatch_cells(t)
            if not bad:
                break
            t0 = time.perf_counter()
            alive = [w for w in range(2, self.n + 2) if w not in self.dead]
            try:
                p = plan(f, self.assign, alive, self.excluded, self.tries)
            except NoLiveWorkerError as exc:
                self.report["fatal"] = str(exc)
                self.finish(ok=False)
                return 3
            self.excluded = p.excluded
            for a in p.actions:
                if a.kind == "recompute":
                    self.command(a.block, a.worker)
                if a.kind != "verify":
                    self.report["recoveries"].append({"round": rnd, "action": a.kind, "block": a.block,
                                                      "worker": a.worker, "source": a.source})
            self.tries = dict(p.attempts)
            self.report["timings"]["recovery"] += time.perf_counter() - t0
            rnd += 1
        return self.finish(ok=True)

    def _tell_replica(self, msg: tuple) -> None:
        if self.role == "primary" and not self.other_dead:
            self.other_dead |= not _send(self.comm, msg, 1, T_MASTER, self.keep)
            self.last_heard = time.monotonic()

    def state_digest(self) -> str:
        """What both masters received (owners, part names, first/check rows, block digests), for their cross-check."""
        h = hashlib.blake2b(digest_size=16)
        for t in range(self.ntask):
            p = self._payload(t)
            if p is None:
                raise KeyError(t)
            h.update(repr((t, self.assign[t], p["part"], p["digest"])).encode())
            for key in ("first", "check"):
                if p[key] is not None:
                    h.update(np.ascontiguousarray(p[key]).tobytes())
        return h.hexdigest()

    def output_digest(self) -> str:
        """blake2b-128 of the output's values: dtype, shape, then the rows in order (the verified parts),
        so byte-identical outputs give equal digests whatever the workers, attempts or part names."""
        dt = out_dtype(self.info, self.args.dtype)
        h = hashlib.blake2b(digest_size=16)
        h.update(dt.str.encode())
        h.update(repr(tuple(self.info.shape)).encode())
        for b in range(self.n):
            part = np.load(self._part(b), mmap_mode="r")
            h.update(np.ascontiguousarray(part, dtype=dt).data)
        return h.hexdigest()

    def write_output(self) -> None:
        """Stream the verified parts of blocks 0..N-1 into the output, one block at a time.

        The primary first tells the replica how long the write may keep it silent (a grace of
        TMaxLat + 1 s per 50 MB, then a heartbeat before every block), so that writing a large
        raster does not look like a dead primary."""
        dt = out_dtype(self.info, self.args.dtype)
        nbytes = self.info.shape[0] * self.info.shape[1] * dt.itemsize
        self._tell_replica(("writing", TMAXLAT + nbytes / 50e6))

        def blocks() -> Iterator[tuple[int, np.ndarray]]:
            for b, blk in enumerate(self.blocks):
                self._tell_replica(("beat",))
                part = np.load(self._part(b), mmap_mode="r")
                yield blk.r0, part
        write_dem_rows(self.args.out, self.info.shape, dt, blocks(), nodata=self.info.nodata,
                       cell_size=self.info.cell_size, profile=self.info.profile)

    def finish(self, ok: bool) -> int:
        self.finished = True
        self.report.update(ok=ok, finisher=self.role, final_owners={str(b): w for b, w in self.assign.items()},
                           dead_workers=sorted(self.dead), excluded=sorted(self.excluded))
        digest = None
        self.report["digest"] = None
        if ok:
            t0 = time.perf_counter()
            self.write_output()
            self.report["timings"]["write_output"] = time.perf_counter() - t0
            digest = self.state_digest()
        if self.role == "primary" and not self.other_dead:
            t0 = time.perf_counter()
            _send(self.comm, ("final", ok, dict(self.assign), digest), 1, T_MASTER, self.keep)
            deadline = time.monotonic() + TMAXLAT
            agreed = None
            try:
                while time.monotonic() < deadline:
                    msg = self._recv(1, T_ACK)
                    if msg is not None:
                        agreed = msg[1]
                        self.replica_cpu = msg[2]
                        break
                    time.sleep(POLL)
            except FailureError:
                pass
            self.report["replica_agreed"] = agreed
            self.report["timings"]["cross_check"] = time.perf_counter() - t0
        self.stop_workers()
        self.report["timings"]["wall"] = time.perf_counter() - self.t0
        cpu = time.process_time() - self.cpu0
        if self.args.bench:
            self.report["timings"]["cpu"] = self.gather_cpu(cpu)
        if ok:  # after the timed region: a pass over the output's values
            self.report["digest"] = self.output_digest()
        self.report["worker_times"] = [{"block": t, "worker": self.assign[t], **(self._payload(t) or {}).get("times", {})}
                                       for t in range(self.ntask)]
        if ok and self.args.parts_default:
            shutil.rmtree(self.args.parts, ignore_errors=True)
        self.write_report()
        return 0 if ok else 3

    def acknowledge(self) -> int:
        """Replica: cross-check the primary's final F, owners and digest with its own copies."""
        _, ok, owners, digest = self.final_from_primary
        agreed = owners == self.assign
        if ok and agreed:
            try:
                f = self.verify({})
                agreed = all(s == CORRECT for s in f) and self.state_digest() == digest
            except Exception:  # noqa: BLE001 - a missing result means disagreement
                agreed = False
        cpu = time.process_time() - self.cpu0 if self.args.bench else None
        _send(self.comm, ("ack", agreed, cpu), 0, T_ACK, self.keep)
        # the primary stops the workers after this ack; stop them here too, in case it dies
        # first (a worker waits for a command from any master that has not failed)
        self.stop_workers()
        return 0

    def gather_cpu(self, mine: float) -> dict[str, Any]:
        """Per-rank CPU seconds of the timed region, collected after it under a TMaxLat deadline (a dead rank cannot hang it)."""
        size = self.n + 2
        per_rank: list[float | None] = [None] * size
        per_rank[self.comm.Get_rank()] = mine
        if self.role == "primary":
            per_rank[1] = self.replica_cpu
        waiting = {w for w in range(2, size) if w not in self.dead}
        deadline = time.monotonic() + TMAXLAT
        while waiting and time.monotonic() < deadline:
            for w in sorted(waiting):
                try:
                    msg = self._recv(w, T_CPU)
                except FailureError:
                    waiting.discard(w)
                    continue
                if msg is not None:
                    per_rank[w] = float(msg)
                    waiting.discard(w)
            if waiting:
                time.sleep(POLL)
        known = [c for c in per_rank if c is not None]
        workers = [c for c in per_rank[2:] if c is not None]
        m0, m1 = per_rank[0], per_rank[1]
        return {"per_rank": per_rank, "total": sum(known) if len(known) == size else None,
                "workers_max": max(workers) if len(workers) == self.n else None,
                "masters": m0 + m1 if m0 is not None and m1 is not None else None}

    def stop_workers(self) -> None:
        """Send ``stop`` to every worker the communicator has not reported failed, excluded ones included:
        a worker given up on for silence may be alive (slow, or its answer was lost) and waits for a
        command; without ``stop`` it would never end."""
        for w in range(2, self.n + 2):
            if w not in self.failed:
                _send(self.comm, ("stop",), w, T_CMD, self.keep)

    def write_report(self) -> None:
        self.report.update(kernel=self.args.kernel, workers=self.n, shape=list(self.info.shape),
                           blocks=[[b.r0, b.r1] for b in self.blocks],
                           overhead={"verification_rows": 2 * max(0, self.n - 1) if self.mode == "abft" else 0,
                                     "width": self.width, "referee_rows": len(self.referee),
                                     "referee_rows_recomputed": sorted(self.refreshed),
                                     "tasks": self.ntask},
                           verified=self.mode != "plain" and (self.mode != "abft" or self.n > 1))
        if self.args.report:
            tmp = self.args.report + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(self.report, fh, indent=2, default=str)
            os.replace(tmp, self.args.report)


# ------------------------------------------------------------------------ main

def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="planaria.abft.masterworker")
    ap.add_argument("--kernel", choices=sorted(kernels), required=True)
    ap.add_argument("--dem", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=MODES, default="abft")
    ap.add_argument("--parts", default=None, help="directory of the workers' part files (default OUT.parts)")
    ap.add_argument("--error-rate", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="append", default=[],
                    help="KIND:WORKER: worker index 0..N-1 (MPI rank WORKER+2) injects KIND on its first task")
    ap.add_argument("--report", default=None)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--bench", action="store_true", help="barrier after start-up; timings.wall from it")
    ap.add_argument("--dtype", choices=("float32", "float64"), default=None,
                    help="output dtype (default: the DEM's float type; float32 for integer DEMs)")
    args = ap.parse_args(argv)
    force = {}
    for item in args.force:
        kind, _, worker = item.partition(":")
        if kind not in KINDS or not (worker.isascii() and worker.isdigit()):
            ap.error(f"--force {item!r}: expected KIND:WORKER with KIND in {', '.join(KINDS)}")
        force[int(worker) + 2] = kind   # keyed by MPI rank
    args.force = force
    if not 0.0 <= args.error_rate <= 1.0:
        ap.error("--error-rate must be in [0, 1]")
    args.parts_default = args.parts is None
    if args.parts is None:
        args.parts = args.out + ".parts"
    return args


def run_rank(comm: Any, args: argparse.Namespace, info: DemInfo) -> tuple[int, dict[str, Any] | None]:
    """This rank's part of one run on ``comm`` (N+2 ranks): (exit status, the report if this rank finished the job).

    A benchmark series calls it once per run, each time on a fresh duplicate of the world
    communicator, so that a message or a pending receive of one run never matches in another."""
    n = comm.Get_size() - 2
    blocks = partition(info.shape[0], n, kernels[args.kernel][1])
    # a rank whose kernel calls run the compiled loops loads their machine code (numba's cache) now,
    # not in its first task or referee row: a worker's calls cover its block, a master's one row's window
    rows = max(b.in1 - b.in0 for b in blocks) if comm.Get_rank() >= 2 else kernels[args.kernel][1]
    if worth_loading(rows * info.shape[1]):
        from planaria.terrain.compiled import warm_up
        warm_up(args.kernel, info.dtype, out_dtype(info, args.dtype))
    if args.bench:
        comm.Barrier()
    if comm.Get_rank() >= 2:
        return worker(comm, args, info, blocks), None
    m = Master(comm, args, info, blocks, "primary" if comm.Get_rank() == 0 else "replica-passive")
    code = m.run()
    return code, (m.report if m.finished else None)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # the masters re-plan a failed worker's tasks, so a failure event is handled here: from before
    # pl.world() connects this rank, or a worker that crashes at once reaches the default abort
    events.handle_failures("planaria-abft", action="abft-replan")
    comm = planaria.world(args.backend)
    if comm.Get_size() < 3:
        print("planaria.abft.masterworker: needs at least 3 ranks (2 masters + 1 worker)", file=sys.stderr)
        return 2
    if args.force and max(args.force) >= comm.Get_size():
        if comm.Get_rank() == 0:
            print(f"planaria.abft.masterworker: --force: worker {max(args.force) - 2} does not exist "
                  f"(workers 0..{comm.Get_size() - 3})", file=sys.stderr)
        return 2
    return run_rank(comm, args, dem_info(args.dem))[0]


if __name__ == "__main__":
    code = main()
    planaria.finalize(code)
    sys.exit(code)
