"""A small Resilient loop whose ``on_recovery`` callback prints what it is given.

Each working rank prints ``CALLBACK {json}`` per recovery it is told of, every process ``EVENT
{json}`` per ``PLANARIA_EVENT_RECOVERED`` event it receives, ``RESUMED {json}`` when its first step
after a recovery ends, and ``RESULT {json}`` at the end (its role and logical rank). With ``raise`` as the third argument the callback raises on
logical rank 0; with ``one``, only job rank 2 has the callback, and it raises; with ``ps``, logical rank 0 prints ``planaria ps`` of its own job at the end
(after a heartbeat has carried every rank's new role), each line prefixed ``PS``.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

import planaria as pl
from planaria import events
from planaria.checkpoint import MemoryStore
from planaria.recovery.driver import Recovery, Resilient

steps = int(sys.argv[1])
every = int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "ok"


def on_recovery(rec: Recovery) -> None:
    print("CALLBACK " + json.dumps({"world": pl.world().rank, "logical": res.logical_rank, "role": res.role,
                                    **rec.to_dict()}), flush=True)
    if (mode == "raise" and res.logical_rank == 0) or mode == "one":
        raise ValueError("the callback's own bug")


# ``one``: only job rank 2 has a callback (it raises); the others must still learn that it raised
res = Resilient(MemoryStore(copies=1), every=every,
                on_recovery=on_recovery if mode != "one" or pl.world().rank == 2 else None)
events.register(events.RECOVERED, lambda ev, results: print(
    "EVENT " + json.dumps({"world": pl.world().rank, "source": ev.source, "affected": sorted(ev.affected),
                           **ev.info}), flush=True), name="recovered-printer")


def init(comm):
    return {"x": np.full(100, float(comm.rank))}


told = [0]


def step(comm, state, i):
    time.sleep(0.01)
    state["x"] += comm.allreduce(1.0)
    if len(res.recoveries) > told[0]:         # the first step this rank ran after a recovery ends here
        told[0] = len(res.recoveries)
        print("RESUMED " + json.dumps({"world": pl.world().rank, "t": time.time()}), flush=True)


state = res.run(init, step, steps)
ok = state is None or bool(np.all(state["x"] == res.logical_rank + steps * res.comm.size))
print("RESULT " + json.dumps({"world": pl.world().rank, "logical": res.logical_rank, "role": res.role,
                              "ok": ok}), flush=True)
if mode == "ps" and res.logical_rank == 0:
    time.sleep(0.7)
    ps = subprocess.run([sys.executable, "-m", "planaria.cli.main", "ps", os.environ["PLANARIA_JOB_DIR"]],
                        capture_output=True, text=True, timeout=30)
    for line in (ps.stdout + ps.stderr).splitlines():
        print("PS " + line, flush=True)
