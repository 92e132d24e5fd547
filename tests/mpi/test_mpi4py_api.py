"""mpi4py's communicator calls beyond planaria's own on ``pl.world()``, as real jobs on each backend."""
from __future__ import annotations

import pytest

from tests.mpi.mpijob import SCRIPTS, mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_mpi4py_calls_and_their_failures(backend: str) -> None:
    env = {"PLANARIA_INJECT": "kill:rank=3,iter=0"}
    res = mpiexec(4, [str(SCRIPTS / "mpi4py_api.py"), backend], ft=backend == "ulfm", env=env)
    detail = f"{res.out[-2000:]}\n{res.err[-3000:]}"
    assert "FAIL" not in res.out, detail
    oks = sorted(int(line.split()[1]) for line in res.out.splitlines() if line.startswith("OK "))
    assert oks == [0, 1, 2], detail
