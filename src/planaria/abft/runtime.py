"""N-ABFT on real MPI ranks (paper 002, sections 1-2): two masters verify N row-block workers.

Run with N+2 ranks::

    python -m planaria.abft.runtime --kernel slope|cutdepth --dem IN --out OUT \
        [--error-rate p --seed s] [--force KIND:RANK] [--report FILE]

usually under ``planaria run`` (``planaria abft`` does that). Rank 0 is the primary master,
rank 1 its replica, ranks 2..N+1 the workers; worker rank w starts with block w-2.

Protocol (object point-to-point only; every receive is an ``irecv`` polled with ``Test``
against a deadline, so a dead or hung peer never blocks a master):

* worker -> both masters: ``start`` (tag 11), ``result`` (tag 12: the computed rows
  [r0, r1+1), or ``None`` with an error when the slab could not be read or the memory
  not allocated), ``finish`` (tag 13). Results travel in the messages themselves: blocks
  are small in tests. For DEMs of hundreds of MB a worker should write its rows as a
  ``.npy`` part next to ``--out`` and send only its first/check rows and a
  :func:`planaria.abft.verify.block_digest`; this runtime does not do that yet.
* master -> worker: ``("compute", block, attempt)`` or ``("stop",)`` (tag 14). Workers
  poll both masters, so commands from the replica work after a takeover.
* primary -> replica (tag 16): every command it sends (so the replica knows owners and
  attempts), a heartbeat, and at the end ``("final", F, owners, digest)``; the replica
  answers ``("ack", agreed)`` (tag 17).

Timeouts (Algorithm 1 step 1): TMaxLat = 5 s for start/finish messages and between the
masters; TMaxC = max(20 s, 2e-6 s per output cell x window^2 / 9) per block computation.
Both floors are generous because the ranks share few cores. On real ULFM a crashed worker
is noticed at once (the pending ``irecv`` raises ProcFailedError); the deadlines catch hung
workers.

Verification: V from the current result of every block; ``locate`` with
``ambiguous="both"`` (a lone mismatch recomputes both neighbours, so a fault in a worker's
first row is never blamed on the wrong worker only) and with edge checks: the masters
recompute the first worker's check row and the last worker's first row themselves (the
paper has the masters recompute the data of workers 1 and N; only the covered rows are
recomputed here). Recovery is :func:`planaria.abft.recovery.plan`, repeated until every
block is CORRECT, or ``NoLiveWorkerError`` (exit status 3).

Fault injection (``--error-rate p``: each worker with probability p from its own RNG
seeded by (seed, rank); ``--force KIND:RANK``: that worker for sure), on the worker's
first computation only (a transient fault):

* ``crash``: :func:`planaria.fail_stop` before computing.
* ``silent``: one bit flipped in a covered row (the check row, or the first row of the
  last worker). Faults in interior rows are not covered by N-ABFT and are not injected.
* ``nodata``: the kernel runs with a wrong NoData value (None instead of the DEM's): visible
  only when NoData cells fall in the windows of covered rows.
* ``readerror``: OSError reading the slab; reported as f=0, the block is reassigned.
* ``memory``: MemoryError allocating the output; same.

``--inject`` plans of ``planaria run`` also work: workers call ``planaria.step(k)`` with
k = 0 (start), 1 (compute), 2 (send) and the masters k = 10 + round.

Known limits:

* Every rank reads the whole DEM with :func:`planaria.terrain.read_dem` and slices its
  slab (``read_dem`` has no windowed read yet); fine for test sizes, not for 540 MB.
* With ``ambiguous="both"`` a fault in worker 0's check row also recomputes worker 1 (a
  lone mismatch names both neighbours; the edge check only adds worker 0's own verdict).
* The replica takes over when it hears nothing from the primary for TMaxLat (heartbeats
  every 0.5 s while the primary waits for workers). A primary busy for longer than that
  in one step (e.g. writing a huge raster) would be taken over spuriously; both would
  then write the same bytes (atomic renames). After a takeover, the report holds the
  errors and recoveries the replica saw itself, not the primary's earlier rounds.
* The masters' own data (results, F) is not checked against memory corruption; only
  the final F/owners/digest cross-check between the masters.

Rank 0 (or the replica when it took over) writes the output with
:func:`planaria.terrain.write_dem` (atomic; GeoTIFF keeps its profile) and the JSON report.
Exit status: 0 every block verified, 3 no live worker left, 2 usage error.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from typing import Any

import numpy as np

import planaria
from planaria.abft.partition import Block, partition
from planaria.abft.recovery import NoLiveWorkerError, plan
from planaria.abft.verify import CORRECT, TRANSIENT, UNRECOVERABLE, locate, verification_set
from planaria.comm.errors import FailureError
from planaria.terrain import Dem, kernels, read_dem, write_dem
from planaria.terrain.window import slab_bounds

T_START, T_RESULT, T_FINISH, T_CMD, T_MASTER, T_ACK = 11, 12, 13, 14, 16, 17
KINDS = ("crash", "silent", "nodata", "readerror", "memory")
TMAXLAT = 5.0
POLL = 0.002


def tmaxc(block: Block, width: int, window: int) -> float:
    cells = (block.computed[1] - block.computed[0]) * width
    return max(20.0, 2e-6 * cells * window * window / 9.0)


# ------------------------------------------------------------------------ worker

def compute_rows(dem: Dem, kernel: str, rows: tuple[int, int], nodata: Any = "dem") -> np.ndarray:
    fn, window = kernels[kernel]
    s0, s1 = slab_bounds(rows[0], rows[1], dem.data.shape[0], window)
    nd = dem.nodata if nodata == "dem" else nodata
    return fn(dem.data[s0:s1], cell_size=dem.cell_size, nodata=nd, rows=rows)


def choose_fault(rank: int, seed: int, rate: float, force: dict[int, str]) -> str | None:
    if rank in force:
        return force[rank]
    rng = np.random.default_rng([seed, rank])
    if rate > 0 and rng.random() < rate:
        return KINDS[int(rng.integers(len(KINDS)))]
    return None


def _send(comm: Any, obj: Any, dest: int, tag: int, keep: list) -> bool:
    try:
        keep.append(comm.isend(obj, dest, tag))
        return True
    except FailureError:
        return False


def worker(comm: Any, args: argparse.Namespace, dem: Dem, blocks: list[Block]) -> int:
    rank = comm.Get_rank()
    fault = choose_fault(rank, args.seed, args.error_rate, args.force)
    masters = {0, 1}
    keep: list = []
    task: tuple[int, int] | None = (rank - 2, 0)
    first = True
    recvs = {m: comm.irecv(source=m, tag=T_CMD) for m in masters}
    while True:
        if task is not None:
            b, attempt = task
            blk = blocks[b]
            planaria.step(0)
            for m in sorted(masters):
                _send(comm, ("start", rank, b, attempt), m, T_START, keep)
            planaria.step(1)
            f_here = fault if first else None
            first = False
            rows, err = None, None
            try:
                if f_here == "crash":
                    planaria.fail_stop(f"abft injected crash (worker {rank})")
                if f_here == "readerror":
                    raise OSError(f"injected read error on {args.dem} rows {blk.in0}..{blk.in1}")
                if f_here == "memory":
                    raise MemoryError("injected allocation failure")
                rows = compute_rows(dem, args.kernel, blk.computed,
                                    nodata=(None if dem.nodata is not None else -1.0) if f_here == "nodata" else "dem")
                planaria.watch("abft_rows", rows)
                if f_here == "silent":
                    r = -1 if blk.check_row is not None else 0
                    col = rows.shape[1] // 2
                    v = rows[r].view(np.uint64)
                    v[col] ^= np.uint64(1) << np.uint64(51)
            except (OSError, MemoryError) as exc:
                err = f"{type(exc).__name__}: {exc}"
                rows = None
            planaria.step(2)
            for m in sorted(masters):
                _send(comm, ("result", rank, b, attempt, rows, err), m, T_RESULT, keep)
                _send(comm, ("finish", rank, b, attempt), m, T_FINISH, keep)
            task = None
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
                    return 0
                task = (cmd[1], cmd[2])
                recvs[m] = comm.irecv(source=m, tag=T_CMD)
                break
        else:
            time.sleep(POLL)


# ------------------------------------------------------------------------ masters

class Master:
    def __init__(self, comm: Any, args: argparse.Namespace, dem: Dem, blocks: list[Block], role: str) -> None:
        self.comm, self.args, self.dem, self.blocks, self.role = comm, args, dem, blocks, role
        self.n = len(blocks)
        self.width = dem.data.shape[1]
        self.window = kernels[args.kernel][1]
        self.assign = {b: b + 2 for b in range(self.n)}
        self.attempt = {b: 0 for b in range(self.n)}
        self.issued = {b: time.monotonic() for b in range(self.n)}
        self.started: dict[int, float] = {}
        self.results: dict[int, tuple[np.ndarray | None, str | None]] = {}
        self.dead: set[int] = set()
        self.excluded: set[int] = set()
        self.tries: dict[int, int] = {}
        self.keep: list = []
        self.recvs: dict[tuple[int, int], Any] = {}
        self.report: dict[str, Any] = {"errors": [], "located": [], "recoveries": [], "rounds": 0,
                                       "timings": {"compute": 0.0, "verification": 0.0, "recovery": 0.0}}
        self.edge_rows = self._edge_rows()
        self.other_dead = False
        self.last_heard = time.monotonic()
        self.final_from_primary: Any = None

    def _edge_rows(self) -> dict[int, np.ndarray]:
        if self.n < 2:
            return {}
        b0, bl = self.blocks[0], self.blocks[-1]
        return {0: compute_rows(self.dem, self.args.kernel, (b0.r1, b0.r1 + 1))[0],
                self.n - 1: compute_rows(self.dem, self.args.kernel, (bl.r0, bl.r0 + 1))[0]}

    def _recv(self, src: int, tag: int) -> Any:
        key = (src, tag)
        if key not in self.recvs:
            self.recvs[key] = self.comm.irecv(source=src, tag=tag)
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
                self.recvs = {k: v for k, v in self.recvs.items() if k[0] != w}

    def _take(self, msg: tuple) -> None:
        kind, w, b = msg[0], msg[1], msg[2]
        if self.assign.get(b) != w or self.attempt.get(b) != msg[3]:
            return  # stale
        if kind == "start":
            self.started[b] = time.monotonic()
        elif kind == "result":
            self.results[b] = (msg[4], msg[5])

    def pending(self) -> list[int]:
        return [b for b in range(self.n) if b not in self.results]

    def wait_round(self) -> dict[int, int]:
        """Step (1): collect until every block has a result or a timeout; f0 per block."""
        t0 = time.monotonic()
        f0: dict[int, int] = {}
        while True:
            self.poll_workers()
            self.master_link()
            if self.role == "replica-passive":
                return {}
            now = time.monotonic()
            for b in self.pending():
                if b in f0:
                    continue
                w = self.assign[b]
                st = self.started.get(b)
                late = (st is None and now > self.issued[b] + TMAXLAT) or (
                    st is not None and now > st + tmaxc(self.blocks[b], self.width, self.window) + TMAXLAT)
                if w in self.dead or late:
                    f0[b] = UNRECOVERABLE
                    if late:
                        self.dead.add(w)
            if all(b in f0 or b in self.results for b in range(self.n)):
                break
            time.sleep(POLL)
        self.report["timings"]["compute"] += time.monotonic() - t0
        for b, (rows, err) in self.results.items():
            if rows is None:
                f0[b] = UNRECOVERABLE
        return f0

    def verify(self, f0: dict[int, int]) -> list[int]:
        t0 = time.monotonic()
        outs = []
        for b, blk in enumerate(self.blocks):
            rows = self.results.get(b, (None, None))[0]
            if f0.get(b) == UNRECOVERABLE or rows is None or rows.shape != (blk.computed[1] - blk.computed[0], self.width):
                f0[b] = UNRECOVERABLE
                rows = np.zeros((blk.computed[1] - blk.computed[0], self.width))
            outs.append(rows)
        fin = [f0.get(b, CORRECT) for b in range(self.n)]
        v = verification_set(outs, self.blocks)
        edge = {}
        for b, row in self.edge_rows.items():
            if fin[b] != UNRECOVERABLE:
                mine = outs[b][-1] if b == 0 else outs[b][0]
                edge[b] = row.tobytes() == np.ascontiguousarray(mine).tobytes()
        f = locate(fin, v, edge_checks=edge, ambiguous="both")
        self.report["timings"]["verification"] += time.monotonic() - t0
        return f

    def command(self, b: int, w: int) -> None:
        self.assign[b] = w
        self.attempt[b] += 1
        self.issued[b] = time.monotonic()
        self.started.pop(b, None)
        self.results.pop(b, None)
        _send(self.comm, ("compute", b, self.attempt[b]), w, T_CMD, self.keep)
        if self.role == "primary" and not self.other_dead:
            _send(self.comm, ("cmd", b, w, self.attempt[b]), 1, T_MASTER, self.keep)

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
                    _, b, w, att = msg
                    self.assign[b], self.attempt[b] = w, att
                    self.issued[b] = time.monotonic()
                    self.started.pop(b, None)
                    self.results.pop(b, None)
                elif msg[0] == "final":
                    self.final_from_primary = msg
                    return
        except FailureError:
            self.last_heard = -1e9
        if time.monotonic() - self.last_heard > TMAXLAT:
            self.other_dead = True
            self.role = "replica"
            self.report["takeover"] = True
            now = time.monotonic()
            for b in self.pending():
                self.issued[b] = now  # fresh deadlines from the takeover

    def run(self) -> int:
        rnd = 0
        while True:
            planaria.step(10 + rnd)
            f0 = self.wait_round()
            if self.role == "replica-passive":
                if self.final_from_primary is not None:
                    return self.acknowledge()
                time.sleep(POLL)
                continue
            f = self.verify(f0)
            self.report["rounds"] = rnd + 1
            bad = [b for b in range(self.n) if f[b] != CORRECT]
            # a block that verifies clears its in-place retry (recovery.mark_verified)
            self.tries = {b: (0 if f[b] == CORRECT else k) for b, k in self.tries.items()}
            for b in bad:
                err = self.results.get(b, (None, None))[1]
                self.report["errors"].append({"round": rnd, "block": b, "worker": self.assign[b],
                                              "status": f[b], "error": err or ("timeout/crash" if f[b] == 0 else "mismatch")})
                if f[b] == TRANSIENT:
                    self.report["located"].append(self.assign[b])
            if not bad:
                break
            t0 = time.monotonic()
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
            self.report["timings"]["recovery"] += time.monotonic() - t0
            rnd += 1
        return self.finish(ok=True)

    def assemble(self) -> np.ndarray:
        parts = [self.results[b][0][: blk.local_size] for b, blk in enumerate(self.blocks)]
        return np.concatenate(parts, axis=0)

    def finish(self, ok: bool) -> int:
        self.report.update(ok=ok, finisher=self.role, final_owners={str(b): w for b, w in self.assign.items()},
                           dead_workers=sorted(self.dead), excluded=sorted(self.excluded))
        digest = None
        if ok:
            data = self.assemble()
            digest = hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest()
            write_dem(self.args.out, Dem(data, nodata=self.dem.nodata, cell_size=self.dem.cell_size,
                                         profile=self.dem.profile))
            self.report["digest"] = digest
        if self.role == "primary" and not self.other_dead:
            _send(self.comm, ("final", ok, dict(self.assign), digest), 1, T_MASTER, self.keep)
            deadline = time.monotonic() + TMAXLAT
            agreed = None
            try:
                while time.monotonic() < deadline:
                    msg = self._recv(1, T_ACK)
                    if msg is not None:
                        agreed = msg[1]
                        break
                    time.sleep(POLL)
            except FailureError:
                pass
            self.report["replica_agreed"] = agreed
        self.stop_workers()
        self.write_report()
        return 0 if ok else 3

    def acknowledge(self) -> int:
        """Replica: cross-check the primary's final F, owners and digest with its own copies."""
        _, ok, owners, digest = self.final_from_primary
        agreed = owners == self.assign
        if ok and agreed:
            try:
                f = self.verify({})
                mine = hashlib.blake2b(self.assemble().tobytes(), digest_size=16).hexdigest()
                agreed = all(s == CORRECT for s in f) and mine == digest
            except Exception:  # noqa: BLE001 - a missing result means disagreement
                agreed = False
        _send(self.comm, ("ack", agreed), 0, T_ACK, self.keep)
        return 0

    def stop_workers(self) -> None:
        for w in range(2, self.n + 2):
            if w not in self.dead:
                _send(self.comm, ("stop",), w, T_CMD, self.keep)

    def write_report(self) -> None:
        self.report.update(kernel=self.args.kernel, workers=self.n, shape=list(self.dem.data.shape),
                           blocks=[[b.r0, b.r1] for b in self.blocks],
                           overhead={"verification_rows": 2 * max(0, self.n - 1), "width": self.width,
                                     "edge_rows_recomputed": len(self.edge_rows)})
        if self.args.report:
            tmp = self.args.report + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(self.report, fh, indent=2, default=str)
            os.replace(tmp, self.args.report)


