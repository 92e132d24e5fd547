"""An XOR store rebuilds a fresh rank at every position of its group: ``mpiexec -n 7 python
checkpoint_xor_positions.py BACKEND GROUP_SIZE``.

Version 1 is saved (states of different sizes per rank); then, for each logical rank ``f`` in
turn, ``f`` starts over with an empty store and every rank restores version 1 with ``fresh={f}``
(with the offers, as the recovery driver passes them). Each rebuilt rank then serves as a
survivor when the next member of its group is rebuilt, so a store built by a restore is used as
a source too. Every rank's state must come back bit-exact every time, and a roll-back (no fresh
rank) at the end must give every rank its own state. Every rank that checks out prints
``OK positions <rank>``.
"""
from __future__ import annotations

import sys

import planaria as pl
from planaria.checkpoint import XorStore

from ckpt_common import checker, same, state_of


def main() -> None:
    comm = pl.world(sys.argv[1])
    group_size = int(sys.argv[2])
    r, n = comm.rank, comm.size
    check = checker("positions", r)
    mine = state_of(1, r, 5000)
    store = XorStore(group_size=group_size)
    store.save(comm, 1, mine)
    for f in range(n):
        if r == f:
            store = XorStore(group_size=group_size)
        offers = comm.allgather(None if r == f else store.offer(r))
        back = store.restore(comm, 1, {f}, offers=offers)
        check(same(back, mine), f"state after rebuilding rank {f}")
    back = store.restore(comm, 1, set())
    check(same(back, mine), "state after a roll-back")
    comm.Barrier()
    print(f"OK positions {r}", flush=True)


if __name__ == "__main__":
    main()
