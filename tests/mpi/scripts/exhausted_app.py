"""A step loop under the recovery driver that continues on fewer ranks when spares run out.

``exhausted_app.py STEPS EVERY STORE [stop|continue]``. The state is a global uint64 array of
``CELLS`` elements split in near-equal blocks over the working ranks; element ``j`` follows
``x <- x * A + (j + 1) * (i + 1) + C`` (mod 2**64) at step ``i``, so the final array is known
exactly whatever the decomposition. When spares run out, the survivors rebuild the lost
blocks (``recover_lost``) and split the array again over the processes left. Every working
rank prints ``RESULT {json}``: its role, rank counts and whether its block is right.
"""
import json
import os
import sys
import tempfile

import numpy as np

import planaria as pl
from planaria.checkpoint import FileStore, MemoryStore, XorStore
from planaria.recovery.driver import Resilient, SparesExhausted, Unrecoverable

CELLS = 1003
A = np.uint64(6364136223846793005)
C = np.uint64(1442695040888963407)

steps = int(sys.argv[1])
every = int(sys.argv[2])
kind = sys.argv[3]
mode = sys.argv[4] if len(sys.argv) > 4 else "continue"


def bounds(parts: int, index: int) -> tuple[int, int]:
    base, extra = divmod(CELLS, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


def advance(x: np.ndarray, lo: int, i: int) -> None:
    j = np.arange(lo + 1, lo + 1 + len(x), dtype=np.uint64)
    x *= A
    x += j * np.uint64(i + 1) + C


def expected() -> np.ndarray:
    x = np.arange(CELLS, dtype=np.uint64)
    for i in range(steps):
        advance(x, 0, i)
    return x


def redistribute(comm, version, mine, found, lost, old_size):
    survivors = [x for x in range(old_size) if x not in lost]
    pieces = []
    if mine is not None:
        pieces.append((bounds(old_size, survivors[comm.rank])[0], mine["x"]))
    pieces += [(bounds(old_size, f)[0], st["x"]) for f, st in found.items()]
    everything = [p for part in comm.allgather(pieces) for p in part]
    whole = np.zeros(CELLS, dtype=np.uint64)
    seen = np.zeros(CELLS, dtype=np.int64)
    for lo, x in everything:
        whole[lo:lo + len(x)] = x
        seen[lo:lo + len(x)] += 1
    if not np.all(seen == 1):
        raise RuntimeError(f"rebuilt pieces cover the array {sorted(set(seen.tolist()))} times")
    lo, hi = bounds(comm.size, comm.rank)
    return {"x": whole[lo:hi].copy(), "step": np.array(version)}


def make_store():
    if kind == "memory":
        return MemoryStore(copies=1, distance=1)
    if kind == "xor":
        return XorStore(group_size=3)
    if kind == "file":
        d = os.environ.get("PLANARIA_JOB_DIR") or tempfile.mkdtemp(prefix="exhausted-")
        return FileStore(os.path.join(d, "checkpoints"))
    raise SystemExit(f"unknown store {kind}")


res = Resilient(make_store(), every=every, resume=False,
                on_exhausted=redistribute if mode == "continue" else "stop")


def init(comm):
    lo, hi = bounds(comm.size, comm.rank)
    return {"x": np.arange(lo, hi, dtype=np.uint64), "step": np.array(0)}


def step(comm, state, i):
    assert int(state["step"]) == i, (int(state["step"]), i)
    advance(state["x"], bounds(comm.size, comm.rank)[0], i)
    state["step"][...] = i + 1
    if comm.allreduce(1) != comm.size:        # every working rank takes part in every step
        raise RuntimeError("allreduce miscounted the working ranks")


try:
    state = res.run(init, step, steps)
except (SparesExhausted, Unrecoverable) as e:
    print(f"EXHAUSTED {res.world.rank}: {type(e).__name__}: {e}", flush=True)
    sys.exit(0)
if state is None:
    print("RESULT " + json.dumps({"world": pl.world().rank, "role": res.role, "logical": None}), flush=True)
    sys.exit(0)
comm = res.comm
lo, hi = bounds(comm.size, comm.rank)
ok = state["x"].tobytes() == expected()[lo:hi].tobytes()
print("RESULT " + json.dumps({"world": pl.world().rank, "role": res.role, "logical": res.logical_rank,
                              "ranks": comm.size, "ok": bool(ok),
                              "recoveries": [r.__dict__ | {"total_s": r.total_s} for r in res.recoveries]}),
      flush=True)
