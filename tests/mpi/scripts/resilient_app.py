"""A step loop under planaria's recovery driver; every working rank checks its final state.

Each logical rank L holds x = L + sum(range(steps)) * (L + 1) at the end, whatever failed
on the way. Prints ``RESULT {json}`` per rank with its role and whether its state is right.
"""
import json
import os
import sys
import time

import numpy as np

import planaria as pl
from planaria.checkpoint import MemoryStore
from planaria.comm import msglog
from planaria.recovery.driver import Resilient, SparesExhausted

steps = int(sys.argv[1])
every = int(sys.argv[2]) if len(sys.argv) > 2 else 5
mode = sys.argv[3] if len(sys.argv) > 3 else "stop"
with_finish = len(sys.argv) > 4 and sys.argv[4] == "finish"
pause = float(os.environ.get("RESILIENT_APP_STEP_SLEEP", "0"))   # seconds per step (lets spares poll)

poll = os.environ.get("RESILIENT_APP_SPARE_POLL")
res = Resilient(MemoryStore(copies=1), every=every, on_exhausted=mode, spare_poll=float(poll) if poll else None)


def init(comm):
    return {"x": np.full(1000, float(comm.rank)), "trace": np.zeros(steps)}


def step(comm, state, i):
    if pause:
        time.sleep(pause)
    state["x"] += i * (comm.rank + 1)
    state["trace"][i] = comm.allreduce(1)          # working ranks present at this step


def finish(comm, state):
    """The protected epilogue: every working rank's x, summed (a collective a failure can hit)."""
    return {"sum": comm.allreduce(float(state["x"][0])), "x": state["x"], "size": comm.size}


try:
    state = res.run(init, step, steps, finish=finish if with_finish else None)
except SparesExhausted as e:
    print(f"EXHAUSTED {res.world.rank}: {e}", flush=True)
    sys.exit(0)
L = res.logical_rank
lg = msglog.log()           # detection on (planaria run): the failure errors it recorded
failures = [{"name": f[1], "site": f[4]} for f in lg.failures] if lg is not None else None
if state is None:
    print("RESULT " + json.dumps({"world": pl.world().rank, "role": res.role, "logical": None,
                                  "spare_wakes": res.spare_wakes, "failures": failures}), flush=True)
else:
    expect = L + sum(range(steps)) * (L + 1)
    ok = bool(np.all(state["x"] == expect))
    if with_finish:
        ok = ok and state["sum"] == sum(k + sum(range(steps)) * (k + 1) for k in range(state["size"]))
    print("RESULT " + json.dumps({"world": pl.world().rank, "role": res.role, "logical": L, "ok": ok,
                                  "spare_wakes": res.spare_wakes, "failures": failures,
                                  "recoveries": [r.__dict__ | {"total_s": r.total_s} for r in res.recoveries]}),
          flush=True)
