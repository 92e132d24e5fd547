"""File checkpoints across jobs: ``mpiexec -n N python checkpoint_restart.py write|read:V BACKEND DIR``.

``write`` saves versions 1, 2, 3 and ends. ``read:V`` is a new job started from scratch: every
rank is fresh; ``FileStore.latest_complete`` and the collective ``restorable`` must both name V,
and the restored states must be bit-exact. Each rank that checks out prints ``OK <mode> <rank>``.
"""
from __future__ import annotations

import os
import sys

import numpy as np

import planaria as pl
from planaria.checkpoint import FileStore


def state_for(version: int, rank: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(97 * version + rank)
    return {"u": rng.standard_normal((50 + rank, 3)), "k": rng.integers(0, 255, 11).astype(np.uint8),
            "v": np.array(version)}


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAIL {MODE} rank {comm.rank}: {what}", flush=True)
        os._exit(3)


MODE, BACKEND, DIR = sys.argv[1], sys.argv[2], sys.argv[3]
comm = pl.world(BACKEND)
store = FileStore(DIR)
if MODE == "write":
    for v in (1, 2, 3):
        store.save(comm, v, state_for(v, comm.rank))
    check(store.versions() == {2, 3}, f"versions {store.versions()}")
else:
    want = int(MODE.split(":")[1])
    latest = FileStore.latest_complete(DIR, nranks=comm.size)
    check(latest == want, f"latest_complete {latest}, expected {want}")
    everyone = set(range(comm.size))
    got = store.restorable(comm, everyone)
    check(got == want, f"restorable {got}, expected {want}")
    st = store.restore(comm, want, everyone)
    exp = state_for(want, comm.rank)
    check(list(st) == list(exp) and all(st[k].dtype == exp[k].dtype and st[k].shape == exp[k].shape
                                        and st[k].tobytes() == exp[k].tobytes() for k in exp), "state differs")
print(f"OK {MODE} {comm.rank}", flush=True)
