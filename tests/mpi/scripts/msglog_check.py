"""Message log in a real job: communicator ids agree across ranks, collectives are counted, p2p counts match."""
import numpy as np
from mpi4py import MPI

import planaria as pl
from planaria.comm import msglog

comm = pl.world()
rank, size = comm.rank, comm.size
lg = msglog.log()
assert lg is not None, "detection is off"
d = comm.dup()
s = comm.split(rank % 2, rank)
comm.Barrier()
comm.allreduce(rank)                    # object collective built on two buffer ones: counts once
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
# every collective method counts on entry, an object collective once (not its two buffer
# collectives): dup, split, Barrier, allreduce
assert counts["world"] == 4, counts
assert all(e[1]["world"] == counts["world"] for e in everyone), everyone
assert counts[f"world.s2c{rank % 2}"] == 1, counts
assert sent == {str(right): 4} and recvd == {str(left): 4}, (sent, recvd)
assert mine[4]["world"] is None and mine[4]["world.d1"] is None, mine[4]
assert mine[4][f"world.s2c{rank % 2}"] == [r for r in range(size) if r % 2 == rank % 2], mine[4]
assert lg.current() is None
assert type(comm).__name__ in ("UlfmComm", "SimComm") and comm._ml_on   # recorded by its own methods


def blocked_in(call, after=0.15):
    """What another thread reads of the application thread while it is blocked in ``call()``."""
    import threading
    import time as _t
    seen = {}

    def peek():
        _t.sleep(after)
        seen["op"], seen["site"] = lg.current(), lg.site()
    th = threading.Thread(target=peek)
    th.start()
    call()
    th.join()
    return seen["op"], seen["site"]


import time  # noqa: E402

# the current operation, read from the stack: a receive the peer answers late, a request's Wait, a collective
if rank == 0:
    op, site = blocked_in(lambda: comm.Recv(buf, source=1, tag=5))  # SITE:recv
    assert op["name"] == "Recv" and op["kind"] == "p2p" and op["peer"] == 1 and op["tag"] == 5, op
    assert op["comm"] == "world" and op["size"] == 32 and 0.0 < op["since"] < 5.0, op
    assert site.startswith(__file__) and "SITE:recv" in open(__file__).read().splitlines()[int(site[len(__file__) + 1:].split()[0]) - 1], site
    req = d.Irecv(buf, source=1, tag=6)
    op, site = blocked_in(req.Wait)
    assert op["name"] == "Wait(Irecv)" and op["peer"] == 1 and op["tag"] == 6 and op["comm"] == "world.d1", op
elif rank == 1:
    time.sleep(0.5)
    comm.Send(np.ones(4), dest=0, tag=5)
    time.sleep(0.5)
    d.Send(np.ones(4), dest=0, tag=6)
comm.Barrier()                                                     # rank 2 comes 0.5 s after rank 0
seq = lg.colls()["world"] + 1
if rank == 0:
    op, site = blocked_in(lambda: comm.bcast("x", root=2))
    assert op["name"] == "bcast" and op["kind"] == "coll" and op["peer"] == 2 and op["seq"] == seq, (op, seq)
else:
    if rank == 2:
        time.sleep(0.5)
    comm.bcast("x", root=2)
assert lg.colls()["world"] == seq                                  # two Bcasts, one collective
# mpi4py's further calls are recorded too: a Cartesian communicator is a child with the same id
# everywhere, Reduce_scatter_block and Iallreduce count as collectives, Ssend as a message; the stack reading
# names them with their arguments (Reduce_scatter_block, Iallreduce's Wait, Probe) (bound to mpi4py's signature for generic wrappers)
cart = comm.Create_cart([size], periods=[True])
assert lg.colls()["world"] == seq + 1 and lg.colls().get("world.cart3") == 0, lg.colls()
assert cart._ml_on and cart._ml_id == "world.cart3"
if rank == 0:
    op, _ = blocked_in(lambda: comm.Reduce_scatter_block(np.ones(size), np.zeros(1)))
    assert op["name"] == "Reduce_scatter_block" and op["kind"] == "coll" and op["seq"] == seq + 2, op
    assert op["size"] == 8 * size, op
    req = cart.Iallreduce(np.ones(1), np.zeros(1))
    op, _ = blocked_in(req.Wait)
    assert op["name"] == "Wait(Iallreduce)" and op["kind"] == "coll" and op["comm"] == "world.cart3", op
    op, _ = blocked_in(lambda: comm.Probe(source=1, tag=11))
    assert op["name"] == "Probe" and op["kind"] == "p2p" and op["peer"] == 1 and op["tag"] == 11, op
    comm.Recv(buf, source=1, tag=11)
else:
    if rank == 2:
        time.sleep(0.5)
    comm.Reduce_scatter_block(np.ones(size), np.zeros(1))
    if rank == 2:
        time.sleep(0.5)
    cart.Iallreduce(np.ones(1), np.zeros(1)).Wait()
    if rank == 1:
        time.sleep(0.5)
        comm.Ssend(np.ones(4), dest=0, tag=11)
assert lg.colls()["world"] == seq + 2 and lg.colls()["world.cart3"] == 1, lg.colls()
seq += 2
sent, recvd = lg.p2p_counts()
import inspect  # noqa: E402  # imports of the script's last part (the localization service), beside it
import sys  # noqa: E402  # imports of the script's last part (the localization service), beside it

