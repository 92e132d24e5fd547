"""Message log in a real job: communicator ids agree across ranks, collectives are counted, p2p counts match."""
import numpy as np

import planaria as pl
from planaria.comm import msglog

comm = pl.world()
rank, size = comm.rank, comm.size
lg = msglog.log()
assert lg is not None, "detection is off"
d = comm.dup()
s = comm.split(rank % 2, rank)
comm.Barrier()
comm.allreduce(rank)                    # object collective built on buffer ones: counted once
buf = np.zeros(4)
right, left = (rank + 1) % size, (rank - 1) % size
for i in range(3):
    comm.Sendrecv(np.full(4, float(rank)), dest=right, sendtag=i, recvbuf=buf, source=left, recvtag=i)
req = d.Irecv(buf, source=left, tag=9)
d.Send(np.ones(4), dest=right, tag=9)
req.Wait()
s.Allreduce(np.ones(1), np.zeros(1))
ids = sorted(lg.colls())
counts = lg.colls()
sent, recvd = lg.p2p_counts()
everyone = comm.allgather((ids, counts, sent, recvd, lg.members()))
mine = everyone[rank]
assert all(e[0] == everyone[0][0] or set(e[0]) ^ set(everyone[0][0]) <= {"world.s2c0", "world.s2c1"}
           for e in everyone), everyone
assert "world.d1" in counts and f"world.s2c{rank % 2}" in counts, counts
assert counts["world"] == 4, counts       # dup, split, Barrier, allreduce
assert counts[f"world.s2c{rank % 2}"] == 1, counts
assert sent == {str(right): 4} and recvd == {str(left): 4}, (sent, recvd)
assert mine[4]["world"] is None and mine[4]["world.d1"] is None, mine[4]
assert mine[4][f"world.s2c{rank % 2}"] == [r for r in range(size) if r % 2 == rank % 2], mine[4]
assert lg.current() is None
import inspect  # noqa: E402

mon = type(comm)
for name in msglog._SENDS + msglog._RECVS + msglog._BOTH + tuple(msglog._NONBLOCKING) + tuple(msglog._COLLECTIVES):
    want = [(p.name, p.default) for p in inspect.signature(getattr(mon.__bases__[0], name)).parameters.values()]
    got = [(p.name, p.default) for p in inspect.signature(getattr(mon, name)).parameters.values()]
    assert got == want or [n for n, _ in got] == ["self", "a", "k"], (name, got, want)   # same signature, or generic
import inspect
import sys
import time

from planaria.localize import service
from planaria.runtime import bootstrap
from planaria.runtime.bootstrap import set_detection

loc = bootstrap._RT.localizer
src, first = inspect.getsourcelines(service.Service._run)
PAUSED_LINE = first + next(i for i, ln in enumerate(src) if "self._running.wait()" in ln)


def service_line():
    """The line of Service._run the service thread is at."""
    f = sys._current_frames().get(loc._thread.ident)
    while f is not None and f.f_code is not service.Service._run.__code__:
        f = f.f_back
    return f.f_lineno if f is not None else None


def settle(paused, within=2.0):
    deadline = time.monotonic() + within
    while (service_line() == PAUSED_LINE) != paused:
        assert time.monotonic() < deadline, f"service thread at line {service_line()}, paused={paused}"
        time.sleep(0.005)


set_detection(False)                      # within-job overhead measurement: plain classes, service blocked
assert not getattr(type(comm), "_ml_monitored", False) and not getattr(type(d), "_ml_monitored", False)
assert loc.paused
settle(True)                              # blocked in the paused wait, not ticking:
for _ in range(60):                       # still there over more than two idle ticks
    assert service_line() == PAUSED_LINE, service_line()
    time.sleep(0.01)
comm.Sendrecv(np.ones(4), dest=right, sendtag=7, recvbuf=buf, source=left, recvtag=7)
assert lg.p2p_counts() == (sent, recvd)   # nothing recorded while off
set_detection(True)
assert getattr(type(comm), "_ml_monitored", False) and not loc.paused
settle(False)
comm.Sendrecv(np.ones(4), dest=right, sendtag=8, recvbuf=buf, source=left, recvtag=8)
assert lg.p2p_counts()[0] == {str(right): 5}
print(f"OK msglog {rank}", flush=True)
