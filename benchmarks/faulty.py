"""Programs with one fault each, for fault localization tests and benchmarks: ``python -m benchmarks.faulty CASE``.

Every case prints ``READY <rank>`` once it has reached the state the test diagnoses.
Line markers (``# SITE:<name>``) let the tests find the expected call sites.
"""
import os
import sys
import time

import numpy as np

import planaria as pl


def ready(rank: int) -> None:
    print(f"READY {rank}", flush=True)


def plain() -> None:
    """A plain mpi4py program, without planaria's runtime: rank 2 loops outside MPI while the
    others wait for it in a barrier (diagnosed from the ranks' stacks alone)."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    ready(comm.rank)
    if comm.rank == 2:
        x = 1
        while True: x = (x * 7 + 3) % 1000003  # noqa: E701  SITE:plain
    comm.Barrier()  # SITE:plain-barrier


def killcoll(comm, rank: int, buf: np.ndarray) -> None:
    """Rank 2 is killed by the plan at step 6; the others are in Allreduce."""
    for i in range(1000):
        pl.step(i)
        if i == 3:
            ready(rank)
        comm.Allreduce(np.ones(8), buf)  # SITE:killcoll
        time.sleep(0.02)


def unmatched(comm, rank: int, buf: np.ndarray) -> None:
    """Rank 1 waits for a message rank 3 never sends."""
    for i in range(3):
        pl.step(i)
        comm.Allreduce(np.ones(8), buf)
    ready(rank)
    if rank == 1:
        comm.Recv(buf, source=3, tag=7)  # SITE:unmatched
    comm.Barrier()  # SITE:unmatched-barrier


def spin(comm, rank: int, buf: np.ndarray) -> None:
    """Rank 2 never leaves a compute loop; the others wait in Allreduce."""
    for i in range(3):
        pl.step(i)
        comm.Allreduce(np.ones(8), buf)
    ready(rank)
    if rank == 2:
        x = 0
        while True: x = (x * 7 + 3) % 1000003  # noqa: E701  SITE:spin
    comm.Allreduce(np.ones(8), buf)  # SITE:spin-allreduce


def drop(comm, rank: int, buf: np.ndarray) -> None:
    """A ring exchange; the plan drops messages 1 -> 2."""
    size = comm.size
    right, left = (rank + 1) % size, (rank - 1) % size
    for i in range(100000):
        pl.step(i)
        if i == 2:
            ready(rank)
        out = np.full(8, float(i))
        comm.Sendrecv(out, dest=right, sendtag=i % 1000, recvbuf=buf, source=left, recvtag=i % 1000)  # SITE:drop
        time.sleep(0.005)


def slow(comm, rank: int, buf: np.ndarray) -> None:
    """Every rank reports to rank 0 each step; the plan delays rank 2's messages."""
    steps = int(os.environ.get("FAULTY_STEPS", "60"))
    for i in range(steps):
        pl.step(i)
        if i == 2:
            ready(rank)
        if rank == 0:
            for src in range(1, comm.size):
                comm.Recv(buf, source=src, tag=i)  # SITE:slow
        else:
            comm.Send(np.full(8, float(i)), dest=0, tag=i)
        comm.Barrier()


def ioerr(comm, rank: int, buf: np.ndarray) -> None:
    """Every rank writes a small file each step; the plan breaks the disk of some."""
    where = os.environ["FAULTY_DIR"]
    failures = 0
    for i in range(100000):
        pl.step(i)
        if i == 3:
            ready(rank)
        try:
            with open(os.path.join(where, f"out-{rank}.txt"), "w") as fh:  # SITE:ioerr
                fh.write(f"{i}\n")
        except OSError:
            failures += 1             # keep going: the program tolerates a failed write
        comm.Allreduce(np.ones(8), buf)
        time.sleep(0.02)


def gil(comm, rank: int, buf: np.ndarray) -> None:
    """Rank 2 blocks in a C call that keeps the GIL: its agent cannot answer."""
    for i in range(3):
        pl.step(i)
        comm.Allreduce(np.ones(8), buf)
    ready(rank)
    if rank == 2:
        import ctypes
        ctypes.PyDLL(None).sleep(300)  # SITE:gil
    comm.Allreduce(np.ones(8), buf)


#: the scenarios run under planaria's runtime, by case name
CASES = {f.__name__: f for f in (killcoll, unmatched, spin, drop, slow, ioerr, gil)}


def main(case: str) -> None:
    """Run scenario ``case`` in this rank (never returns normally for the hanging ones)."""
    if case == "plain":
        plain()
        return
    comm = pl.world()
    if case not in CASES:
        raise SystemExit(f"unknown case {case}")
    CASES[case](comm, comm.rank, np.zeros(8))


if __name__ == "__main__":
    main(sys.argv[1])
    pl.finalize()
