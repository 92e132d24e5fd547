"""``pl.world()`` on ULFM as a drop-in ``MPI.Intracomm``: handle sharing, mpi4py requests, failures
inside delegated calls raised as planaria's errors that are also ``MPI.Exception``s (a real job)."""
from __future__ import annotations

import re

import pytest

from tests.mpi.mpijob import SCRIPTS, mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


def test_ulfm_world_is_an_mpi4py_intracomm_and_failures_are_mpi_exceptions() -> None:
    res = mpiexec(4, [str(SCRIPTS / "dropin.py")], ft=True, env={"PLANARIA_INJECT": "kill:rank=3,iter=0"})
    detail = f"{res.out[-2000:]}\n{res.err[-3000:]}"
    assert "FAIL rank" not in res.out, detail
    assert sorted(int(m) for m in re.findall(r"^OK (\d+)$", res.out, re.M)) == [0, 1, 2], detail
    # rank 3's neighbors on the ring raise inside the delegated Neighbor_allgather
    failed = {int(m) for m in re.findall(r"^NEIGHBOR_RAISED (\d+)$", res.out, re.M)}
    assert {0, 2} <= failed, detail
