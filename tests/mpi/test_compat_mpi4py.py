"""mpi4py's own tests on ``pl.world()`` (a fast subset of ``python -m benchmarks compat``): every test of these
modules that passes with raw mpi4py passes with planaria, on both backends.

mpi4py's ``test/`` comes from the installed version's source distribution (``pip download``, cached
in ~/.cache/planaria); the whole run, all modules, is ``python -m benchmarks compat``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = ("cco_obj", "p2p_buf", "cco_nb_buf", "cco_vec")

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def records() -> list[dict]:
    res = subprocess.run([sys.executable, "-m", "benchmarks", "compat", "--modules", ",".join(MODULES),
                          "--modes", "raw,ulfm,sim", "--timeout", "90", "--json"],
                         capture_output=True, text=True, timeout=560, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


@pytest.mark.parametrize("mode", ["ulfm", "sim"])
@pytest.mark.parametrize("module", MODULES)
def test_what_passes_raw_passes_on_planaria(records: list[dict], module: str, mode: str) -> None:
    def rec(m: str) -> dict:
        return next(r for r in records if r["mode"] == m and r["module"] in (module, f"test_{module}"))
    raw, pl = rec("raw"), rec(mode)
    assert not pl.get("hang") and "passed_ids" in pl, pl
    assert raw.get("passed", 0) > 0, raw
    missing = sorted(set(raw["passed_ids"]) - set(pl["passed_ids"]))
    assert not missing, (missing, pl.get("failures"))
