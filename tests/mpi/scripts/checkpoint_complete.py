"""``wait_complete``: ``mpiexec -n 4 python checkpoint_complete.py BACKEND DIR``.

Versions 1 and 2 are saved together; rank 3 enters the save of version 3 0.5 s late. A memory or
XOR save returns on a rank as soon as its own part is in, so rank 1 (whose partners are not held
up by rank 3) is out of it before rank 3 is in; ``wait_complete`` must hold every rank until every
rank holds version 3. Stores: memory (copies=1), XOR (groups of 2), memory plus files every 2nd
version. Every rank that checks out prints ``OK complete <rank>``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import planaria as pl
from planaria.checkpoint import FileStore, MemoryStore, MultiLevel, XorStore

from ckpt_common import checker, state_of

LATE = 0.5


def held_times(peer) -> list[float]:  # type: ignore[no-untyped-def]
    """When each save of ``peer`` (a memory or XOR store) held its version here: it posts the barrier
    that completes the save only then, so its clock is read just before that post."""
    stamps: list[float] = []
    start = peer._done.start

    def stamped(comm):  # type: ignore[no-untyped-def]
        stamps.append(time.time())
        return start(comm)
    peer._done.start = stamped
    return stamps


def run(store, peer) -> None:  # type: ignore[no-untyped-def]
    held = held_times(peer)
    for v in (1, 2):
        store.save(COMM, v, state_of(v, R, 20000))
    COMM.Barrier()
    if R == 3:
        time.sleep(LATE)
    t_in = time.time()
    store.save(COMM, 3, state_of(3, R, 20000))
    t_out = time.time()
    store.wait_complete(COMM)
    t_done = time.time()
    times = COMM.allgather((t_in, t_out, held[-1], t_done))
    check(times[1][1] < times[3][0], f"{store!r}: rank 1's save ended at {times[1][1]:.3f}, after rank 3 "
                                     f"entered its own at {times[3][0]:.3f}: nothing to wait for")
    last = max(t[2] for t in times)
    check(t_done > last, f"{store!r}: wait_complete returned at {t_done:.3f}, the last rank held "
                         f"version 3 from {last:.3f}")
    check(3 in store.versions(), f"{store!r}: version 3 not held")


COMM = pl.world(sys.argv[1])
R = COMM.rank
check = checker("complete", R)
mem = MemoryStore(copies=1, distance=1)
run(mem, mem)
xor = XorStore(group_size=2)
run(xor, xor)
level = MemoryStore(copies=1)
run(MultiLevel([(level, 1), (FileStore(Path(sys.argv[2]) / "multi"), 2)]), level)
print(f"OK complete {R}", flush=True)
