"""A short ``Resilient`` loop with a two-level store, for ``planaria checkpoints``.

argv: STEPS EVERY [DIR]. Partner memory at every checkpoint, files (DIR, by default
``$PLANARIA_JOB_DIR/checkpoints``; the three newest kept) at every 2nd checkpoint; a run given the
DIR of an earlier one resumes from its files. Each rank's state grows with its rank, so the
per-rank sizes differ. Rank 0 prints ``DONE {json}``: the versions the file level kept and the
version the run resumed from.
"""
import json
import os
import sys

import numpy as np

from planaria.checkpoint import FileStore, MemoryStore, MultiLevel
from planaria.recovery.driver import Resilient

steps, every = int(sys.argv[1]), int(sys.argv[2])
where = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.environ["PLANARIA_JOB_DIR"], "checkpoints")
files = FileStore(where, keep=3)
res = Resilient(MultiLevel([(MemoryStore(copies=1), 1), (files, 2)]), every=every)


def init(comm):
    return {"x": np.full(1000 * (comm.rank + 1), float(comm.rank))}


def step(comm, state, i):
    state["x"] += comm.allreduce(i)


state = res.run(init, step, steps=steps)
files.wait_pruned()
if res.comm is not None and res.comm.rank == 0:
    print("DONE " + json.dumps({"file_versions": sorted(files.versions()), "resumed_from": res.resumed_from}), flush=True)
