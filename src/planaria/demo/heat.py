"""Heat equation in a homogeneous rod, surviving process failures (the rank program of ``planaria demo``).

Explicit finite differences, u' = u + r (u_left - 2u + u_right), fixed zero ends, the rod
split in blocks over the ranks with one halo cell each side. Every ``--every`` steps the
ranks take a coordinated checkpoint in memory: each keeps its own block and a copy of its
left neighbour's (duplication, so a lost block survives at its partner). On a failure the
survivors revoke, shrink, pick the newest checkpoint version whose blocks together still
cover the whole rod, redistribute the rod over the survivors and resume from it.

The update is element-wise, so the result does not depend on the decomposition: the final
field must equal, bit for bit, a serial run of the same problem. Rank 0 checks that and
writes ``demo.json`` in the job directory.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

import planaria as pl


def initial_field(cells: int, seed: int) -> np.ndarray:
    """The rod's initial temperatures (seeded, so every rank and the reference agree)."""
    return np.random.default_rng(seed).random(cells) * 100.0


def update(padded: np.ndarray, r: float) -> np.ndarray:
    """One explicit step on a block with one halo cell on each side."""
    return padded[1:-1] + r * (padded[:-2] - 2.0 * padded[1:-1] + padded[2:])


def serial_reference(cells: int, steps: int, r: float, seed: int) -> np.ndarray:
    """The failure-free serial solution, computed with the same element-wise arithmetic."""
    padded = np.zeros(cells + 2)
    padded[1:-1] = initial_field(cells, seed)
    for _ in range(steps):
        padded[1:-1] = update(padded, r)
    return padded[1:-1].copy()


