"""ULFM conformance cases for planaria.Comm; run as ``mpiexec -n N python conformance.py CASE BACKEND``.

Every surviving rank prints ``OK <case> <rank>`` when its checks hold; a failed check
prints ``FAIL ...`` and exits non-zero. Victims are killed with ``pl.fail_stop`` or by the
fault plan in ``PLANARIA_INJECT`` (set by the test).
"""
from __future__ import annotations

import sys
import time

import numpy as np

import planaria as pl


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAIL {CASE} rank {RANK}: {what}", flush=True)
        sys.stdout.flush()
        import os
        os._exit(3)


def ok(rank: int) -> None:
    print(f"OK {CASE} {rank}", flush=True)


def detect(comm: pl.Comm, victim: int | None = None) -> BaseException:
    """Spin on Barrier until the failure shows up; return the error."""
    t0 = time.time()
    while time.time() - t0 < 20:
        try:
            comm.Barrier()
        except pl.FailureError as e:
            if victim is not None and isinstance(e, pl.ProcFailedError) and e.ranks:
                check(victim in e.ranks, f"ProcFailedError names {sorted(e.ranks)}, expected {victim}")
            return e
        time.sleep(0.01)
    check(False, "no failure detected within 20 s")
    raise AssertionError


def recover(comm: pl.Comm) -> pl.Comm:
    comm.revoke()
    return comm.shrink()


# -- cases ---------------------------------------------------------------------------------
def case_error_return(comm: pl.Comm) -> None:
    """Point-to-point with a failed peer and a collective with a failed member both raise ProcFailedError."""
    v = comm.size - 1
    pl.step(0)  # the plan kills rank v here
    if comm.rank == 0:
        try:
            comm.recv(source=v, tag=1)
            check(False, "recv from a failed rank returned")
        except pl.ProcFailedError as e:
            check(v in e.ranks, f"recv error names {sorted(e.ranks)}")
    try:
        while True:
            comm.Allreduce(np.ones(1), np.zeros(1))
            time.sleep(0.005)
    except pl.ProcFailedError:
        pass
    except pl.RevokedError:
        check(False, "RevokedError without any revoke")
    ok(comm.rank)


def case_insulation(comm: pl.Comm) -> None:
    """Operations that do not involve the failed rank still succeed (no revoke)."""
    v = comm.size - 1
    pl.step(0)
    time.sleep(0.3)
    if comm.rank in (0, 1):
        peer = 1 - comm.rank
        for i in range(20):
            got = comm.sendrecv(("ping", comm.rank, i), dest=peer, sendtag=7, source=peer, recvtag=7)
            check(got == ("ping", peer, i), f"sendrecv got {got}")
        buf = np.full(1000, float(comm.rank))
        out = np.empty(1000)
        comm.Sendrecv(buf, dest=peer, sendtag=8, recvbuf=out, source=peer, recvtag=8)
        check(out[0] == peer, "buffer sendrecv content")
    check(comm.rank != v, "victim still running")
    ok(comm.rank)


def case_revoke_p2p(comm: pl.Comm) -> None:
    """Revoke interrupts pending point-to-point receives at every rank."""
    revoker = comm.size - 1
    if comm.rank == revoker:
        time.sleep(0.5)
        comm.revoke()
        check(comm.is_revoked(), "is_revoked after revoke")
        try:
            comm.send(1, dest=0, tag=3)
            check(False, "send on a revoked communicator succeeded")
        except pl.RevokedError:
            pass
    else:
        try:
            comm.recv(source=revoker, tag=3)
            check(False, "pending recv returned instead of RevokedError")
        except pl.RevokedError:
            pass
        check(comm.is_revoked(), "is_revoked after interruption")
    ok(comm.rank)


def case_revoke_coll(comm: pl.Comm) -> None:
    """Revoke interrupts pending collectives (buffer, then object form) at every rank."""
    revoker = 0
    phases = [comm.dup(), comm.dup()]
    for phase, c in enumerate(phases):
        if c.rank == revoker:
            time.sleep(0.5)
            c.revoke()
        else:
            try:
                if phase == 0:
                    c.Barrier()
                else:
                    c.allreduce({"x": c.rank}, op=lambda a, b: {"x": a["x"] + b["x"]})
                check(False, f"collective completed without the revoker (phase {phase})")
            except pl.RevokedError:
                pass
        try:
            c.Barrier()
            check(False, "collective after revoke succeeded")
        except pl.RevokedError:
            pass
        new = c.shrink()
        check(new.size == c.size, f"shrink of a revoked comm without failures has {new.size} ranks")
        check(new.allreduce(1) == c.size, "allreduce on the new communicator")
    ok(comm.rank)


