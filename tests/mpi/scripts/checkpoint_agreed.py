"""A restore told every rank's offers: ``mpiexec -n 4 python checkpoint_agreed.py BACKEND``.

Versions 1 and 2 are saved in a memory store (copies=1, distance=1) and an XOR store (groups of
2); logical rank 1 starts over with an empty store (fresh). Every rank's ``offer`` is exchanged
(as the recovery driver does) and passed to ``restore``:

- rank 2 dropped version 2: the offers show it, so the restore of version 2 does not trust them
  and raises ``CheckpointError`` on every rank, the survivors' versions unchanged;
- version 1, rank 3 (the source of none of rank 1's data) entering the restore 0.5 s late: rank 1
  has its state back before rank 3 enters (it waits for no status from it), and every rank its
  state bit-exact, the survivors' in the arrays they passed as ``into``.

Every rank that checks out prints ``OK agreed <rank>``.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import planaria as pl
from planaria.checkpoint import MemoryStore, XorStore
from planaria.checkpoint.store import CheckpointError

from ckpt_common import checker, saved_with_a_gap, state_of

LATE = 0.5


def state_for(version: int, rank: int) -> dict[str, np.ndarray]:
    return state_of(version, rank, 20000)


def offers_of(store) -> list:  # type: ignore[no-untyped-def]
    return COMM.allgather(None if R == 1 else store.offer(R))


def refused(store) -> None:  # type: ignore[no-untyped-def]
    """Version 2 is not held by rank 2: offers or not, the restore raises everywhere."""
    before = store.versions()
    try:
        store.restore(COMM, 2, {1}, offers=offers_of(store))
        check(False, f"{store!r}: restore of version 2 went through")
    except CheckpointError:
        pass
    check(store.versions() == before, f"{store!r}: versions {store.versions()} changed from {before}")


def late_survivor(store) -> None:  # type: ignore[no-untyped-def]
    """Version 1 with rank 3 late: rank 1 is done before rank 3 enters."""
    offers = offers_of(store)
    mine = None if R == 1 else {k: np.zeros_like(a) for k, a in state_for(1, R).items()}
    COMM.Barrier()
    if R == 3:
        time.sleep(LATE)
    t_in = time.time()
    back = store.restore(COMM, 1, {1}, into=mine, offers=offers)
    t_out = time.time()
    check(list(back) == ["u", "v"] and all(back[k].tobytes() == state_for(1, R)[k].tobytes() for k in back),
          f"{store!r}: state at version 1 differs")
    if mine is not None:
        check(all(back[k] is mine[k] for k in back), f"{store!r}: not restored into the arrays passed")
    check(store.versions() == {1}, f"{store!r}: versions {store.versions()} after restoring 1")
    times = COMM.allgather((t_in, t_out))
    if R == 1:
        check(times[1][1] < times[3][0], f"{store!r}: rank 1 done at {times[1][1]:.3f}, "
                                         f"rank 3 entered at {times[3][0]:.3f}")


def run(make) -> None:  # type: ignore[no-untyped-def]
    store = saved_with_a_gap(make, COMM, R, state_for)
    refused(store)
    late_survivor(store)


COMM = pl.world(sys.argv[1])
R = COMM.rank
check = checker("agreed", R)
run(lambda: MemoryStore(copies=1, distance=1))
run(lambda: XorStore(group_size=2))
print(f"OK agreed {R}", flush=True)
