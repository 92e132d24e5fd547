"""Object collectives (``bcast``, ``allgather`` and those built on it) in one buffer collective
when every pickle fits in a slot, in two when one does not; values right at every length, as real jobs.

The test functions start ``mpiexec -n N python test_object_collectives.py CASE``: this file is also
the ranks' program (the part under ``__main__``). Every rank whose checks hold prints
``OK <case> <rank>``; a failed check prints ``FAIL ...`` and exits at once.
"""
from __future__ import annotations

import os
import pickle
import sys

import pytest

import planaria as pl
from planaria.comm import base

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(150)]

N = 4


@pytest.mark.parametrize("detect", [False, True])
@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_object_collectives_take_one_round_when_pickles_fit(backend: str, detect: bool) -> None:
    """Pickles of HEAD - 1, HEAD and HEAD + 1 bytes and of 100 kB, mixed across ranks, come back
    equal from every object collective; in bcast and allgather a short pickle everywhere costs one
    buffer collective, a long one anywhere two (and so does every allgather on more than
    SLOT_RANKS ranks); gather, scatter and alltoall take two; with detection on, the message log
    counts each object collective once on every rank."""
    from tests.mpi.mpijob import mpiexec
    env = {"PLANARIA_BACKEND": backend}
    if detect:
        env["PLANARIA_DETECT"] = "1"
    res = mpiexec(N, [os.path.abspath(__file__), "rounds"], ft=backend == "ulfm", env=env, timeout=90)
    detail = f"\n--- stdout\n{res.out[-3000:]}\n--- stderr\n{res.err[-3000:]}"
    assert "FAIL" not in res.out, detail
    assert res.ok_ranks("rounds") == list(range(N)), detail
    assert res.code == 0, detail


# -- the ranks' program ------------------------------------------------------------------------
def _check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAIL {sys.argv[1]} rank {_RANK}: {what}", flush=True)
        os._exit(3)


def _pickled_to(k: int) -> bytes:
    """A bytes object whose pickle (planaria's protocol) is exactly ``k`` bytes long."""
    for m in range(k):
        if len(pickle.dumps(bytes(m), base._PROTO)) == k:
            return bytes([m % 251]) * m
    raise ValueError(f"no bytes object pickles to {k} bytes")


class _Counted:
    """Counts the calls of one buffer collective on one communicator (the object forms call it)."""

    def __init__(self, comm: pl.Comm, name: str) -> None:
        self.calls = 0
        inner = getattr(comm, name)

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls += 1
            return inner(*args, **kwargs)
        setattr(comm, name, counted)


def case_rounds(c: pl.Comm) -> None:
    r, n = c.rank, c.size
    sizes = [base.HEAD - 1, base.HEAD, base.HEAD + 1, 100_000]
    objs = {k: _pickled_to(k) for k in sizes}
    count = {name: _Counted(c, name) for name in ("Allgather", "Allgatherv", "Bcast")}
    seq = getattr(c, "_ml_seq", None)

    def rounds(what: str, objects: int, **calls: int) -> None:
        """Since the last look: ``calls`` of each buffer collective (0 for those not named), and,
        with detection on, ``objects`` collectives counted by the message log."""
        nonlocal seq
        got = {name: x.calls for name, x in count.items()}
        want = {name: calls.get(name, 0) for name in count}
        _check(got == want, f"{what}: buffer collectives {got}, expected {want}")
        for x in count.values():
            x.calls = 0
        if seq is not None:
            _check(c._ml_seq == seq + objects, f"{what}: message log at {c._ml_seq}, expected {seq + objects}")
            seq = c._ml_seq

    for shift in range(len(sizes)):            # every rank's pickle of another length
        want = [objs[sizes[(i + shift) % len(sizes)]] for i in range(n)]
        _check(c.allgather(want[r]) == want, f"allgather, shift {shift}")
        rounds(f"allgather, shift {shift}", 1, Allgather=1, Allgatherv=1)     # 100 kB at one rank
    for k in sizes:
        two = int(k > base.HEAD)
        _check(c.allgather(objs[k]) == [objs[k]] * n, f"allgather of {k}-byte pickles")
        rounds(f"allgather of {k}-byte pickles", 1, Allgather=1, Allgatherv=two)
        for root in range(n):
            _check(c.bcast(objs[k] if r == root else None, root) == objs[k], f"bcast of {k} bytes from {root}")
            rounds(f"bcast of a {k}-byte pickle", 1, Bcast=1 + two)
    # reductions and scans are built on allgather: one round for small values
    _check(c.allreduce(r + 1) == n * (n + 1) // 2, "allreduce")
    _check(c.scan(r + 1) == (r + 1) * (r + 2) // 2, "scan")
    _check(c.exscan(r + 1) == (None if r == 0 else r * (r + 1) // 2), "exscan")
    rounds("allreduce, scan, exscan", 3, Allgather=3)
    _check(c.allgather(None) == [None] * n and c.bcast(None) is None, "None")
    rounds("None", 2, Allgather=1, Bcast=1)
    # gather, scatter, alltoall: the lengths, then the pickles, whatever their size
    count.update({name: _Counted(c, name) for name in ("Gather", "Gatherv", "Scatter", "Scatterv",
                                                        "Alltoall", "Alltoallv")})
    for shift in range(len(sizes)):
        want = [objs[sizes[(i + shift) % len(sizes)]] for i in range(n)]
        got = c.gather(want[r], root=shift % n)
        _check(got == (want if r == shift % n else None), f"gather, shift {shift}")
        got = c.scatter(want if r == shift % n else None, root=shift % n)
        _check(got == want[r], f"scatter, shift {shift}")
        got = c.alltoall([want[(r + j) % n] for j in range(n)])
        _check(got == [want[(i + r) % n] for i in range(n)], f"alltoall, shift {shift}")
        rounds(f"gather, scatter, alltoall, shift {shift}", 3, Gather=1, Gatherv=1, Scatter=1, Scatterv=1,
               Alltoall=1, Alltoallv=1)
    base.SLOT_RANKS = n - 1                    # more ranks than slots pay for: lengths, then pickles
    _check(c.allgather(r) == list(range(n)), "allgather without slots")
    rounds("allgather without slots", 1, Allgather=1, Allgatherv=1)


_RANK = -1
if __name__ == "__main__":
    _COMM = pl.world()
    _RANK = _COMM.rank
    {"rounds": case_rounds}[sys.argv[1]](_COMM)
    print(f"OK {sys.argv[1]} {_RANK}", flush=True)
