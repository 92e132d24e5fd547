"""A restore with a fresh rank while a survivor lacks the version: ``mpiexec -n 4 python checkpoint_partial.py BACKEND``.

Versions 1 and 2 are saved in a memory and an XOR store; logical rank 1 starts over with an
empty store (fresh) and rank 2 (the source of rank 1's state for the memory store) drops
version 2. Restoring version 2 must raise ``CheckpointError`` on every rank and leave the
survivors' versions alone; restoring version 1 right after, on the same communicator (no stray
message left from the failed attempt), must give every rank its state back bit-exact. Every
rank that checks out prints ``OK partial <rank>``.
"""
from __future__ import annotations

import sys

import numpy as np

import planaria as pl
from planaria.checkpoint import MemoryStore, XorStore
from planaria.checkpoint.store import CheckpointError

from ckpt_common import checker, saved_with_a_gap, state_of


def state_for(version: int, rank: int) -> dict[str, np.ndarray]:
    return state_of(version, rank, 500)


def run(make) -> None:  # type: ignore[no-untyped-def]
    store = saved_with_a_gap(make, COMM, R, state_for)
    before = store.versions()
    try:
        store.restore(COMM, 2, {1})
        check(False, f"{store!r}: restore of version 2 went through")
    except CheckpointError:
        pass
    check(store.versions() == before, f"{store!r}: versions {store.versions()} changed from {before}")
    back = store.restore(COMM, 1, {1})
    check(list(back) == ["u", "v"] and all(back[k].tobytes() == state_for(1, R)[k].tobytes() for k in back),
          f"{store!r}: state at version 1 differs")
    check(store.versions() == {1}, f"{store!r}: versions {store.versions()} after restoring 1")


COMM = pl.world(sys.argv[1])
R = COMM.rank
check = checker("partial", R)
run(lambda: MemoryStore())
run(lambda: XorStore(group_size=4))
print(f"OK partial {R}", flush=True)