def bounds(cells: int, parts: int, index: int) -> tuple[int, int]:
    """[lo, hi) of block ``index`` when ``cells`` are split into ``parts`` near-equal blocks."""
    base, extra = divmod(cells, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


class Rod:
    """This rank's part of the rod and its in-memory checkpoints."""

    def __init__(self, comm: pl.Comm, field: np.ndarray, cells: int) -> None:
        self.cells = cells
        self.own: dict[int, tuple[int, np.ndarray]] = {}       # version -> (lo, block)
        self.partner: dict[int, tuple[int, np.ndarray]] = {}   # version -> (lo, left neighbour's block)
        self.assign(comm, field)

    def assign(self, comm: pl.Comm, field: np.ndarray) -> None:
        self.comm = comm
        self.lo, self.hi = bounds(self.cells, comm.size, comm.rank)
        self.padded = np.zeros(self.hi - self.lo + 2)
        self.padded[1:-1] = field[self.lo:self.hi]

    def exchange_halos(self) -> None:
        c, p = self.comm, self.padded
        left = c.rank - 1 if c.rank > 0 else None
        right = c.rank + 1 if c.rank < c.size - 1 else None
        # rightward pass, then leftward pass; the rod's ends keep their zero halos
        if right is not None and left is not None:
            c.Sendrecv(p[-2:-1], dest=right, sendtag=1, recvbuf=p[0:1], source=left, recvtag=1)
            c.Sendrecv(p[1:2], dest=left, sendtag=2, recvbuf=p[-1:], source=right, recvtag=2)
        elif right is not None:
            c.Send(p[-2:-1], dest=right, tag=1)
            c.Recv(p[-1:], source=right, tag=2)
        elif left is not None:
            c.Recv(p[0:1], source=left, tag=1)
            c.Send(p[1:2], dest=left, tag=2)

    def step(self, r: float) -> None:
        self.exchange_halos()
        self.padded[1:-1] = update(self.padded, r)

    def checkpoint(self, version: int) -> None:
        """Coordinated checkpoint: keep my block, send a copy to my right neighbour (ring)."""
        c = self.comm
        mine = (self.lo, self.padded[1:-1].copy())
        got = c.sendrecv(mine, dest=(c.rank + 1) % c.size, sendtag=9,
                         source=(c.rank - 1) % c.size, recvtag=9) if c.size > 1 else mine
        c.Barrier()  # the version is complete only once every copy has arrived
        self.own[version], self.partner[version] = mine, got
        for store in (self.own, self.partner):
            for v in sorted(store)[:-2]:
                del store[v]

    def restore(self, comm: pl.Comm) -> int:
        """Rebuild the rod from the survivors' checkpoints and redistribute it; returns the version."""
        pieces = comm.allgather({v: [self.own[v]] + ([self.partner[v]] if v in self.partner else [])
                                 for v in self.own})
        versions = sorted({v for p in pieces for v in p}, reverse=True)
        for v in versions:
            field = np.full(self.cells, np.nan)
            covered = np.zeros(self.cells, dtype=bool)
            for p in pieces:
                for lo, block in p.get(v, []):
                    field[lo:lo + len(block)] = block
                    covered[lo:lo + len(block)] = True
            if covered.all():
                self.assign(comm, field)
                self.own = {v: (self.lo, self.padded[1:-1].copy())}
                self.partner = {}
                return v
        raise RuntimeError("unrecoverable: a block and its partner copy were both lost before the next checkpoint")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells-per-rank", type=int, default=262144)   # 2 MiB of float64 per rank
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=50, help="checkpoint interval in steps")
    ap.add_argument("--r", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=2015)
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args(argv)

    world = pl.world(args.backend)
    working = int(os.environ.get("PLANARIA_NRANKS", world.size) or world.size)
    cells = args.cells_per_rank * working
    comm = world
    rod = Rod(comm, initial_field(cells, args.seed), cells)
    events: list[dict[str, Any]] = []
    ck_times: list[float] = []
    t_start = time.time()
    rod.checkpoint(0)
    i = 0
    while i < args.steps:
        try:
            pl.step(i)
            rod.step(args.r)
            i += 1
            if i % args.every == 0:
                t = time.perf_counter()
                rod.checkpoint(i)
                ck_times.append(time.perf_counter() - t)
        except pl.FailureError as err:
            t_detect = time.time()
            failed_step = i
            while True:                       # a failure during recovery starts recovery again
                try:
                    comm.revoke()
                    t = time.perf_counter()
                    comm = comm.shrink()
                    t_shrink = time.perf_counter() - t
                    version = rod.restore(comm)
                    break
                except pl.FailureError:
                    continue
            t_done = time.time()
            events.append({"detected_at_step": failed_step, "error": type(err).__name__,
                           "t_detect": t_detect, "shrink_s": t_shrink, "recovery_s": t_done - t_detect,
                           "restored_version": version, "ranks_left": comm.size})
            i = version
    elapsed = time.time() - t_start

    final = comm.gather((rod.lo, rod.padded[1:-1]), root=0)
    if comm.rank != 0:
        return 0
    field = np.empty(cells)
    for lo, block in final:
        field[lo:lo + len(block)] = block
    ref = serial_reference(cells, args.steps, args.r, args.seed)
    equal = field.tobytes() == ref.tobytes()
    report = {"cells": cells, "steps": args.steps, "every": args.every, "ranks_start": world.size,
              "ranks_end": comm.size, "backend": world.backend, "elapsed_s": elapsed,
              "checkpoint_s": {"count": len(ck_times), "median": float(np.median(ck_times)) if ck_times else None,
                               "max": max(ck_times, default=None)},
              "checkpoint_bytes_per_rank": args.cells_per_rank * 8,
              "failures": events, "bit_identical": equal,
              "max_abs_diff": float(np.nanmax(np.abs(field - ref)))}
    jobdir = os.environ.get("PLANARIA_JOB_DIR")
    if jobdir:
        from planaria.launch.fsutil import atomic_write
        atomic_write(os.path.join(jobdir, "demo.json"), json.dumps(report, indent=2))
    print(f"final field {'equals' if equal else 'DIFFERS FROM'} the failure-free serial run "
          f"bit for bit ({len(events)} failure(s) survived, {comm.size} ranks left)", flush=True)
    return 0 if equal else 1


if __name__ == "__main__":
    code = main()
    pl.finalize(code)
    sys.exit(code)
