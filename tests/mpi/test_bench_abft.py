"""``python -m benchmarks abft`` at a tiny size: every part runs through real ranks and its numbers hang together."""
from __future__ import annotations

import json

import pytest

from tests.mpi.mpijob import invoke_bench

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(150)
def test_bench_abft_tiny(tmp_path) -> None:
    code, out = invoke_bench("abft", ["--rows", "60", "--cols", "40", "--repeat", "1", "--kernels", "cutdepth", "--trials", "90",
                                      "--workdir", str(tmp_path), "--timeout", "45", "--json"])
    # (a job stuck past 45 s fails the benchmark with its stderr, well inside this test's bound)
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
    assert row["abft_pairs"] == 1 and len(row["abft_ci"]) == 2 and "verdict_wall" in row
    assert row["duplicate_cpu_paired_pct"] is not None
    s = r["faults"]["summary"]
    assert s["covered"]["injected"] == s["uncovered"]["injected"] == s["clean"]["trials"] == 30
    assert s["covered"]["detected"] == s["covered"]["located"] == 30          # every covered flip is caught
    assert s["uncovered"]["detected"] == 0                                    # the documented blind spot
    assert s["uncovered"]["undetected_wrong_outputs"] == 30
    assert s["clean"]["runs_flagged"] == 0 and s["clean"]["mismatching_comparisons"] == 0
    assert s["clean"]["comparisons"] == 30 * 3          # 3 boundaries; every one matches, so no edge check is needed
    t = r["throughput"]
    assert t["kernels"]["slope"]["cells_per_s"] > 0 and t["cells"] == 2400 and "abft" not in t
    assert t["kernels"]["slope"]["bit_identical_to_reference"] and t["kernels"]["cutdepth"]["bit_identical_to_reference"]
    if t["end_to_end"].get("gdaldem_s"):
        a = t["end_to_end"]["agreement"]
        assert a["fill_cells_agree"] and a["max_abs_diff_deg"] < 1e-3


@pytest.mark.timeout(30)
def test_bench_abft_bad_options_exit_2() -> None:
    code, out = invoke_bench("abft", ["--kernels", "aspect"])
    assert code == 2 and "kernel" in out
    code, out = invoke_bench("abft", ["--rows", "10"])
    assert code == 2 and "too small" in out


@pytest.mark.timeout(120)
def test_bench_abft_runs_in_one_job_on_tmpfs() -> None:
    """--per-job: a warm-up and the counted repetitions in the same processes, paired, with intervals."""
    code, out = invoke_bench("abft", ["--rows", "60", "--cols", "40", "--repeat", "4", "--per-job", "2", "--kernels", "slope",
                                      "--modes", "plain,abft", "--parts", "overhead", "--tmpfs", "--keep-heap", "--settle", "0",
                                      "--json"])
    assert code == 0, out
    r = json.loads(out)
    assert r["workdir_fs"] == "tmpfs" and r["keep_heap"] and r["per_job"] == 2
    ov = r["overhead"]
    assert "benchmarks.abft_series" in ov["mpiexec"]
    assert sorted((x["repetition"], x["mode"]) for x in ov["runs"]) == \
        [(i, m) for i in range(4) for m in ("abft", "plain")]                 # 2 jobs of 2 repetitions
    assert len(ov["warmup_runs"]) == 4 and all(x["launch_s"] is None for x in ov["runs"])
    assert len({x["digest"] for x in ov["runs"] + ov["warmup_runs"]}) == 1   # every run wrote the same raster
    (row,) = ov["rows"]
    assert row["abft_pairs"] == 4 and "duplicate_pairs" not in row
    lo, hi = row["abft_cpu_ci"]
    assert lo <= 1 + row["abft_cpu_paired_pct"] / 100 <= hi
    assert row["verdict_wall"] in ("met", "not shown", "missed") and row["verdict_cpu"] in ("met", "not shown", "missed")
    for x in ov["runs"]:
        assert 0 < x["compute_s_max"] < x["wall_s"] and x["cpu_total_s"] == pytest.approx(sum(x["cpu_per_rank_s"]))
    code, out = invoke_bench("abft", ["--per-job", "0", "--keep-heap", "--parts", "overhead"])
    assert code == 2 and "--keep-heap" in out
