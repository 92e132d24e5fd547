"""``python -m benchmarks terrain`` at a tiny size: kernels, end to end and N-ABFT, with floors, goals and loads."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.mpi.mpijob import REPO, invoke_bench

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(300)
def test_bench_terrain_tiny(tmp_path) -> None:
    code, out = invoke_bench("terrain", ["--rows", "50", "--cols", "37", "--repeat", "2", "--workers", "1,3",
                                         "--workdir", str(tmp_path), "--json"])
    assert code == 0, out
    r = json.loads(out)
    k = r["kernels"]
    assert r["cells"] == 50 * 37 and k["floor_s"] > 0 and len(k["loadavg_before"]) == 3
    for name, goal in (("slope", 150e6), ("cutdepth", 100e6)):
        row = k[name]
        assert row["goal_cells_per_s"] == goal and row["bit_identical_to_reference"]
        assert row["cells_per_s"] == pytest.approx(r["cells"] / row["kernel_s"])
        assert row["goal_met"] == (row["cells_per_s"] >= goal)
        assert row["goal_met_cpu"] == (row["cells_per_cpu_s"] >= goal) and len(row["cpu_times_s"]) == 2
        assert row["cpu_s"] > 0 and row["cells_per_cpu_s"] == pytest.approx(r["cells"] / row["cpu_s"])
    e = r["end_to_end"]
    assert len([x for x in e["runs"] if x["who"] == "ours"]) == 2
    assert set(e["parts"]) == {"startup", "read", "compute", "write"} and all(v >= 0 for v in e["parts"].values())
    assert all(x["dtype"] == "float32" for x in e["runs"] if x["who"] == "ours")
    if shutil.which("gdaldem"):
        assert e["ratio"] == pytest.approx(e["ours_s"] / e["gdaldem_s"]) and e["goal"] == 0.8
        assert e["ours_cpu_s"] > 0 and e["gdaldem_cpu_s"] > 0
        assert e["agreement"]["fill_cells_agree"] and e["agreement"]["max_abs_diff_deg"] < 1e-3
    assert [(x["workers"], x["kernel"]) for x in r["abft"]] == [(1, "slope"), (1, "cutdepth"), (3, "slope"), (3, "cutdepth")]
    for x in r["abft"]:
        assert x["bit_identical"] and x["speedup"] == pytest.approx(x["one_process_kernel_s"] / x["wall_s"])
    assert list(tmp_path.glob("dem-*.tif")) and not list(tmp_path.glob("*slope*.tif"))


@pytest.mark.timeout(60)
def test_bench_terrain_bad_options_exit_2_from_the_command_line() -> None:
    code, out = invoke_bench("terrain", ["--rows", "5"])
    assert code == 2 and "too small" in out
    code, out = invoke_bench("terrain", ["--workers", "0"])
    assert code == 2 and "--workers" in out
    res = subprocess.run([sys.executable, "-m", "benchmarks", "terrain", "--repeat", "0"], capture_output=True,
                         text=True, timeout=60, cwd=REPO)
    assert res.returncode == 2 and "--repeat" in res.stderr
