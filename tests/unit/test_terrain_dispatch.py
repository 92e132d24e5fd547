"""The choice between the compiled and the numpy terrain kernels (planaria.terrain.dispatch)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from planaria.terrain import dispatch
from planaria.util.env import PLANARIA_TERRAIN_KERNELS

PROBE = ("import sys, numpy as np, planaria.terrain as t; "
         "a = t.slope_degrees(np.arange(400.0).reshape(20, 20)); b = t.cut_depth(np.arange(900.0).reshape(30, 30)); "
         "print('numba' in sys.modules, 'planaria.terrain.compiled' in sys.modules)")


def _probe(kernels: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != PLANARIA_TERRAIN_KERNELS}
    if kernels is not None:
        env[PLANARIA_TERRAIN_KERNELS] = kernels
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0 or kernels == "fast", res.stderr
    return res.stdout.strip() if res.returncode == 0 else res.stderr.strip().splitlines()[-1]


def test_a_small_dem_never_loads_numba_unless_asked():
    assert _probe(None) == "False False"
    assert _probe("auto") == "False False"
    assert _probe("numpy") == "False False"
    assert _probe("compiled") == "True True"


def test_a_bad_setting_is_named():
    assert _probe("fast") == f"ValueError: {PLANARIA_TERRAIN_KERNELS} must be one of auto, compiled, numpy, got 'fast'"
    with pytest.raises(ValueError, match="method must be one of"):
        dispatch.compiled_for(10, "gpu")


def test_large_slabs_and_loaded_loops_run_compiled(monkeypatch):
    monkeypatch.delenv(PLANARIA_TERRAIN_KERNELS, raising=False)
    assert not dispatch.worth_loading(dispatch.MIN_CELLS - 1) and dispatch.worth_loading(dispatch.MIN_CELLS)
    from planaria.terrain import compiled                # loaded now: every call may use it
    assert dispatch.compiled_for(dispatch.MIN_CELLS) is compiled
    assert dispatch.compiled_for(10) is compiled
    assert dispatch.compiled_for(10**9, "numpy") is None
    monkeypatch.setenv(PLANARIA_TERRAIN_KERNELS, "numpy")
    assert dispatch.compiled_for(10**9) is None and not dispatch.worth_loading(10**9)
    monkeypatch.setenv(PLANARIA_TERRAIN_KERNELS, "compiled")
    assert dispatch.worth_loading(1)
