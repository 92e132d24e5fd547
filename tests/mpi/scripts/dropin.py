"""``pl.world()`` on ULFM used where mpi4py wants an ``MPI.Intracomm``; run as
``mpiexec --with-ft ulfm -n 4 python dropin.py`` with ``PLANARIA_INJECT=kill:rank=3,iter=0``.

Before the failure: the communicator shares its handle with mpi4py views of it, the communicators
and requests its calls make are planaria's and mpi4py's at once, and a revoke is caught as
``MPI.Exception`` with ``MPI.ERR_REVOKED``. After rank 3 is killed: a delegated call of a planaria
``Cartcomm`` (``Neighbor_allgather``) raises ``pl.ProcFailedError`` at the victim's neighbors, and
``Ibarrier().Wait()`` raises it everywhere; ``MPI.Request.Waitall`` (mpi4py's C code) raises a
plain ``MPI.Exception`` (``MPI.ERR_IN_STATUS``, the status holding ``MPI.ERR_PROC_FAILED``). Lines: ``OK <rank>`` when every check
holds, ``NEIGHBOR_RAISED <rank>`` where the neighbor call raised.
"""
from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

import planaria as pl


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAIL rank {MPI.COMM_WORLD.Get_rank()}: {what}", flush=True)
        os._exit(3)


comm = pl.world("ulfm")
r, n = comm.rank, comm.size
left, right = (r - 1) % n, (r + 1) % n

# one MPI handle, seen by mpi4py
check(isinstance(comm, MPI.Intracomm) and isinstance(comm, pl.Comm), "an MPI.Intracomm and a pl.Comm")
view = MPI.Comm(comm)
check(view == comm and view is not comm, "MPI.Comm(c) shares the handle")
check(MPI.Comm.Compare(comm, comm) == MPI.IDENT, "Compare with itself")
check(MPI.Comm.Compare(comm, MPI.COMM_WORLD) == MPI.CONGRUENT, "Compare with COMM_WORLD")
clone = comm.Clone()
check(isinstance(clone, pl.Comm) and MPI.Comm.Compare(comm, clone) == MPI.CONGRUENT, "Clone is planaria's")
clone.Free()
check(clone == MPI.COMM_NULL, "a freed communicator is COMM_NULL")
group = comm.Get_group()
made = comm.Create_group(group)
group.Free()
check(isinstance(made, pl.Comm) and made.size == n, "Create_group gives a planaria communicator")
made.Free()
comm.name = "planaria-world"
check(comm.Get_name() == "planaria-world", "name is settable")

# requests are mpi4py's: Waitall takes them and they become null
got = np.zeros(4)
reqs = [comm.Isend(np.full(4, float(r)), right, 1), comm.Irecv(got, left, 1)]
check(all(isinstance(q, MPI.Request) and q for q in reqs), "Isend/Irecv give MPI.Requests")
MPI.Request.Waitall(reqs)
check(not any(reqs) and got.tolist() == [float(left)] * 4, "Waitall completes and nulls them")
# an object irecv is posted at once: a synchronous send to this rank matches it
req = comm.irecv(source=r, tag=2)
comm.ssend("mine", dest=r, tag=2)
idx, objs = MPI.Request.waitsome([req])
check(idx == [0] and objs == ["mine"] and not req, "irecv + ssend to self + waitsome")
# a message of any size through irecv_matched
big = comm.irecv_matched(source=left, tag=3)
sreq = comm.isend(np.arange(200_000), right, 3)
check(int(big.wait()[-1]) == 199_999, "irecv_matched takes a large message")
sreq.wait()

# a revoke, caught as mpi4py code does
dup = comm.Dup()
dup.Barrier()       # Open MPI 5 crashes (ompi_comm_revoke_local) when a revoke reaches a rank still making the communicator
dup.Revoke()
try:
    dup.Barrier()
    check(False, "Barrier on a revoked communicator returned")
except MPI.Exception as exc:
    check(isinstance(exc, pl.RevokedError) and exc.Get_error_class() == MPI.ERR_REVOKED, f"revoked: {exc!r}")

# a Cartesian communicator made by a delegated call
cart = comm.Create_cart([n], periods=[True])
check(isinstance(cart, MPI.Cartcomm) and isinstance(cart, pl.Comm), "Create_cart gives a planaria Cartcomm")
nb = np.zeros(2)
cart.Neighbor_allgather(np.array([float(r)]), nb)
check(sorted(nb.tolist()) == sorted([float(left), float(right)]), "Neighbor_allgather")
check(cart.neighbor_allgather(r) == [left, right], "neighbor_allgather (objects)")
comm.Barrier()

pl.step(0)                                  # the plan kills rank n-1 here
try:
    cart.Neighbor_allgather(np.array([float(r)]), nb)
    check(r not in (0, n - 2), "the victim's neighbors completed Neighbor_allgather")
except pl.ProcFailedError as exc:
    check(isinstance(exc, MPI.Exception) and exc.Get_error_class() == MPI.ERR_PROC_FAILED, f"class: {exc!r}")
    print(f"NEIGHBOR_RAISED {r}", flush=True)
try:
    comm.Ibarrier().Wait()
    check(False, "Ibarrier().Wait() returned after a failure")
except pl.ProcFailedError as exc:
    check(exc.Get_error_class() == MPI.ERR_PROC_FAILED and n - 1 in exc.ranks, f"Ibarrier: {exc!r}")
statuses = [MPI.Status()]
try:
    MPI.Request.Waitall([comm.Ibarrier()], statuses)
    check(False, "Waitall returned after a failure")
except MPI.Exception as exc:
    # mpi4py's C code: MPI_ERR_IN_STATUS (or the failure's own class), the status holding ULFM's
    cls = exc.Get_error_class()
    if cls == MPI.ERR_IN_STATUS:
        cls = MPI.Exception(statuses[0].Get_error()).Get_error_class()
    check(not isinstance(exc, pl.FailureError) and cls == MPI.ERR_PROC_FAILED, f"Waitall: {exc!r} {cls}")
print(f"OK {r}", flush=True)
