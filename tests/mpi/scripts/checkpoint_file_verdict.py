"""A file restore with a fresh rank is all or nothing: ``mpiexec -n 4 python checkpoint_file_verdict.py BACKEND DIR``.

Versions 1 and 2 are saved; logical rank 1 is fresh. A flipped byte in rank 2's file of version 2
(a survivor), then in rank 1's own file: each time the restore of version 2 raises
``CheckpointError`` on every rank, the fresh one included. Version 1 then restores bit-exact
everywhere. Every rank that checks out prints ``OK fileverdict <rank>``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import planaria as pl
from planaria.checkpoint import FileStore
from planaria.checkpoint.file import rank_file_name, vdir_name
from planaria.checkpoint.store import CheckpointError

from ckpt_common import checker, state_of


def state_for(version: int, rank: int) -> dict[str, np.ndarray]:
    return state_of(version, rank, 30000)


def flip(rank: int) -> None:
    """Rank ``rank`` flips one byte in the middle of its file of version 2 (same size)."""
    if R == rank:
        p = Path(DIR) / vdir_name(2) / rank_file_name(rank)
        raw = bytearray(p.read_bytes())
        raw[len(raw) // 2] ^= 0x10
        p.write_bytes(raw)
    COMM.Barrier()


def refused(store: FileStore, who: int) -> None:
    try:
        store.restore(COMM, 2, {1})
        check(False, f"restore of version 2 went through with rank {who}'s file damaged")
    except CheckpointError:
        pass


COMM = pl.world(sys.argv[1])
R = COMM.rank
check = checker("fileverdict", R)
DIR = sys.argv[2]
store = FileStore(DIR)
for v in (1, 2):
    store.save(COMM, v, state_for(v, R))
flip(2)
refused(store, 2)
flip(2)                                           # rank 2's file as saved again
flip(1)
refused(store, 1)
back = store.restore(COMM, 1, {1})
check(list(back) == ["u", "v"] and all(back[k].tobytes() == state_for(1, R)[k].tobytes() for k in back),
      "state at version 1 differs")
print(f"OK fileverdict {R}", flush=True)