def case_shrink(comm: pl.Comm) -> None:
    """After a failure: revoke + shrink gives a working communicator without the failed rank, order kept."""
    v = 1
    pl.step(0)
    detect(comm, v)
    new = recover(comm)
    check(new.size == comm.size - 1, f"shrunk size {new.size}")
    expect = comm.rank if comm.rank < v else comm.rank - 1
    check(new.rank == expect, f"shrunk rank {new.rank}, expected {expect}")
    world_ranks = new.allgather(comm.rank)
    check(world_ranks == [r for r in range(comm.size) if r != v], f"members {world_ranks}")
    out = np.zeros(4)
    new.Allreduce(np.ones(4), out)
    check(out[0] == new.size, "buffer allreduce on the shrunk communicator")
    check(new.bcast("hello" if new.rank == 0 else None) == "hello", "bcast")
    check(not new.get_failed(), "new communicator has no failed ranks")
    ok(comm.rank)


def case_agree(comm: pl.Comm) -> None:
    """Agree: AND of flags; raises until failures are acknowledged, then agrees among survivors."""
    check(comm.agree(True) is True, "agree(True) everywhere")
    check(comm.agree(comm.rank != 1) is False, "agree with one False")
    check(comm.agree(0b1111 if comm.rank else 0b0101) == 0b0101, "integer agree is a bitwise AND")
    v = comm.size - 1
    pl.step(0)
    detect(comm, v)
    raised = 0
    for _attempt in range(50):
        try:
            flag = comm.agree(True)
            break
        except pl.ProcFailedError:
            raised += 1
            comm.ack_failed()
    else:
        check(False, "agree never succeeded after ack_failed")
    check(raised >= 1 or v in comm.get_failed(), "agree without acknowledging did not raise")
    check(flag is True, f"flag {flag}")
    check(comm.get_failed() == {v}, f"get_failed {comm.get_failed()}")
    check(comm.agree(comm.rank != 0) is False, "agree after ack still ANDs")
    ok(comm.rank)


def case_get_ack(comm: pl.Comm) -> None:
    """get_failed / ack_failed, and ANY_SOURCE receives before and after acknowledgement."""
    v = comm.size - 1
    pl.step(0)
    if comm.rank == 0:
        try:
            comm.recv(tag=5)     # ANY_SOURCE, nobody sends yet: the failure must interrupt it
            check(False, "ANY_SOURCE recv returned with an unacknowledged failure")
        except pl.ProcFailedError as e:
            check(v in e.ranks, f"error names {sorted(e.ranks)}")
        check(v in comm.get_failed(), "get_failed contains the victim")
        check(comm.ack_failed() == 1, "ack_failed returns 1")
        comm.send("go", dest=1, tag=6)
        got = comm.recv(tag=5)   # ANY_SOURCE again: works after ack
        check(got == "after-ack", f"got {got!r}")
    elif comm.rank == 1:
        check(comm.recv(source=0, tag=6) == "go", "go message")
        comm.send("after-ack", dest=0, tag=5)
    ok(comm.rank)


def case_kill_shrink_loop(comm: pl.Comm) -> None:
    """Kill the last rank and shrink, again and again, until one rank is left."""
    world_rank = comm.rank
    c = comm
    while c.size > 1:
        if c.rank == c.size - 1:
            pl.fail_stop(f"loop victim at size {c.size}")
        detect(c)
        c = recover(c)
        try:
            total = c.allreduce(1)
        except pl.FailureError:
            # Legal under ULFM: the next victim finished this collective and died before this
            # rank's part completed (or the others already revoked for it); the next round's
            # detect() and shrink handle it.
            continue
        check(total == c.size, "allreduce after shrink")
    check(world_rank == 0, f"last rank standing is {world_rank}")
    ok(world_rank)


def case_pickle_collective(comm: pl.Comm) -> None:
    """A failure while ranks sit in object collectives raises at every survivor instead of hanging."""
    v = comm.size - 1
    if comm.rank == v:
        time.sleep(0.4)
        pl.fail_stop("victim never joins the collective")
    errors = 0
    for op in ("allreduce", "bcast", "allgather", "gather", "alltoall", "scatter"):
        try:
            if op == "allreduce":
                comm.allreduce({"rank": comm.rank}, op=lambda a, b: {"rank": a["rank"] + b["rank"]})
            elif op == "bcast":
                comm.bcast(list(range(1000)) if comm.rank == 0 else None)
            elif op == "allgather":
                comm.allgather(comm.rank)
            elif op == "gather":
                comm.gather(comm.rank)
            elif op == "alltoall":
                comm.alltoall(list(range(comm.size)))
            else:
                comm.scatter(list(range(comm.size)) if comm.rank == 0 else None)
        except pl.FailureError:
            errors += 1
    check(errors >= 1, "no collective raised although a member failed")
    ok(comm.rank)