from planaria.localize import service  # noqa: E402  # imports of the script's last part (the localization service), beside it
from planaria.runtime import bootstrap  # noqa: E402  # imports of the script's last part (the localization service), beside it
from planaria.runtime.bootstrap import set_detection  # noqa: E402  # imports of the script's last part (the localization service), beside it

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


set_detection(False)                      # within-job overhead measurement: nothing recorded, service blocked
assert not comm._ml_on and not d._ml_on
assert loc.paused and loc._parked.is_set()   # pause returns once the thread is blocked, no tick left over
settle(True)                              # blocked in the paused wait, not ticking:
for _ in range(int(2.2 * loc.tick / 0.01) + 1):   # still there over more than two idle ticks
    assert service_line() == PAUSED_LINE, service_line()
    time.sleep(0.01)
comm.Sendrecv(np.ones(4), dest=right, sendtag=7, recvbuf=buf, source=left, recvtag=7)
assert lg.p2p_counts() == (sent, recvd)   # nothing recorded while off
set_detection(True)
assert comm._ml_on and d._ml_on and not loc.paused
assert loc._awake.is_set() and not loc._parked.is_set()   # resume returns once the thread has woken
t_again = time.monotonic()
set_detection(True)                       # switching to the mode it is in returns at once
set_detection(False)
set_detection(False)
set_detection(True)
assert time.monotonic() - t_again < 0.5, time.monotonic() - t_again
settle(False)
set_detection(False, part="log")          # the message log only: the service keeps ticking
assert not comm._ml_on and not d._ml_on and not loc.paused
set_detection(True, part="log")
assert comm._ml_on and d._ml_on and not loc.paused
set_detection(False, part="probes")       # the probe service only: the message log keeps recording
assert comm._ml_on and loc.paused
settle(True)
set_detection(True, part="probes")
assert comm._ml_on and not loc.paused
try:
    set_detection(False, part="timers")
except ValueError as e:
    assert "timers" in str(e) and comm._ml_on and not loc.paused, e    # nothing switched
else:
    raise AssertionError("an unknown detection part was accepted")
settle(False)
comm.Sendrecv(np.ones(4), dest=right, sendtag=8, recvbuf=buf, source=left, recvtag=8)
assert lg.p2p_counts()[0] == {**sent, str(right): sent[str(right)] + 1}
# calls that are no collective do not count as one (Iprobe, a persistent send's set-up)
seq_now = lg.colls()["world"]
comm.Iprobe(source=MPI.ANY_SOURCE, tag=99)
comm.Send_init(np.ones(1), dest=right, tag=99).Free()
assert lg.colls()["world"] == seq_now, (lg.colls(), seq_now)
# a receive from any source is counted by its sender and remembered with its call site
before = lg.p2p_counts()[1].get("1", 0)
if rank == 0:
    comm.Recv(buf, source=MPI.ANY_SOURCE, tag=12)                  # SITE:wild
    cid, src, world, tag, site = lg.wildcards[-1]
    assert (cid, src, world, tag) == ("world", 1, 1, 12), lg.wildcards
    assert "SITE:wild" in open(__file__).read().splitlines()[int(site.split(":")[1].split()[0]) - 1], site
    assert lg.p2p_counts()[1].get("1", 0) == before + 1
elif rank == 1:
    comm.Send(np.ones(4), dest=0, tag=12)
# a message received through a matched probe, a persistent receive or an Isendrecv counts as received
# (on ulfm mpi4py's own calls behind planaria's wrappers, on sim planaria's)
_, got0 = lg.p2p_counts()
comm.Send(np.ones(4), dest=right, tag=21)
m = comm.Mprobe(source=left, tag=21)
m.Recv(buf)
comm.send({"x": rank}, dest=right, tag=22)
assert comm.mprobe(source=left, tag=22).recv() == {"x": left}
pr = comm.Recv_init(buf, source=left, tag=23)
for _ in range(2):
    pr.Start()
    comm.Send(np.ones(4), dest=right, tag=23)
    pr.Wait()
pr.Wait()                                  # an inactive request: nothing more received
pr.Free()
comm.Isendrecv(np.ones(4), dest=right, sendtag=24, recvbuf=buf, source=left, recvtag=24).Wait()
_, got1 = lg.p2p_counts()
assert got1.get(str(left), 0) == got0.get(str(left), 0) + 5, (got0, got1)
# nonblocking sends and receives count once each: a send when posted, a receive when its Wait or
# Test completes it, whatever is called on the request afterwards; their Wait names the operation
sent0, got0 = lg.p2p_counts()
rq = comm.Irecv(buf, source=left, tag=25)
sq = comm.Isend(np.ones(4), dest=right, tag=25)
assert (rq._op, sq._op) == ("Irecv", "Isend"), (rq._op, sq._op)
sq.Wait()
rq.Wait()
rq.Wait()
assert rq.Test()
rq = comm.Irecv(buf, source=left, tag=26)
comm.Isend(np.ones(4), dest=right, tag=26).Wait()
while not rq.Test():
    pass
rq.Wait()
sent1, got1 = lg.p2p_counts()
assert sent1.get(str(right), 0) == sent0.get(str(right), 0) + 2, (sent0, sent1)
assert got1.get(str(left), 0) == got0.get(str(left), 0) + 2, (got0, got1)
print(f"OK msglog {rank}", flush=True)
