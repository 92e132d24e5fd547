"""A step loop with file checkpoints in the job directory, for ``planaria run --restart``.

argv: STEPS EVERY SLEEP [DIE_AT]. Each step adds ``i * (rank + 1)`` to every rank's state and sleeps SLEEP
seconds; a checkpoint goes to ``$PLANARIA_JOB_DIR/checkpoints`` every EVERY steps. A relaunched
job resumes from the newest complete checkpoint (``Resilient.resumed_from``). With DIE_AT, every
rank of the first attempt (``PLANARIA_RESTART=0``) kills itself (SIGKILL) at that step.

Rank 0 prints ``START {json}`` (attempt, resumed version, hosts) and ``RESULT {json}`` at the end;
``ok`` is true when every rank holds the value of an uninterrupted run.
"""
import json
import os
import signal
import socket
import sys
import time

import numpy as np

import planaria as pl
from planaria.checkpoint import FileStore
from planaria.recovery.driver import Resilient

steps, every, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
die_at = int(sys.argv[4]) if len(sys.argv) > 4 else None
jobdir = os.environ["PLANARIA_JOB_DIR"]
restart = int(os.environ.get("PLANARIA_RESTART", "0"))
store = FileStore(os.path.join(jobdir, "checkpoints"))
res = Resilient(store, every=every)
started = {"done": False}


def init(comm):
    return {"x": np.full(1000, float(comm.rank))}


def announce(comm, first):
    hosts = comm.allgather(socket.gethostname())
    if comm.rank == 0:
        print("START " + json.dumps({"restart": restart, "resumed_from": res.resumed_from,
                                     "first_step": first, "hosts": hosts}), flush=True)


def step(comm, state, i):
    if restart == 0 and i == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if not started["done"]:
        started["done"] = True
        announce(comm, i)
    state["x"] += i * (comm.rank + 1)
    comm.allreduce(1)
    time.sleep(pause)


state = res.run(init, step, steps)
comm = res.comm
rank = comm.rank
expect = rank + sum(range(steps)) * (rank + 1)
good = comm.allreduce(int(bool(np.all(state["x"] == expect))))
if rank == 0:
    print("RESULT " + json.dumps({"ok": good == comm.size, "restart": restart,
                                  "resumed_from": res.resumed_from, "size": comm.size}), flush=True)
pl.finalize(0)
