"""``planaria bench abft`` at a tiny size: every part runs through real ranks and its numbers hang together."""
from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from planaria.cli import bench

pytestmark = pytest.mark.mpi


def _invoke(args: list[str]) -> tuple[int, str]:
    root = typer.Typer()
    root.add_typer(bench.app, name="bench")

    @root.callback()
    def _group() -> None:
        pass
    res = CliRunner().invoke(root, ["bench", "abft", *args])
    return res.exit_code, res.stdout + (res.stderr if res.stderr_bytes is not None else "")


@pytest.mark.timeout(150)
def test_bench_abft_tiny(tmp_path) -> None:
    code, out = _invoke(["--rows", "60", "--cols", "40", "--repeat", "1", "--kernels", "cutdepth", "--trials", "90",
                         "--workdir", str(tmp_path), "--json"])
    assert code == 0, out
    r = json.loads(out)
    (row,) = r["overhead"]["rows"]
    assert row["kernel"] == "cutdepth" and row["bit_identical"]
    runs = r["overhead"]["runs"]
    assert sorted(x["mode"] for x in runs) == ["abft", "duplicate", "plain"]
    assert {x["tasks"] for x in runs if x["mode"] == "duplicate"} == {8}
    for x in runs:
        assert 0 < x["compute_s_max"] < x["wall_s"] < x["launch_s"], x
        cpu = x["cpu_per_rank_s"]
        assert len(cpu) == r["workers"] + 2 and all(c > 0 for c in cpu), x
        assert x["cpu_total_s"] == pytest.approx(sum(cpu)) and x["cpu_total_s"] >= x["cpu_workers_max_s"] > 0, x
        assert x["cpu_masters_s"] == pytest.approx(cpu[0] + cpu[1]), x
    assert all(row["medians"][m]["cpu_total_s"] > 0 for m in ("plain", "abft", "duplicate"))
    assert row["abft_cpu_ratio_range"][0] <= 1 + row["abft_cpu_paired_pct"] / 100 <= row["abft_cpu_ratio_range"][1]
    assert row["duplicate_cpu_paired_pct"] is not None
    s = r["faults"]["summary"]
    assert s["covered"]["injected"] == s["uncovered"]["injected"] == s["clean"]["trials"] == 30
    assert s["covered"]["detected"] == s["covered"]["located"] == 30          # every covered flip is caught
    assert s["uncovered"]["detected"] == 0                                    # the documented blind spot
    assert s["uncovered"]["undetected_wrong_outputs"] == 30
    assert s["clean"]["runs_flagged"] == 0 and s["clean"]["mismatching_comparisons"] == 0
    assert s["clean"]["comparisons"] == 30 * (3 + 2)                          # 3 boundaries + 2 edge checks
    t = r["throughput"]
    assert t["ours"]["slope_kernel_cells_per_s"] > 0 and t["cells"] == 2400
    if t.get("gdaldem"):
        assert t["gdaldem"]["fill_cells_agree"] and t["gdaldem"]["max_abs_diff_deg"] < 1e-3


@pytest.mark.timeout(30)
def test_bench_abft_bad_options_exit_2() -> None:
    code, out = _invoke(["--kernels", "aspect"])
    assert code == 2 and "kernel" in out
    code, out = _invoke(["--rows", "10"])
    assert code == 2 and "too small" in out
