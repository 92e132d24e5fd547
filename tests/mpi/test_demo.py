"""`planaria demo` end to end on both backends: two failures survived, result equal to the serial run."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.mpi.mpijob import root_env

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(180)]


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_demo_survives_two_failures(backend: str, tmp_path) -> None:
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    cmd = [sys.executable, "-m", "planaria.cli.main", "demo", "--backend", backend, "--json",
           "--cells-per-rank", "5000", "--steps", "160", "--every", "20",
           "--inject", "kill:rank=1,iter=45", "--inject", "kill:rank=4,iter=110", "--timeout", "120"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout[res.stdout.index("{"):])
    assert report["bit_identical"] is True
    assert report["ranks_start"] == 6 and report["ranks_end"] == 4
    assert [ev["restored_version"] for ev in report["failures"]] == [40, 100]


def test_serial_reference_detects_a_changed_cell() -> None:
    """The bit-for-bit check is sensitive: one ulp in one cell is a difference."""
    import numpy as np

    from planaria.demo.heat import serial_reference
    ref = serial_reference(1000, 50, 0.25, 1)
    other = ref.copy()
    other[500] = np.nextafter(other[500], np.inf)
    assert ref.tobytes() != other.tobytes()
    assert serial_reference(1000, 50, 0.25, 1).tobytes() == ref.tobytes()
