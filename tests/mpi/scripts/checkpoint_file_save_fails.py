"""A file save that fails on one rank counts nowhere: ``mpiexec -n 4 python checkpoint_file_save_fails.py BACKEND DIR``.

Versions 1 to 3 are saved (two kept: each save takes the files of the oldest kept version, whose
manifest stays until the save's pruning). Save 4 then fails on rank 2 after it wrote and synced
the file it took from version 2: the save raises on every rank, version 4 has no manifest, and
version 3 is the only restorable version (version 2 keeps its manifest but not rank 2's file),
bit-exact. Save 4 then goes through and version 2 is gone. Every rank that checks out prints
``OK filesavefails <rank>``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

import planaria as pl
import planaria.checkpoint.file as fmod
from planaria.checkpoint import FileStore
from planaria.checkpoint.file import MANIFEST, vdir_name
from planaria.checkpoint.store import CheckpointError

from ckpt_common import checker, state_of


def state_for(version: int, rank: int) -> dict[str, np.ndarray]:
    return state_of(version, rank, 30000)


def write_then_fail(*args: Any, **kwargs: Any) -> Any:
    WRITE_RANK(*args, **kwargs)[2]()             # written and synced, then lost
    raise OSError("rank file lost after the write")


COMM = pl.world(sys.argv[1])
R = COMM.rank
check = checker("filesavefails", R)
DIR = sys.argv[2]
WRITE_RANK = fmod._write_rank
store = FileStore(DIR, keep=2)
for v in (1, 2, 3):
    store.save(COMM, v, state_for(v, R))
if R == 2:
    fmod._write_rank = write_then_fail
try:
    store.save(COMM, 4, state_for(4, R))
    check(False, "save 4 went through although rank 2 lost its file")
except (OSError, CheckpointError):              # rank 2's own error, CheckpointError elsewhere
    pass
fmod._write_rank = WRITE_RANK
store.wait_pruned()
COMM.Barrier()
check(not (Path(DIR) / vdir_name(4) / MANIFEST).exists(), "version 4 has a manifest after a failed save")
check(store.restorable_versions(COMM, set()) == {3}, "a version other than 3 counts after the failed save")
back = FileStore(DIR).read_rank(3, R, COMM.size)
check(all(back[k].tobytes() == state_for(3, R)[k].tobytes() for k in back), "state at version 3 differs")
store.save(COMM, 4, state_for(4, R))
store.wait_pruned()
COMM.Barrier()
check(store.restorable_versions(COMM, set()) == {3, 4}, "versions 3 and 4 are not both restorable")
check(not (Path(DIR) / vdir_name(2)).exists(), "version 2 was not deleted after save 4")
print(f"OK filesavefails {R}", flush=True)
