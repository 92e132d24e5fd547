"""mpi4py's communicator calls beyond planaria's own, on ``pl.world()``; run as
``mpiexec -n 4 python mpi4py_api.py BACKEND``. Every rank prints ``OK <rank>`` when its checks hold.

On both backends the calls work as in mpi4py, the communicators they make are planaria's, and a
failure inside one raises planaria's errors; sim refuses the few calls it cannot make failure-safe
with one line.
"""
from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

import planaria as pl


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAIL rank {comm.rank}: {what}", flush=True)
        import os
        os._exit(3)


comm = pl.world(sys.argv[1])
r, n = comm.rank, comm.size
check(comm.scan(r + 1) == sum(range(1, r + 2)), "scan")
check(comm.exscan(r + 1) == (None if r == 0 else sum(range(1, r + 1))), "exscan")
if comm.backend == "sim":        # the few calls sim cannot make failure-safe are refused in one line
    try:
        comm.Create_intercomm(0, comm, 0)
        check(False, "Create_intercomm on sim did not raise")
    except NotImplementedError as e:
        check("Create_intercomm" in str(e) and "sim backend" in str(e) and "\n" not in str(e), f"message: {e}")
check(not hasattr(comm, "No_such_call"), "unknown names are AttributeError")

# buffer prefix reductions and reduce-scatter
out = np.zeros(1)
comm.Scan(np.array([float(r + 1)]), out)
check(out[0] == sum(range(1, r + 2)), "Scan")
rs = np.zeros(1)
comm.Reduce_scatter_block(np.ones(n), rs)
check(rs[0] == n, "Reduce_scatter_block")
# synchronous and probed point-to-point
if r == 0:
    comm.Ssend(np.arange(3.0), dest=1, tag=4)
    comm.ssend("obj", dest=1, tag=5)
elif r == 1:
    st = MPI.Status()
    comm.Probe(source=0, tag=4, status=st)
    check(st.Get_count(MPI.DOUBLE) == 3, "Probe sees the count")
    buf = np.zeros(3)
    comm.Recv(buf, 0, 4)
    check(buf.tolist() == [0.0, 1.0, 2.0], "Ssend data")
    while not comm.iprobe(source=0, tag=5):
        time.sleep(0.001)
    check(comm.recv(source=0, tag=5) == "obj", "ssend/iprobe")
# nonblocking collectives give mpi4py requests
req = comm.Ibarrier()
MPI.Request.Waitall([req])
total = np.zeros(1)
comm.Iallreduce(np.ones(1), total).Wait()
check(total[0] == n, "Iallreduce")
# a Cartesian communicator is a planaria communicator with Cartcomm's calls
cart = comm.Create_cart([n], periods=[True])
check(isinstance(cart, pl.Comm) and cart.Get_topology() == MPI.CART, "Create_cart gives a planaria Cartcomm")
src, dst = cart.Shift(0, 1)
got = np.zeros(1)
cart.Sendrecv(np.array([float(cart.rank)]), dst, 0, got, src, 0)
check(got[0] == (cart.rank - 1) % n, "Sendrecv along the ring")
check(cart.Get_coords(cart.rank) == [cart.rank], "Get_coords")
# a failure inside a delegated call raises planaria's error
victim = n - 1
pl.step(0)                                  # the plan kills the victim here
t0 = time.time()
while True:
    try:
        cart.Scan(np.ones(1), np.zeros(1))
    except pl.FailureError:
        break
    check(time.time() - t0 < 20, "no failure raised by Scan within 20 s")
    time.sleep(0.01)
# a failure of another rank does not end a wait between two live ones (after the failure is acknowledged)
if r in (1, 2):                 # (rank 0's Scan needs no other rank: it learns of the failure last)
    comm.Ack_failed()
    peer, got = 3 - r, np.zeros(1)
    comm.Isendrecv(np.array([float(r)]), peer, 3, got, peer, 3).Wait()
    check(got[0] == peer, "Isendrecv between live ranks after another rank failed")
print(f"OK {r}", flush=True)
