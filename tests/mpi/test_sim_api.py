"""mpi4py's calls that the sim backend simulates beyond planaria's own, as real jobs.

The test functions start ``mpiexec -n N python test_sim_api.py CASE``: this file is also the ranks'
program (the part under ``__main__``). Every rank whose checks hold prints ``OK <case> <rank>``;
a failed check prints ``FAIL ...`` and exits at once. In the failure cases the fault plan kills
rank ``VICTIM`` while the others wait inside the call under test: they must get
``pl.ProcFailedError`` within a bounded time, never wait forever for the failed process.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest

import planaria as pl

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(150)]

VICTIM = 2                      # the rank the fault plan kills in the failure cases (3 ranks)
BOUND = 20.0                    # seconds a survivor may wait for the error


def _job(n: int, case: str, plan: str = "", detect: bool = False, env: dict[str, str] | None = None) -> None:
    from tests.mpi.mpijob import mpiexec
    env = dict(env or {})
    if plan:
        env["PLANARIA_INJECT"] = plan
    if detect:
        env["PLANARIA_DETECT"] = "1"        # the message log records the world: the counting paths run
    res = mpiexec(n, [os.path.abspath(__file__), case], env=env, timeout=90)
    detail = f"\n--- stdout\n{res.out[-3000:]}\n--- stderr\n{res.err[-3000:]}"
    assert "FAIL" not in res.out, detail
    expect = [r for r in range(n) if not plan or r != VICTIM]
    assert res.ok_ranks(case) == expect, f"ranks reporting OK {res.ok_ranks(case)}, expected {expect}{detail}"
    assert res.code == 0, f"exit code {res.code}{detail}"


@pytest.mark.parametrize("detect", [False, True])
def test_new_calls_work_on_sim(detect: bool) -> None:
    """Nonblocking and further collectives, p2p variants, probes, persistent requests, a Cartesian
    communicator and its queries, Iagree/Ishrink, mpi4py's request class calls; a refused call's message."""
    _job(4, "calls", detect=detect)


@pytest.mark.parametrize("case", ["iallreduce", "coll", "p2p", "cart", "create"])
def test_failure_inside_new_call_raises(case: str) -> None:
    """A failure while survivors wait in Iallreduce's Wait, Reduce_scatter_block, Mprobe/irecv(buf).wait, or a
    Cartesian communicator's Neighbor_allgather, or the calls that make communicators raises
    ProcFailedError; later calls raise at entry."""
    _job(3, case, f"kill:rank={VICTIM},iter=0")


@pytest.mark.parametrize("first", ["Create_group", "Split_type"])
def test_failure_while_making_a_communicator_raises(first: str) -> None:
    """A failure while survivors wait in Create_group's agreement or Split_type's barrier raises
    ProcFailedError there (the failure case ``create`` starts with Create_cart)."""
    _job(3, "create", f"kill:rank={VICTIM},iter=0", env={"SIM_API_FIRST": first})


# -- the ranks' program ------------------------------------------------------------------------
def _check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAIL {sys.argv[1]} rank {_RANK}: {what}", flush=True)
        os._exit(3)


def _expect_failure(what: str, call: Callable[[], object]) -> None:
    """``call()`` must raise ProcFailedError naming the victim, within ``BOUND`` seconds."""
    t0 = time.monotonic()
    try:
        call()
    except pl.ProcFailedError as e:
        took = time.monotonic() - t0
        _check(took < BOUND, f"{what} raised only after {took:.1f} s")
        _check(not e.ranks or VICTIM in e.ranks, f"{what}: error names {sorted(e.ranks)}")
        return
    _check(False, f"{what} returned although rank {VICTIM} failed")


def _victim_dies(comm: pl.Comm) -> None:
    """The victim lets the others enter the call under test, then the plan kills it at step 0."""
    if comm.rank == VICTIM:
        time.sleep(0.5)
        pl.step(0)
        _check(False, "the victim survived its kill")


def case_calls(c: pl.Comm) -> None:
    from mpi4py import MPI
    r, n = c.rank, c.size
    right, left = (r + 1) % n, (r - 1) % n
    # nonblocking collectives give MPI requests, falsy once complete
    out = np.zeros(1)
    req = c.Iallreduce(np.ones(1), out)
    _check(isinstance(req, MPI.Request) and bool(req), "Iallreduce gives a pending MPI.Request")
    req.Wait()
    _check(out[0] == n and not req, "Iallreduce + Wait")
    c.Iscan(np.array([r + 1.0]), out).Wait()
    _check(out[0] == sum(range(1, r + 2)), "Iscan")
    block = np.zeros(1)
    c.Ireduce_scatter_block(np.ones(n), block).Wait()
    _check(block[0] == n, "Ireduce_scatter_block")
    # further blocking collectives
    c.Scan(np.array([r + 1.0]), out)
    _check(out[0] == sum(range(1, r + 2)), "Scan")
    c.Exscan(np.array([r + 1.0]), out)
    _check(r == 0 or out[0] == sum(range(1, r + 1)), "Exscan")
    c.Reduce_scatter_block(np.ones(n), block)
    _check(block[0] == n, "Reduce_scatter_block")
    # point-to-point variants, each request waited for on its own
    got = np.zeros(3)
    sreq = c.Issend(np.full(3, float(r)), right, 4)
    rreq = c.Irecv(got, left, 4)
    rreq.Wait()
    sreq.Wait()
    _check(got[0] == left and not sreq and not rreq, "Issend/Irecv")
    if r == 0:
        c.Ssend(np.arange(3.0), 1, 5)
        c.ssend("obj", 1, 6)
    elif r == 1:
        st = MPI.Status()
        c.Probe(0, 5, st)
        _check(st.Get_count(MPI.DOUBLE) == 3, "Probe's status")
        c.Recv(got, 0, 5)
        _check(got.tolist() == [0.0, 1.0, 2.0], "Ssend's data")
        _check(c.mprobe(0, 6).recv() == "obj", "ssend/mprobe")
    x = np.array([float(r)])
    c.Sendrecv_replace(x, right, 9, left, 9)
    _check(x[0] == left, "Sendrecv_replace")
    # mpi4py's object irecv is an MPI request: mpi4py's class calls take it
    rq = c.irecv(None, left, 7)
    sq = c.isend({"from": r}, right, 7)
    _check(MPI.Request.waitall([sq, rq]) == [None, {"from": left}], "irecv(buf, source, tag) with waitall")
    # planaria's irecv(source, tag) is matched while this process waits in a synchronous send to itself
    mine = c.irecv(source=r, tag=8)
    c.ssend("me", r, 8)
    _check(mine.wait() == "me" and not mine, "irecv(source, tag) matched during ssend")
    # persistent requests
    pbuf = np.zeros(1)
    ps, pr = c.Send_init(np.array([float(r)]), dest=right, tag=10), c.Recv_init(pbuf, left, 10)
    for _ in range(2):
        pr.Start()
        ps.Start()
        pr.Wait()
        ps.Wait()
        _check(pbuf[0] == left, "Send_init/Recv_init")
    # a Cartesian communicator: failure-safe calls and Cartcomm's queries
    cart = c.Create_cart([n], periods=[True])
    _check(isinstance(cart, pl.Comm) and cart.Get_topology() == MPI.CART and cart.dims == [n], "Create_cart")
    src, dst = cart.Shift(0, 1)
    got1 = np.zeros(1)
    cart.Sendrecv(np.array([float(cart.rank)]), dst, 0, got1, src, 0)
    _check(got1[0] == (cart.rank - 1) % n, "Sendrecv along the ring")
    nb = np.zeros(2)
    cart.Neighbor_allgather(np.array([float(cart.rank)]), nb)
    _check(nb.tolist() == [(cart.rank - 1) % n, (cart.rank + 1) % n], f"Neighbor_allgather {nb}")
    _check(cart.Get_coords(cart.rank) == [cart.rank], "Get_coords")
    _check(cart.neighbor_allgather(cart.rank) == [(cart.rank - 1) % n, (cart.rank + 1) % n], "neighbor_allgather")
    cart.Free()
    _check(cart == MPI.COMM_NULL, "a freed communicator equals MPI.COMM_NULL")
    # a communicator of part of the members, made by them only
    if r % 2 == 0:
        world_group = c.Get_group()
        evens = world_group.Incl(list(range(0, n, 2)))
        sub = c.Create_group(evens, tag=3)
        _check(sub.size == len(range(0, n, 2)) and sub.allgather(r) == list(range(0, n, 2)), "Create_group")
        evens.Free(), world_group.Free()
    # nonblocking agreement and shrink
    flag = np.array([0b110 if r else 0b011], dtype=np.intc)
    c.Iagree(flag).Wait()
    _check(flag[0] == 0b010, "Iagree is a bitwise AND")
    small, done = c.Ishrink()
    _check(bool(done) and small.size == n, "Ishrink")
    done.Wait()
    _check(not done, "Ishrink's request is done once waited")
    # a call still refused: one line naming it and the backend
    try:
        c.Create_intercomm(0, c, 0)
        _check(False, "Create_intercomm did not raise")
    except NotImplementedError as e:
        _check("Create_intercomm" in str(e) and "sim backend" in str(e) and "\n" not in str(e), f"message: {e}")
    # an MPI.Intracomm for mpi4py's class-level calls; mpi4py's own names planaria leaves out stay refused
    _check(isinstance(c, MPI.Intracomm) and MPI.Comm(c) == c, "MPI.Comm(c) equals c")
    _check(MPI.Comm.Compare(c, MPI.COMM_WORLD) == MPI.CONGRUENT, "MPI.Comm.Compare(c, COMM_WORLD)")
    _check(c.toint() == -1 and isinstance(c.Get_info(), MPI.Info), "toint/Get_info")
    for refused in (lambda: c.Spawn("x"), lambda: c.handle):
        try:
            refused()
            _check(False, "a refused mpi4py name did not raise")
        except NotImplementedError as e:
            _check("sim backend" in str(e), f"message: {e}")
    d = c.Dup()
    d.Free()
    _check(not d and d == MPI.COMM_NULL and c, "a freed communicator is falsy, the world is not")
    print(f"OK calls {r}", flush=True)


def case_iallreduce(c: pl.Comm) -> None:
    req = c.Iallreduce(np.ones(1), np.zeros(1)) if c.rank != VICTIM else None     # the victim never joins
    _victim_dies(c)
    _expect_failure("Iallreduce's Wait", req.Wait)  # type: ignore[union-attr]  # None only at the victim
    _expect_failure("Iallreduce after the failure", lambda: c.Iallreduce(np.ones(1), np.zeros(1)).Wait())
    print(f"OK iallreduce {c.rank}", flush=True)


def case_coll(c: pl.Comm) -> None:
    _victim_dies(c)
    # (Scan would complete at the ranks below the victim: their prefix does not need it)
    _expect_failure("Reduce_scatter_block", lambda: c.Reduce_scatter_block(np.ones(c.size), np.zeros(1)))
    _expect_failure("Scan after the failure", lambda: c.Scan(np.ones(1), np.zeros(1)))
    print(f"OK coll {c.rank}", flush=True)


def case_p2p(c: pl.Comm) -> None:
    req = c.irecv(bytearray(64), VICTIM, 3) if c.rank == 1 else None     # posted before the failure
    _victim_dies(c)
    if c.rank == 0:
        _expect_failure("Mprobe", lambda: c.Mprobe(source=VICTIM, tag=3))
    else:
        _expect_failure("irecv(buf, source, tag).wait", req.wait)  # type: ignore[union-attr]  # rank 1's
    _expect_failure("Ssend to the failed rank", lambda: c.Ssend(np.zeros(1), VICTIM, 3))
    _expect_failure("Issend to the failed rank", lambda: c.Issend(np.zeros(1), VICTIM, 3).Wait())
    print(f"OK p2p {c.rank}", flush=True)


def case_cart(c: pl.Comm) -> None:
    cart = c.Create_cart([c.size], periods=[True])
    _victim_dies(c)
    _expect_failure("Neighbor_allgather on a Cartesian communicator",
                    lambda: cart.Neighbor_allgather(np.ones(1), np.zeros(2)))
    src, dst = cart.Shift(0, 1)
    _expect_failure("Sendrecv on the Cartesian ring",
                    lambda: cart.Sendrecv(np.ones(1), dst, 0, np.zeros(1), src, 0))
    _expect_failure("Create_cart after the failure", lambda: c.Create_cart([c.size]))
    print(f"OK cart {c.rank}", flush=True)


def case_create(c: pl.Comm) -> None:
    from mpi4py import MPI
    first = os.environ.get("SIM_API_FIRST", "Create_cart")
    calls = {
        "Create_cart": lambda: c.Create_cart([c.size]),
        "Create_group": lambda: c.Create_group(c.Get_group()),
        "Split_type": lambda: c.Split_type(MPI.COMM_TYPE_SHARED),
        "Create": lambda: c.Create(c.Get_group()),
        "Clone": c.Clone,
    }
    _victim_dies(c)
    _expect_failure(first, calls.pop(first))          # waiting when the victim fails
    for name, call in calls.items():                  # the failure known at entry
        _expect_failure(name, call)
    print(f"OK create {c.rank}", flush=True)


if __name__ == "__main__":
    _COMM = pl.world("sim")
    _RANK = _COMM.rank
    globals()[f"case_{sys.argv[1]}"](_COMM)
