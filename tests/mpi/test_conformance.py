"""ULFM conformance of planaria.Comm, as real mpiexec jobs: real ULFM, simulation on Open MPI, simulation on MPICH."""
from __future__ import annotations

import pytest

from tests.mpi.mpijob import SCRIPTS, mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(150)]

# case -> (ranks, fault plan, ranks expected to print OK)
CASES = {
    "error_return": (4, "kill:rank=3,iter=0", [0, 1, 2]),
    "insulation": (4, "kill:rank=3,iter=0", [0, 1, 2]),
    "revoke_p2p": (5, "", [0, 1, 2, 3, 4]),
    "revoke_coll": (5, "", [0, 1, 2, 3, 4]),
    "shrink": (6, "kill:rank=1,iter=0", [0, 2, 3, 4, 5]),
    "agree": (4, "kill:rank=3,iter=0", [0, 1, 2]),
    "get_ack": (4, "kill:rank=3,iter=0", [0, 1, 2]),
    "kill_shrink_loop": (5, "", [0]),
    "pickle_collective": (4, "", [0, 1, 2]),
    "uncaught": (4, "", [0, 1, 2]),
    "injected_time": (4, "kill:rank=1,time=1.0", [0, 2, 3]),
    "split": (5, "kill:rank=4,iter=0", [0, 1, 2, 3]),
    "mpi4py_names": (5, "kill:rank=4,iter=0", [0, 1, 2, 3]),
}

BACKENDS = ["ulfm", "sim-openmpi", "sim-mpich"]


def run_case(case: str, backend: str, mpich_python: str | None):
    n, plan, survivors = CASES[case]
    env = {"PLANARIA_INJECT": plan} if plan else {}
    if backend == "ulfm":
        res = mpiexec(n, [str(SCRIPTS / "conformance.py"), case, "ulfm"], ft=True, env=env)
    elif backend == "sim-openmpi":
        res = mpiexec(n, [str(SCRIPTS / "conformance.py"), case, "sim"], env=env)
    else:
        res = mpiexec(n, [str(SCRIPTS / "conformance.py"), case, "sim"], python=mpich_python, env=env)
    return res, survivors


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_conformance(case: str, backend: str, request) -> None:
    mpich = request.getfixturevalue("mpich_python") if backend == "sim-mpich" else None
    res, survivors = run_case(case, backend, mpich)
    detail = f"\n--- stdout\n{res.out}\n--- stderr\n{res.err[-3000:]}"
    assert "FAIL" not in res.out, detail
    oks = res.ok_ranks(case)
    assert oks == survivors, f"ranks reporting OK {oks}, expected {survivors}{detail}"
    assert res.code == 0, f"exit code {res.code}{detail}"