def case_uncaught(comm: pl.Comm) -> None:
    """An uncaught exception in one rank is a fail-stop failure the others see, not a job abort."""
    v = comm.size - 1
    if comm.rank == v:
        time.sleep(0.2)
        raise ValueError("deliberate bug in rank code")
    detect(comm, v)
    new = recover(comm)
    check(new.size == comm.size - 1, "survivors shrink")
    ok(comm.rank)


def case_injected_time(comm: pl.Comm) -> None:
    """A time-triggered kill from the fault plan (no step calls) is survived."""
    e = detect(comm, 1)
    check(isinstance(e, pl.FailureError), "error type")
    new = recover(comm)
    check(new.size == comm.size - 1, "survivors shrink")
    ok(comm.rank)


def case_split(comm: pl.Comm) -> None:
    """split by colour and key (reversed order), UNDEFINED colour, and split after a shrink."""
    sub = comm.split(comm.rank % 2, key=-comm.rank)
    members = sub.allgather(comm.rank)
    expect = sorted((r for r in range(comm.size) if r % 2 == comm.rank % 2), reverse=True)
    check(members == expect, f"split members {members}, expected {expect}")
    none = comm.split(None if comm.rank == 0 else 1, key=comm.rank)
    check((none is None) == (comm.rank == 0), "split with colour None")
    if none is not None:
        check(none.size == comm.size - 1, "split size without rank 0")
    v = comm.size - 1
    pl.step(0)
    detect(comm, v)
    new = recover(comm)
    again = new.split(0, key=new.size - new.rank)
    check(again.allgather(comm.rank) == [r for r in reversed(range(comm.size)) if r != v], "split after shrink")
    ok(comm.rank)


def case_mpi4py_names(comm: pl.Comm) -> None:
    """mpi4py's spelling of the same calls: Dup, Split, Get_group, Agree, Get_failed, Ack_failed,
    Revoke, Shrink, names; the communicators they make are planaria's and raise its errors."""
    from mpi4py import MPI
    v = comm.size - 1
    d = comm.Dup()
    check(isinstance(d, pl.Comm) and d.Get_size() == comm.size, "Dup gives a planaria communicator")
    half = comm.Split(MPI.UNDEFINED if comm.rank == 0 else comm.rank % 2, key=-comm.rank)
    if comm.rank == 0:
        check(half == MPI.COMM_NULL, "Split(MPI.UNDEFINED) gives MPI.COMM_NULL")
    else:
        check(isinstance(half, pl.Comm), "Split gives a planaria communicator")
        members = [r for r in range(1, comm.size) if r % 2 == comm.rank % 2]
        check(half.rank == sorted(members, reverse=True).index(comm.rank), "Split orders by key")
        half.Free()
    g = comm.Get_group()
    check(g.Get_size() == comm.size and g.Get_rank() == comm.rank, "Get_group")
    g.Free()
    check(not comm.Is_inter() and comm.Is_intra() and comm.is_intra, "an intracommunicator")
    d.Set_name("planaria-dup")
    check(d.Get_name() == "planaria-dup" and d.name == "planaria-dup", "Set_name / Get_name")
    f = comm.Get_failed()
    check(f.Get_size() == 0, "Get_failed is an empty group before any failure")
    f.Free()
    check(comm.Agree(0b110 if comm.rank else 0b011) == 0b010, "Agree is a bitwise AND")
    if comm.rank == v:
        time.sleep(0.5)                   # the others are past every call that needs the victim
    pl.step(0)                            # the plan kills rank v here
    err = detect(d, v)
    if isinstance(err, pl.ProcFailedError):   # under ULFM a rank may see another's revoke first,
        f = d.Get_failed()                    # and then knows of no failure on this communicator
        got = (f.Get_size(), list(MPI.Group.Translate_ranks(f, [0], d.Get_group())) if f.Get_size() else None)
        check(got == (1, [v]), f"Get_failed is the group of the victim: {got}")
        f.Free()
        check(d.Ack_failed() == 1, "Ack_failed returns 1")
    d.Revoke()
    check(d.Is_revoked(), "Is_revoked after Revoke")
    try:
        d.Barrier()
        check(False, "Barrier on a revoked communicator returned")
    except pl.RevokedError:
        pass
    s = d.Shrink()
    check(isinstance(s, pl.Comm) and s.Get_size() == comm.size - 1, "Shrink drops the victim")
    check(s.allreduce(1) == comm.size - 1, "allreduce on the shrunk communicator")
    ok(comm.rank)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}
CASE = sys.argv[1]
comm = pl.world(sys.argv[2] if len(sys.argv) > 2 else "auto")
RANK = comm.rank
CASES[CASE](comm)
