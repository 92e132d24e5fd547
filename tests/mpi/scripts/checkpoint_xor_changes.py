"""XOR saves whose states change shape between versions: ``mpiexec -n 7 python
checkpoint_xor_changes.py BACKEND``.

Groups of 4 on 7 ranks ([0..3], [4..6]). Versions 1..7 are saved, each with new values; at
versions 3 and 5 rank 2's state grows and shrinks again (the group's chunk size changes), at
version 6 rank 5's array takes another dtype of the same byte size (its description changes,
its size does not). After each save, rank 2 and then rank 5 start over with an empty store
and every rank restores the version just saved: every state must come back bit-exact. A save
whose every description is that of the previous version (the same arrays with new values)
must not exchange descriptions (no ``metadata`` phase in ``last_save``), one after a change
must, in the group of the rank that changed only; also right after a restore, where the rebuilt
ranks hold descriptions received from the others. Every rank that checks out prints ``OK changes <rank>``.
"""
from __future__ import annotations

import sys

import numpy as np

import planaria as pl
from planaria.checkpoint import XorStore

from ckpt_common import checker, same

CHANGED = {3: 2, 5: 2, 6: 5}        # version -> the rank whose description changes at it


def state(version: int, rank: int) -> dict[str, np.ndarray]:
    """Rank ``rank``'s state at ``version`` (see the module docstring for the changes)."""
    rng = np.random.default_rng(1000 * version + rank)
    cells = 3000 + 17 * rank + (9000 if rank == 2 and version in (3, 4) else 0)
    u = rng.standard_normal(cells)
    if rank == 5 and version >= 6:
        u = u.view(np.int64)
    return {"u": u, "v": np.array(version, dtype=np.int32)}


def main() -> None:
    comm = pl.world(sys.argv[1])
    r = comm.rank
    check = checker("changes", r)
    store = XorStore(group_size=4)
    for v in range(1, 8):
        mine = state(v, r)
        store.save(comm, v, mine)
        described = "metadata" in store.last_save
        # the first save, and a save at a change in this rank's group (the other group's saves
        # are not held up); never right after a restore without a change
        want = v == 1 or (v in CHANGED and CHANGED[v] // 4 == r // 4)
        check(described == want, f"version {v}: descriptions exchanged: {described}")
        for f in (2, 5):
            if r == f:
                store = XorStore(group_size=4)
            offers = comm.allgather(None if r == f else store.offer(r))
            back = store.restore(comm, v, {f}, into=None if r == f else mine, offers=offers)
            check(same(back, mine), f"state of version {v} after rebuilding rank {f}")
    comm.Barrier()
    print(f"OK changes {r}", flush=True)


if __name__ == "__main__":
    main()