# ------------------------------------------------------------------------ main

def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="planaria.abft.runtime")
    ap.add_argument("--kernel", choices=sorted(kernels), required=True)
    ap.add_argument("--dem", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--error-rate", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="append", default=[], help="KIND:RANK")
    ap.add_argument("--report", default=None)
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args(argv)
    force = {}
    for item in args.force:
        kind, _, rank = item.partition(":")
        if kind not in KINDS or not rank.isdigit():
            ap.error(f"--force {item!r}: expected KIND:RANK with KIND in {', '.join(KINDS)}")
        force[int(rank)] = kind
    args.force = force
    if not 0.0 <= args.error_rate <= 1.0:
        ap.error("--error-rate must be in [0, 1]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    comm = planaria.world(args.backend)
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 3:
        print("planaria.abft.runtime: needs at least 3 ranks (2 masters + 1 worker)", file=sys.stderr)
        return 2
    dem = read_dem(args.dem)
    n = size - 2
    blocks = partition(dem.data.shape[0], n, kernels[args.kernel][1])
    if rank >= 2:
        return worker(comm, args, dem, blocks)
    m = Master(comm, args, dem, blocks, "primary" if rank == 0 else "replica-passive")
    return m.run()


if __name__ == "__main__":
    code = main()
    planaria.finalize(code)
    sys.exit(code)
