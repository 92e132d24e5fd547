"""``recover_lost`` of every store through real failures.

Run as ``mpiexec -n N+S python exhausted_stores.py CASE BACKEND DIR``.

World ranks 0..N-1 work and save versions 1 and 2 (states of different sizes per rank); the
last S ranks are spares that hold nothing. The victims fail-stop; the others revoke, shrink
and build the smaller communicator: the survivors in their old logical order, then the
spares (old logical rank None). ``recoverable_lost`` must agree on the expected version,
``recover_lost`` must give each survivor its own state and each lost rank's state on exactly
one rank, bit-exact; then the store must save and restore on the smaller communicator.
Every rank that checks out prints ``OK CASE <world rank>``.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

import planaria as pl
from planaria.checkpoint import FileStore, MemoryStore, MultiLevel, XorStore

# case -> (working ranks N, spares S, victims (logical = world ranks), expected version or None)
CASES = {
    "memory": (5, 0, [2], 2),
    "memory_adjacent": (5, 0, [2, 3], None),     # 3 held the only copy of 2
    "memory_spare": (5, 1, [1, 3], 2),           # a spare joins, holding nothing
    "xor": (6, 0, [1, 4], 2),                    # one per group {0,1,2} {3,4,5}
    "xor_two": (6, 0, [0, 2], None),             # two in one group
    "file": (4, 0, [1, 3], 2),
    "multi": (6, 0, [0, 2], 2),                  # xor cannot, file (every 2nd version) can
}


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAIL {CASE} world rank {WR}: {what}", flush=True)
        os._exit(3)


def state_for(version: int, logical: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 * version + logical)
    return {"u": rng.standard_normal(500 + 37 * logical),
            "ids": rng.integers(0, 2**62, (3, logical + 1), dtype=np.int64),
            "step": np.array(version, dtype=np.int32)}


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes() for k in a)


def make_store(case: str, d: str):
    if case.startswith("memory"):
        return MemoryStore(copies=1, distance=1)
    if case.startswith("xor"):
        return XorStore(group_size=3)
    if case == "file":
        return FileStore(d)
    if case == "multi":
        return MultiLevel([(XorStore(group_size=3), 1), (FileStore(d), 2)])
    raise SystemExit(f"unknown case {case}")


def shrink_without(world: pl.Comm, victims: set[int]) -> pl.Comm:
    """Revoke and shrink until none of ``victims`` (world ranks) is left."""
    expect = world.size - len(victims)
    t0 = time.time()
    while time.time() - t0 < 30:
        try:
            world.Barrier()
        except pl.FailureError:
            pass
        world.revoke()
        new = world.shrink()
        if new.size == expect:
            return new
        check(new.size > expect, f"shrunk to {new.size}, expected {expect}")
        time.sleep(0.1)
    check(False, f"could not shrink to {expect} ranks")
    raise AssertionError


def main() -> None:
    n, spares, victims, want = CASES[CASE]
    check(WORLD.size == n + spares, f"run with {n + spares} processes")
    store = make_store(CASE, DIR)
    old = WR if WR < n else None
    working = WORLD.split(0 if old is not None else None, key=WR)
    if working is not None:
        for v in (1, 2):
            store.save(working, v, state_for(v, working.rank))
    try:
        WORLD.Barrier()
    except pl.FailureError:
        pass
    if WR in victims:
        pl.fail_stop("recover_lost test victim")
    world = shrink_without(WORLD, set(victims))
    comm = world.split(0, key=old if old is not None else n + WR)
    logical = comm.allgather(old)
    survivors = [x for x in range(n) if x not in victims]
    check(logical == survivors + [None] * spares, f"logical {logical}")
    got = store.recoverable_lost(comm, logical, n)
    check(got == want, f"recoverable_lost {got}, expected {want}")
    if want is None:
        return
    mine, found = store.recover_lost(comm, want, logical, n)
    if old is None:
        check(mine is None, "a spare got a state of its own")
    else:
        check(mine is not None and same(mine, state_for(want, old)), f"own state of logical {old} differs")
    for f, st in found.items():
        check(f in victims and same(st, state_for(want, f)), f"rebuilt state of lost rank {f} differs")
    everyone = comm.allgather(sorted(found))
    flat = sorted(f for part in everyone for f in part)
    check(flat == sorted(victims), f"lost ranks rebuilt {flat}, expected each of {sorted(victims)} once")
    # the store goes on working on the smaller communicator; the old layout never matches it
    check(store.restorable(comm, set()) is None, "a version of the old layout is restorable on fewer ranks")
    new_state = state_for(3, 100 + comm.rank)
    store.save(comm, 3, new_state)
    check(store.restorable(comm, set()) == 3, f"restorable after a save on fewer ranks: "
                                              f"{store.restorable(comm, set())}")
    check(same(store.restore(comm, 3, set()), new_state), "restore on fewer ranks differs")


CASE = sys.argv[1]
WORLD = pl.world(sys.argv[2])
WR = WORLD.rank
DIR = sys.argv[3] if len(sys.argv) > 3 else "."
main()
print(f"OK {CASE} {WR}", flush=True)
