"""Heat equation in a homogeneous rod, surviving process failures (the rank program of ``planaria demo``).

Explicit finite differences, u' = u + r (u_left - 2u + u_right), fixed zero ends, the rod
split in blocks over N working ranks (one halo cell each side); K more processes wait as
spares. The step loop runs under ``planaria.recovery.Resilient``: coordinated checkpoints
every ``--every`` steps in partner memory, XOR groups or files; on a failure the living
processes revoke, shrink, a spare takes the lost block's logical rank, everyone agrees on
the newest restorable version, restores and resumes. With ``--when-exhausted continue``, a
failure no spare can cover shrinks the job instead: the store rebuilds the lost blocks on the
survivors, and the rod is split again over the processes left (``redistribute``).

The update is element-wise, so the result does not depend on the decomposition or on what
was recomputed: the final field must equal, bit for bit, a serial run of the same problem.
Logical rank 0 checks that and writes ``demo.json`` in the job directory.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

import planaria as pl
from planaria.checkpoint import FileStore, MemoryStore, MultiLevel, XorStore
from planaria import events
from planaria.recovery.driver import RESILIENT_HANDLER, Resilient, SparesExhausted, Unrecoverable
from planaria.util.env import PLANARIA_JOB_DIR, PLANARIA_RESTART

REPORT_DONE_TAG = 4711      # rank 0 -> the others: the report is written


def initial_field(cells: int, seed: int) -> np.ndarray:
    """The rod's initial temperatures (seeded, so every rank and the reference agree)."""
    return np.random.default_rng(seed).random(cells) * 100.0


def update(padded: np.ndarray, r: float, out: np.ndarray | None = None) -> np.ndarray:
    """One explicit step on a block with one halo cell on each side:
    ``u + r * (u[i-1] - 2 u + u[i+1])``, one operation at a time into ``out`` (len(padded) - 2;
    new when None). Reusing ``out`` avoids five fresh temporaries per step, whose page faults
    made the kernel twice as slow; the operations and their order, hence the bits, are the same."""
    if out is None:
        out = np.empty(len(padded) - 2)
    np.multiply(padded[1:-1], 2.0, out=out)
    np.subtract(padded[:-2], out, out=out)
    np.add(out, padded[2:], out=out)
    np.multiply(out, r, out=out)
    np.add(padded[1:-1], out, out=out)
    return out


def serial_reference(cells: int, steps: int, r: float, seed: int) -> np.ndarray:
    """The failure-free serial solution, computed with the same element-wise arithmetic."""
    padded = np.zeros(cells + 2)
    padded[1:-1] = initial_field(cells, seed)
    out = np.empty(cells)
    for _ in range(steps):
        padded[1:-1] = update(padded, r, out)
    return padded[1:-1].copy()


