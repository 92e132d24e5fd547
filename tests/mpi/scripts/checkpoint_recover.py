"""Checkpoint stores through real failures: ``mpiexec -n N+S python checkpoint_recover.py CASE BACKEND DIR``.

World ranks 0..N-1 work, the last S ranks are spares that hold nothing. The working
communicator (logical rank = position) is built from the world with ``reorder``. After a
victim fail-stops, every survivor (spares included) revokes and shrinks the world; a spare
takes the dead rank's logical place in a reordered communicator and is ``fresh``; the store
must bring back every rank's state bit-exact. In the ``_midsave`` cases the victim dies instead
of saving version 3 while the others save it (some finish, some raise): version 2 must be
restorable everywhere, and saving and rolling back work on the repaired communicator after.
Every rank that checks out prints ``OK CASE <world rank>``.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

import planaria as pl
from planaria.checkpoint import FileStore, MemoryStore, MultiLevel, XorStore


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAIL {CASE} world rank {WR}: {what}", flush=True)
        os._exit(3)


def state_for(version: int, logical: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 * version + logical)
    n = 1000 + 37 * logical                       # ranks hold states of different sizes
    return {"u": rng.standard_normal(n),
            "ids": rng.integers(0, 2**62, (3, logical + 1), dtype=np.int64),
            "c": rng.standard_normal((2, 2)).astype(np.complex64),
            "step": np.array(version, dtype=np.int32),
            "tag": np.frombuffer(f"r{logical}v{version}".encode(), dtype=np.uint8).copy(),
            # from logical rank 2 on, descriptions too long for a restore's fixed-size header
            **{f"extra_{k:03d}": np.full(k % 5, version * k, dtype=np.int16) for k in range(20 * logical)}}


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes() for k in a)


# -- building a communicator whose rank order is the logical order ----------------------------
def reorder(base: pl.Comm, logical: int | None, tag: str) -> pl.Comm | None:
    """Collective over ``base``: a new Comm of the processes with a ``logical`` rank, ranked by it.

    Uses ``Comm.split`` when the backend has it, else builds the communicator directly.
    Processes passing None get None.
    """
    if callable(getattr(type(base), "split", None)) and not getattr(type(base).split, "__isabstractmethod__", False):
        return base.split(None if logical is None else 0, logical if logical is not None else 0)
    from mpi4py import MPI
    color = 0 if logical is not None else MPI.UNDEFINED
    key = logical if logical is not None else 0
    if base.backend == "ulfm":
        from planaria.comm.ulfm import UlfmComm
        sub = base.mpi.Split(color, key)
        return None if logical is None else UlfmComm(sub)
    from planaria.comm.sim import SimComm, sim_state
    w = sim_state()
    pairs = base.allgather((logical, base._world_of(base.rank)))   # (logical, world rank)
    members = [wr for lg, wr in sorted(p for p in pairs if p[0] is not None)]
    sub = base.mpi.Split(color, key)
    return None if logical is None else SimComm(w, sub, f"{base._cid}.x{tag}", members)


def detect(comm: pl.Comm, victims: set[int]) -> None:
    """Spin on Barrier until every victim (ranks of ``comm``) is known failed, or someone revoked."""
    t0 = time.time()
    while time.time() - t0 < 30:
        try:
            comm.Barrier()
        except pl.RevokedError:
            return                     # another survivor noticed first; shrink agrees on the failures
        except pl.FailureError:
            pass
        if victims <= comm.get_failed():
            return
        time.sleep(0.01)
    check(False, f"failures {sorted(victims)} not all detected (known {sorted(comm.get_failed())})")


def recover(world: pl.Comm, wr_of: list[int], victims: set[int], logical: dict[int, int | None], tag: str):
    """Revoke + shrink ``world`` (whose rank i is world rank ``wr_of[i]``) until no victim is left in it;
    then build the working comm with the new logical map (world rank -> logical)."""
    expect = world.size - len(victims)
    detect(world, {wr_of.index(v) for v in victims})
    for _ in range(5):
        world.revoke()
        new = world.shrink()
        if new.size == expect:
            break
        check(new.size > expect, f"shrunk to {new.size}, expected {expect}")
        world = new                    # a victim was still dying at shrink time: once more
        time.sleep(0.2)
    check(new.size == expect, f"shrunk to {new.size}, expected {expect}")
    wr_of_new = new.allgather(WR)
    check(not (set(wr_of_new) & victims), f"victims {sorted(victims)} still in {wr_of_new}")
    working = reorder(new, logical.get(WR), tag)
    return new, working, wr_of_new


def make_store(case: str, d: str):
    if case.startswith("memory2"):
        return MemoryStore(copies=2, distance=2)
    if case.startswith("memory"):
        return MemoryStore(copies=1, distance=1)
    if case.startswith("xor"):
        return XorStore(group_size=3)
    if case.startswith("file"):
        return FileStore(d)
    if case.startswith("multi"):
        return MultiLevel([(XorStore(group_size=3), 1), (FileStore(d), 2)])
    raise SystemExit(f"unknown case {case}")


# -- cases: (working ranks N, spares S, rounds of [victim logical ranks]) --------------------
# Each round kills the given logical ranks (all at once) and puts spares in their places.
CASES = {
    "memory": (5, 2, [[2], [1]]),          # 2nd round kills 1, whose only copy the spare at 2 re-received
    "memory2": (6, 2, [[1, 3]]),           # copies=2, distance=2: 3 holds 1's copy, 1 holds 3's; 5 holds both
    "xor": (6, 2, [[1], [0]]),             # groups {0,1,2} {3,4,5}; then 0 in the same group: parity re-seeded
    "xor_two": (6, 2, [[0, 2]]),           # two in one group: xor cannot; restorable None
    "file": (4, 1, [[3]]),
    "multi": (6, 2, [[0, 2]]),             # xor every version cannot; file (every 2nd) brings back version 2
    "memory_midsave": (5, 1, [[2]]),       # 2 dies instead of saving 3: 1 and 3, its partners, raise
    "xor_midsave": (6, 1, [[1]]),          # 1 dies instead of saving 3: its group raises, the other saves 3
}


def main() -> None:
    n, spares, rounds = CASES[CASE]
    check(WORLD.size == n + spares, f"run with {n + spares} processes")
    store = make_store(CASE, DIR)
    logical = LOGICAL
    logical.update({wr: (wr if wr < n else None) for wr in range(WORLD.size)})
    working = reorder(WORLD, logical[WR], "0")
    world = WORLD
    wr_of = list(range(WORLD.size))
    saved = [1, 2, 3] if CASE in ("multi", "xor_two") else [1, 2]
    if working is not None:
        for v in saved:
            store.save(working, v, state_for(v, working.rank))
        check(store.versions() >= {saved[-1]} or CASE == "multi", f"versions {store.versions()}")
        if CASE.endswith("_midsave"):
            try:
                WORLD.Barrier()        # every rank holds version 2 in full before the victim dies
            except pl.FailureError:
                pass                   # the victim died before this rank left the barrier
            if working.rank in rounds[0]:
                pl.fail_stop("checkpoint test victim, instead of saving version 3")
            try:
                store.save(working, 3, state_for(3, working.rank))
            except pl.FailureError:
                pass                   # a partner of the victim (which then revoked the communicator)
    try:
        world.Barrier()
    except pl.FailureError:
        pass                           # a victim of the first round died before this rank left the barrier
    spare_pool = list(range(n, n + spares))
    for rnd, victims_logical in enumerate(rounds):
        victims = {wr for wr, lg in logical.items() if lg in victims_logical}
        if WR in victims:
            pl.fail_stop(f"checkpoint test victim, round {rnd}")
        fresh = set(victims_logical)
        for lg in victims_logical:
            sp = spare_pool.pop(0)
            logical[sp] = lg
        for wr in victims:
            logical[wr] = None
        world, working, wr_of = recover(world, wr_of, victims, logical, str(rnd + 1))
        if working is not None:
            restore_round(store, working, rnd, fresh, n)
        # the next round's victims must not die while others still finish this round (a store's
        # last barrier would raise there): one more barrier on the world, failures tolerated
        try:
            world.Barrier()
        except pl.FailureError:
            pass
    print(f"OK {CASE} {WR}", flush=True)


def restore_round(store, working: pl.Comm, rnd: int, fresh: set[int], n: int) -> None:
    check(working.size == n, f"working size {working.size}")
    check(working.rank == LOGICAL[WR], f"logical rank {working.rank} != {LOGICAL[WR]}")
    want = expected_version(rnd)
    got_v = store.restorable(working, fresh)
    check(got_v == want, f"round {rnd}: restorable {got_v}, expected {want}")
    if want is None:
        return
    st = store.restore(working, want, fresh)
    check(same(st, state_for(want, working.rank)), f"round {rnd}: state of logical {working.rank} differs")
    if CASE.endswith("_midsave"):
        # a save on the repaired communicator (the barrier of the interrupted save is never waited
        # for), then a roll-back to it
        store.save(working, 3, state_for(3, working.rank))
        check(store.versions() == {2, 3}, f"versions {store.versions()} after saving 3 again")
        st = store.restore(working, 3, set())
        check(same(st, state_for(3, working.rank)), f"state of logical {working.rank} at version 3 differs")
    if CASE == "multi":
        # the xor level was re-seeded from the file version: it alone can now survive one loss per group
        check(store.levels[0][0].restorable(working, {1}) == want, "xor level re-seeded")


def expected_version(rnd: int) -> int | None:
    if CASE == "xor_two":
        return None
    if CASE == "multi":
        return 2
    return 2


CASE = sys.argv[1]
LOGICAL: dict[int, int | None] = {}        # world rank -> logical rank (None: not working)
WORLD = pl.world(sys.argv[2])
WR = WORLD.rank
DIR = sys.argv[3] if len(sys.argv) > 3 else "."
main()
