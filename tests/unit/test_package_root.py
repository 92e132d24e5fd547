"""The package root loads its public names on first use, so the ``planaria`` command starts without numpy or MPI."""
from __future__ import annotations

import subprocess
import sys

import pytest

import planaria

HEAVY = ("numpy", "mpi4py", "mpi4py.MPI")


def _modules_after(code: str) -> set[str]:
    """Names of HEAVY modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return set(res.stdout.split())


def test_the_command_line_starts_without_numpy_or_mpi():
    assert _modules_after("import planaria.cli.main as m; m._register()") == set()


def test_a_public_name_loads_its_module():
    # the communicator's modules load, numpy only when a call first needs it (planaria._lazy)
    assert _modules_after("import planaria as pl; pl.Comm") == set()
    assert _modules_after("from planaria import world") == set()
    assert _modules_after("from planaria._lazy import np; np.zeros(1)") == {"numpy"}


def test_public_names_are_the_defining_modules_objects():
    from planaria.comm.base import Comm
    from planaria.comm.errors import RevokedError
    from planaria.runtime.bootstrap import world
    assert planaria.Comm is Comm and planaria.RevokedError is RevokedError and planaria.world is world
    assert set(planaria.__all__) <= set(dir(planaria))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        planaria.nothing  # noqa: B018


@pytest.mark.timeout(60)
def test_a_rank_s_start_imports_no_dataclasses():
    # world() loads these on every rank; dataclasses (inspect, ast, tokenize) would add ~10 ms of CPU to each
    code = ("import sys\nimport planaria.runtime.bootstrap, planaria.runtime.agent, planaria.events.local, "
            "planaria.localize.service, planaria.localize.thresholds, planaria.localize.topology\n"
            "print(' '.join(m for m in ('dataclasses', 'inspect', 'ast') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == []
