"""The application docs/recovery.md shows, as a user would write it: no event handler of its own,
a ``finish`` that gathers the state on rank 0, ``SparesExhausted``/``Unrecoverable`` not caught.
``argv``: steps, then seconds of set-up work between ``pl.world()`` and ``Resilient`` (default 0),
then a step at which every working rank raises ``RuntimeError`` (default: none).

Each logical rank L holds u = L + (L + 1) * sum(range(steps)) at the end; rank 0 prints
``RESULT {json}`` with whether every gathered block is right.
"""
import json
import sys
import time

import numpy as np

import planaria as pl
from planaria.checkpoint import MemoryStore
from planaria.recovery.driver import Resilient

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
setup_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
raise_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
if setup_s:                       # a program that reads its input between pl.world() and Resilient
    pl.world()
    time.sleep(setup_s)
res = Resilient(MemoryStore(copies=1), every=10)


def init(comm):
    return {"u": np.full(1000, float(comm.rank))}


def step(comm, state, i):
    if i == raise_at:
        raise RuntimeError(f"a bug every rank meets at step {i}")
    state["u"] += i * (comm.rank + 1)
    comm.allreduce(1)


def finish(comm, state):
    return comm.gather(state["u"], root=0)


fields = res.run(init, step, steps=steps, finish=finish)
if fields is not None and res.comm.rank == 0:
    total = sum(range(steps))
    ok = len(fields) == res.comm.size and all(np.all(f == k + (k + 1) * total) for k, f in enumerate(fields))
    print("RESULT " + json.dumps({"ok": bool(ok), "ranks": len(fields), "world": pl.world().rank}), flush=True)
