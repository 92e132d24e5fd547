"""Coordinated checkpoints that survive process failures: partner memory, XOR groups, files, multi-level.

    from planaria.checkpoint import MemoryStore, XorStore, FileStore, MultiLevel
    store = MultiLevel([(MemoryStore(copies=1, distance=1), 1), (FileStore("ckpt"), 10)])
    store.save(comm, version, {"u": u, "step": np.array(i)})
    ...                                   # after a failure: repair comm, then
    v = store.restorable(comm, fresh)     # newest version every rank can get back
    state = store.restore(comm, v, fresh)
    # no spare left: the survivors get the old layout back and redistribute it themselves
    v = store.recoverable_lost(survivors, logical, old_size)
    mine, found = store.recover_lost(survivors, v, logical, old_size)

See docs/checkpoint.md.
"""
from planaria.checkpoint.file import FileStore
from planaria.checkpoint.memory import MemoryStore
from planaria.checkpoint.multilevel import MultiLevel
from planaria.checkpoint.store import KEEP, CheckpointError, CheckpointStore, SaveFailed, pack, unpack
from planaria.checkpoint.xor import XorStore

__all__ = ["CheckpointStore", "CheckpointError", "SaveFailed", "MemoryStore", "XorStore", "FileStore", "MultiLevel",
           "KEEP", "pack", "unpack"]
