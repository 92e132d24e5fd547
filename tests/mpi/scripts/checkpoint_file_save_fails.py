"""A file save that fails anywhere counts nowhere: ``mpiexec -n 4 python checkpoint_file_save_fails.py BACKEND DIR``.

Versions 1 to 3 are saved (two kept: each save takes the files of the oldest kept version). Save 4
then fails twice: first rank 0 cannot remove the manifest of version 2, whose files the save
takes (the removal runs on a helper thread while the ranks write and is found failed only after
the gather and the fsyncs); then rank 2 cannot write its file. Each time the save raises on every
rank, version 4 has no manifest, and version 3 is the newest restorable version, bit-exact.
Save 4 then goes through. Every rank that checks out prints ``OK filesavefails <rank>``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import planaria as pl
import planaria.checkpoint.file as fmod
from planaria.checkpoint import FileStore
from planaria.checkpoint.file import MANIFEST, vdir_name
from planaria.checkpoint.store import CheckpointError

from ckpt_common import checker, state_of


def state_for(version: int, rank: int) -> dict[str, np.ndarray]:
    return state_of(version, rank, 30000)


def refuse_manifest_of(version: int) -> None:
    real = fmod._unlink_manifest

    def refuse(vdir: Path) -> None:
        if vdir.name == vdir_name(version):
            time.sleep(0.05)
            raise PermissionError(f"{vdir}: cannot remove the manifest")
        real(vdir)
    fmod._unlink_manifest = refuse


def fail_rank_file(*args: object) -> tuple[int, str, object]:
    raise OSError("no space left for the rank file")


def save_fails(store: FileStore, what: str) -> None:
    try:
        store.save(COMM, 4, state_for(4, R))
        check(False, f"save 4 went through although {what}")
    except (OSError, CheckpointError):           # the failing rank's own error, CheckpointError elsewhere
        pass
    store.wait_pruned()
    COMM.Barrier()
    check(not (Path(DIR) / vdir_name(4) / MANIFEST).exists(), f"version 4 has a manifest although {what}")
    check(store.restorable(COMM, set()) == 3, f"version 3 is not the newest restorable one after {what}")
    back = FileStore(DIR).read_rank(3, R, COMM.size)
    check(all(back[k].tobytes() == state_for(3, R)[k].tobytes() for k in back), "state at version 3 differs")


COMM = pl.world(sys.argv[1])
R = COMM.rank
check = checker("filesavefails", R)
DIR = sys.argv[2]
store = FileStore(DIR, keep=2)
for v in (1, 2, 3):
    store.save(COMM, v, state_for(v, R))
unlink = fmod._unlink_manifest
if R == 0:
    refuse_manifest_of(2)
save_fails(store, "rank 0 could not remove the manifest of version 2")
fmod._unlink_manifest = unlink
write_rank = fmod._write_rank
if R == 2:
    fmod._write_rank = fail_rank_file
save_fails(store, "rank 2 could not write its file")
fmod._write_rank = write_rank
store.save(COMM, 4, state_for(4, R))
check(store.restorable(COMM, set()) == 4, "version 4 is not restorable after it was saved")
print(f"OK filesavefails {R}", flush=True)