def bounds(cells: int, parts: int, index: int) -> tuple[int, int]:
    """[lo, hi) of block ``index`` when ``cells`` are split into ``parts`` near-equal blocks."""
    base, extra = divmod(cells, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


def exchange_halos(c: pl.Comm, p: np.ndarray) -> None:
    """Fill the halo cells of block ``p`` from the neighbours; the rod's ends stay zero."""
    left = c.rank - 1 if c.rank > 0 else None
    right = c.rank + 1 if c.rank < c.size - 1 else None
    if right is not None and left is not None:
        c.Sendrecv(p[-2:-1], dest=right, sendtag=1, recvbuf=p[0:1], source=left, recvtag=1)
        c.Sendrecv(p[1:2], dest=left, sendtag=2, recvbuf=p[-1:], source=right, recvtag=2)
    elif right is not None:
        c.Send(p[-2:-1], dest=right, tag=1)
        c.Recv(p[-1:], source=right, tag=2)
    elif left is not None:
        c.Recv(p[0:1], source=left, tag=1)
        c.Send(p[1:2], dest=left, tag=2)


def redistribute(comm: pl.Comm, cells: int, mine: dict[str, np.ndarray] | None,
                 found: dict[int, dict[str, np.ndarray]], lost: list[int], old_size: int) -> dict[str, np.ndarray]:
    """This rank's padded block after the rod is split again over ``comm`` (collective).

    ``mine`` and ``found`` are blocks of the old split over ``old_size`` ranks (see
    ``Resilient``): comm rank ``i`` < number of survivors had old logical rank
    ``survivors[i]``. Each rank sends every other rank exactly the cells it will own.
    """
    survivors = [x for x in range(old_size) if x not in lost]
    pieces: list[tuple[int, np.ndarray]] = []
    if mine is not None:
        pieces.append((bounds(cells, old_size, survivors[comm.rank])[0], mine["u"][1:-1]))
    for old, st in sorted(found.items()):
        pieces.append((bounds(cells, old_size, old)[0], st["u"][1:-1]))
    out: list[list[tuple[int, np.ndarray]]] = []
    for dest in range(comm.size):
        lo, hi = bounds(cells, comm.size, dest)
        part = []
        for plo, block in pieces:
            a, b = max(lo, plo), min(hi, plo + len(block))
            if a < b:
                part.append((a, block[a - plo:b - plo].copy()))
        out.append(part)
    got = comm.alltoall(out)
    lo, hi = bounds(cells, comm.size, comm.rank)
    padded = np.zeros(hi - lo + 2)
    filled = 0
    for part in got:
        for a, block in part:
            padded[1 + a - lo:1 + a - lo + len(block)] = block
            filled += len(block)
    if filled != hi - lo:
        raise RuntimeError(f"redistribution filled {filled} of the {hi - lo} cells of rank {comm.rank}")
    return {"u": padded}


def make_store(kind: str, every: int, file_every: int, directory: str) -> Any:
    """The checkpoint store named on the command line."""
    if kind == "memory":
        return MemoryStore(copies=1, distance=1)
    if kind == "xor":
        return XorStore(group_size=3)
    if kind == "file":
        return FileStore(directory)
    if kind == "multi":         # both intervals in steps; the levels count checkpoints every gcd steps
        g = math.gcd(every, file_every)
        return MultiLevel([(MemoryStore(), every // g), (FileStore(directory), file_every // g)])
    raise SystemExit(f"unknown checkpoint kind {kind!r} (expected memory, xor, file or multi)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells-per-rank", type=int, default=262144)   # 2 MiB of float64 per rank
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=50, help="checkpoint interval in steps")
    ap.add_argument("--checkpoint", default="memory", help="memory, xor, file or multi (memory + file)")
    ap.add_argument("--file-every", type=int, default=100, help="file interval of the multi-level store")
    ap.add_argument("--r", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=2015)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--when-exhausted", choices=("stop", "continue"), default="stop",
                    help="when more ranks fail than there are spares: stop, or continue on fewer ranks")
    args = ap.parse_args(argv)

    # This program recovers from failures from its first line: a rank killed before Resilient
    # exists (its handler replaces this one by name) must not let the default handler stop the job.
    events.handle_failures(RESILIENT_HANDLER, action="ulfm-recovery")
    world = pl.world(args.backend)
    jobdir = os.environ.get(PLANARIA_JOB_DIR) or tempfile.mkdtemp(prefix="planaria-demo-")
    store = make_store(args.checkpoint, args.every, args.file_every, os.path.join(jobdir, "checkpoints"))
    every = args.every if args.checkpoint != "multi" else math.gcd(args.every, args.file_every)

    def continue_on_fewer(comm: pl.Comm, version: int, mine: dict[str, np.ndarray] | None,
                          found: dict[int, dict[str, np.ndarray]], lost: list[int],
                          old_size: int) -> dict[str, np.ndarray]:
        return redistribute(comm, cells, mine, found, lost, old_size)

    res = Resilient(store, every=every, world=world,
                    on_exhausted=continue_on_fewer if args.when_exhausted == "continue" else "stop")
    nwork = world.size - res.spares
    cells = args.cells_per_rank * nwork
    timeline: list[tuple[float, int]] = []

    def init(comm: pl.Comm) -> dict[str, np.ndarray]:
        lo, hi = bounds(cells, comm.size, comm.rank)
        padded = np.zeros(hi - lo + 2)
        padded[1:-1] = initial_field(cells, args.seed)[lo:hi]
        return {"u": padded}

    scratch: dict[int, np.ndarray] = {}       # update's output buffer, by block size

    def step(comm: pl.Comm, state: dict[str, np.ndarray], i: int) -> None:
        p = state["u"]
        exchange_halos(comm, p)
        out = scratch.get(p.size)
        if out is None:                       # first step, or the rod was redistributed
            scratch.clear()
            out = scratch[p.size] = np.empty(p.size - 2)
        p[1:-1] = update(p, args.r, out)
        if i % 10 == 0:
            timeline.append((time.time(), i))

    def finish(comm: pl.Comm, state: dict[str, np.ndarray]) -> int:
        """Gather the field and every rank's record; rank 0 compares and writes the report."""
        elapsed = time.time() - t_start
        lo, hi = bounds(cells, comm.size, comm.rank)
        final = comm.gather((lo, state["u"][1:-1]), root=0)
        mine = {"recoveries": [r.to_dict() for r in res.recoveries],
                "checkpoints": res.checkpoint_times, "role": res.role, "world": world.rank, "timeline": timeline}
        everyone = comm.gather(mine, root=0)
        if comm.rank != 0:
            _sleep_until_report(comm)
            return 0
        assert final is not None and everyone is not None, "a gather's result is a list at its root"
        code = _report(jobdir, args, comm, final, everyone, elapsed, t_start, cells, every, nwork,
                       res, world.backend)
        for r in range(1, comm.size):
            comm.send(code, dest=r, tag=REPORT_DONE_TAG)
        return code

    t_start = time.time()
    try:
        code = res.run(init, step, args.steps, finish=finish)
    except (SparesExhausted, Unrecoverable) as e:
        # Every survivor writes the same report (atomic rename: one complete file wins).
        _write(jobdir, {"outcome": "spares exhausted" if isinstance(e, SparesExhausted) else "unrecoverable",
                        "message": str(e), "ranks": nwork, "spares": res.spares, "backend": world.backend})
        return 3
    return 0 if code is None else code      # None: a spare that was never needed


def _sleep_until_report(comm: pl.Comm) -> None:
    """Wait for rank 0's report without spinning: the closing agreement busy-polls, and 7 ranks
    spinning on 2 cores made rank 0's serial reference run several times slower. A failure of
    rank 0 meanwhile raises here, inside the protected epilogue, like any other."""
    req = comm.irecv_matched(source=0, tag=REPORT_DONE_TAG)
    while not req.test()[0]:
        time.sleep(0.002)


def _report(jobdir: str, args: argparse.Namespace, comm: pl.Comm, final: list, everyone: list[dict[str, Any]],
            elapsed: float, t_start: float, cells: int, every: int, nwork: int, res: Resilient,
            backend: str) -> int:
    """Rank 0: assemble the field, compare it with the serial run, write demo.json; 0 if equal."""
    field = np.empty(cells)
    for blo, block in final:
        field[blo:blo + len(block)] = block
    ref = serial_reference(cells, args.steps, args.r, args.seed)
    equal = field.tobytes() == ref.tobytes()
    longest = max(everyone, key=lambda m: len(m["recoveries"]))
    failures = []
    for k, rec in enumerate(longest["recoveries"]):
        same = [m["recoveries"][k] for m in everyone
                if len(m["recoveries"]) == len(longest["recoveries"])]
        slowest = {p: max(x[p] for x in same) for p in ("revoke_shrink_s", "substitution_s", "restore_s", "total_s")}
        failures.append(rec | slowest | {"t_detect": min(x["t_detect"] for x in same)})
    cks = [t for m in everyone for t in m["checkpoints"]]
    report = {"outcome": "finished", "resumed_from": res.resumed_from,
              "restart": int(os.environ.get(PLANARIA_RESTART, "0") or 0), "cells": cells, "steps": args.steps, "every": every,
              "checkpoint": args.checkpoint, "ranks": nwork, "ranks_end": comm.size, "spares": res.spares,
              "when_exhausted": args.when_exhausted,
              "backend": backend, "elapsed_s": elapsed, "t_start": t_start,
              "checkpoint_s": {"count": len(longest["checkpoints"]),
                               "median": float(np.median(cks)) if cks else None, "max": max(cks, default=None)},
              "checkpoint_bytes_per_rank": (args.cells_per_rank + 2) * 8,
              "roles": {m["world"]: m["role"] for m in everyone},
              "failures": failures, "timeline": longest["timeline"], "bit_identical": equal,
              "max_abs_diff": float(np.max(np.abs(field - ref))),
              "profile": {"x": np.linspace(0, 1, min(cells, 2000)).tolist(),
                          "final": field[np.linspace(0, cells - 1, min(cells, 2000)).astype(int)].tolist(),
                          "initial": initial_field(cells, args.seed)[
                              np.linspace(0, cells - 1, min(cells, 2000)).astype(int)].tolist()}}
    _write(jobdir, report)
    print(f"final field {'equals' if equal else 'DIFFERS FROM'} the failure-free serial run bit for bit "
          f"({len(failures)} failure(s) survived on {nwork} working ranks"
          + (f", {comm.size} at the end" if comm.size != nwork else "") + ")", flush=True)
    return 0 if equal else 1


def _write(jobdir: str, report: dict[str, Any]) -> None:
    from planaria.util.fsutil import atomic_write
    atomic_write(os.path.join(jobdir, "demo.json"), json.dumps(report, indent=1))


if __name__ == "__main__":
    code = main()
    pl.finalize(code)
    sys.exit(code)
