"""A step loop written the way docs/recovery.md shows, whose exact final result anyone can recompute.

    planaria run -n 6 --spares 2 -- python examples/resilient_app.py [--store memory|file]
        [--dir DIR] [--steps 200] [--every 20] [--cells 1000] [--pause 0.002]

``Resilient`` with a ``MemoryStore`` (partner copy) or a ``FileStore`` (``--dir``, default
``$PLANARIA_JOB_DIR/checkpoints``; a second run with the same ``--dir`` resumes from its files),
and a ``finish`` that gathers the states at logical rank 0, which prints one line::

    RESULT {"cells": 6000, "steps": 200, "sha256": "..."}

The state is integer-valued, so the result is exact. With W working ranks and C cells per rank,
logical rank L holds ``x[j]`` for the global cells ``g = L*C + j`` (``x = g`` at the start); step
``i`` (0-based) does, modulo 2**64::

    t = sum over every cell block of (its first value mod 1000003)       (an allreduce)
    x[g] <- x[g] * A + (g + 1) * (i + 1) + t

with ``A = 6364136223846793005``. ``sha256`` is the digest of the whole array (W*C little-endian
uint64 values in global order) after ``--steps`` steps.

``x`` is registered with ``planaria.watch`` (``--inject 'bitflip:rank=R,array=x,iter=I'``). The
state also holds ``check``, the sum of ``x`` modulo 2**64, which each step compares first: one
flipped bit always changes the sum, and the rank then ends itself as a process failure
(``planaria.fail_stop``), so the driver replaces it from the last checkpoint, which was taken
before the flip. A ``SparesExhausted`` or ``Unrecoverable`` from the driver is not caught here.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time

import numpy as np

import planaria as pl
from planaria.checkpoint import FileStore, MemoryStore
from planaria.recovery.driver import Resilient

A = np.uint64(6364136223846793005)
MOD_T = 1000003


def main() -> None:
    """Run the job; logical rank 0 prints the digest of the final array."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", choices=("memory", "file"), default="memory")
    ap.add_argument("--dir", default=None, help="file checkpoints' directory (default: the job directory's)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=20, help="checkpoint interval in steps")
    ap.add_argument("--cells", type=int, default=1000, help="cells per working rank")
    ap.add_argument("--pause", type=float, default=0.002, help="seconds per step standing in for computation")
    args = ap.parse_args()
    cells = args.cells

    if args.store == "file":
        where = args.dir or os.path.join(os.environ.get("PLANARIA_JOB_DIR") or tempfile.mkdtemp(), "checkpoints")
        store = FileStore(where)
    else:
        store = MemoryStore(copies=1)
    res = Resilient(store, every=args.every)

    def init(comm: pl.Comm) -> dict[str, np.ndarray]:
        x = np.arange(comm.rank * cells, (comm.rank + 1) * cells, dtype=np.uint64)
        return {"x": x, "check": np.array([x.sum(dtype=np.uint64)], dtype=np.uint64)}

    def step(comm: pl.Comm, state: dict[str, np.ndarray], i: int) -> None:
        x = state["x"]
        pl.watch("x", x)                     # a spare that took over holds new arrays
        if x.sum(dtype=np.uint64) != state["check"][0]:
            pl.fail_stop(f"x corrupted in memory before step {i}")
        time.sleep(args.pause)
        t = comm.allreduce(int(x[0]) % MOD_T)
        g1 = np.arange(comm.rank * cells + 1, (comm.rank + 1) * cells + 1, dtype=np.uint64)
        x *= A
        x += g1 * np.uint64(i + 1) + np.uint64(t)
        state["check"][0] = x.sum(dtype=np.uint64)

    def finish(comm: pl.Comm, state: dict[str, np.ndarray]) -> list | None:
        return comm.gather(state, root=0)

    states = res.run(init, step, steps=args.steps, finish=finish)
    if states is not None:                   # logical rank 0
        whole = np.concatenate([s["x"] for s in states]).astype("<u8")
        print("RESULT " + json.dumps({"cells": int(whole.size), "steps": args.steps,
                                      "sha256": hashlib.sha256(whole.tobytes()).hexdigest()}), flush=True)


if __name__ == "__main__":
    main()
