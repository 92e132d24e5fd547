"""The statistics of ``python -m benchmarks abft``: paired ratios, bootstrap intervals, verdicts, pooling results."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import abft as ab
from benchmarks._launch import BenchError


def _run(kernel: str, mode: str, rep: int, wall: float, cpu: float, digest: str = "d") -> dict:
    return {"kernel": kernel, "mode": mode, "repetition": rep, "wall_s": wall, "cpu_total_s": cpu, "digest": digest,
            "cpu_workers_max_s": cpu / 4, "cpu_masters_s": cpu / 10, "read_s_max": 0.0, "compute_s_max": wall / 2,
            "part_write_s_max": 0.0, "digest_s_max": 0.0, "compute_s_sum": wall, "verification_s": 0.0,
            "edge_rows_s": 0.0, "write_output_s": 0.0, "cross_check_s": 0.0}


def _runs(ratios: list[float], kernel: str = "slope") -> list[dict]:
    out = []
    for i, q in enumerate(ratios):
        base = 1.0 + 0.3 * (i % 5)            # slow drifts between repetitions cancel in the pairs
        out += [_run(kernel, "plain", i, base, 2 * base), _run(kernel, "abft", i, base * q, 2 * base * q)]
    return out


def test_bootstrap_interval_brackets_the_median_and_narrows_with_more_pairs() -> None:
    rng = np.random.default_rng(4)
    few = list(1.0 + rng.normal(0, 0.05, 10))
    many = list(1.0 + rng.normal(0, 0.05, 400))
    lo, hi = ab.bootstrap_median_ci(few)
    assert lo <= float(np.median(few)) <= hi
    lo2, hi2 = ab.bootstrap_median_ci(many)
    assert lo2 <= float(np.median(many)) <= hi2 and hi2 - lo2 < (hi - lo) / 3
    assert ab.bootstrap_median_ci([1.01] * 7) == (1.01, 1.01)
    assert ab.bootstrap_median_ci(few) == (lo, hi)               # fixed seed: reproducible


def test_verdict_needs_the_whole_interval() -> None:
    assert ab.verdict((0.98, 1.019)) == "met"
    assert ab.verdict((0.99, 1.021)) == "not shown"           # the central value alone would pass
    assert ab.verdict((1.021, 1.05)) == "missed"
    assert ab.verdict(None) == "not shown"


def test_summary_pairs_within_a_repetition_and_gives_verdicts() -> None:
    rows = ab.summarize(_runs([1.001, 0.999, 1.002, 1.0, 1.003] * 8), ["slope"], ["plain", "abft"])
    (row,) = rows
    assert row["abft_pairs"] == 40 and row["abft_paired_pct"] == pytest.approx(0.1, abs=1e-9)
    assert row["abft_ci"][1] <= 1.02 and row["verdict_wall"] == "met" and row["verdict_cpu"] == "met"
    assert "duplicate_pairs" not in row
    noisy = ab.summarize(_runs([0.85, 1.2, 0.9, 1.15, 1.0, 1.1]), ["slope"], ["plain", "abft"])[0]
    assert noisy["verdict_wall"] == "not shown" and noisy["goal_met"] is False
    slow = ab.summarize(_runs([1.05, 1.06, 1.04, 1.05] * 5), ["slope"], ["plain", "abft"])[0]
    assert slow["verdict_wall"] == "missed"


def test_summary_refuses_different_outputs() -> None:
    runs = _runs([1.0, 1.0])
    runs[1]["digest"] = "other"
    with pytest.raises(BenchError, match="different rasters"):
        ab.summarize(runs, ["slope"], ["plain", "abft"])


def _result(path, runs: list[dict], **over) -> str:
    r = {"benchmark": "abft", "rows": 100, "cols": 80, "workers": 4, "backend": "ulfm", "cores": 2,
         "modes": ["plain", "abft"], "workdir_fs": "tmpfs", "keep_heap": True, "settle_s": 0.0, "per_job": 5,
         "kernels": sorted({x["kernel"] for x in runs}), "repeat": 5, "command": "x", "date": "d",
         "loadavg_before": [0.1, 0, 0], "loadavg_after": [1.0, 0, 0], "total_s": 1.0,
         "overhead": {"runs": runs, "rows": [], "modes": ["plain", "abft"], "per_job": 5, "mpiexec": "m"}}
    r.update(over)
    path.write_text(json.dumps(r))
    return str(path)


def test_combine_pools_runs_of_the_same_setup_and_never_pairs_across_results(tmp_path) -> None:
    a = _result(tmp_path / "a.json", _runs([1.0] * 5))
    b = _result(tmp_path / "b.json", _runs([1.0] * 5, "cutdepth"))
    # repetition numbers overlap across results: pairing by (result, repetition) keeps them apart
    c = _result(tmp_path / "c.json", [dict(x, wall_s=x["wall_s"] * 3, cpu_total_s=x["cpu_total_s"] * 3)
                                      for x in _runs([1.0] * 5)])
    out = ab.combine([a, b, c])
    rows = {r["kernel"]: r for r in out["overhead"]["rows"]}
    assert rows["slope"]["abft_pairs"] == 10 and rows["cutdepth"]["abft_pairs"] == 5
    assert rows["slope"]["abft_ratio_range"] == [1.0, 1.0]
    assert out["combined"] and len(out["sources"]) == 3 and out["kernels"] == ["slope", "cutdepth"]
    with pytest.raises(ValueError, match="workdir_fs"):
        ab.combine([a, _result(tmp_path / "d.json", _runs([1.0]), workdir_fs="ext4")])
    with pytest.raises(ValueError, match="mixes one launch per run"):
        ab.combine([a, _result(tmp_path / "e.json", _runs([1.0]), per_job=0)])
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="cannot read"):
        ab.combine([str(tmp_path / "bad.json")])
    with pytest.raises(BenchError, match="different rasters"):
        ab.combine([a, _result(tmp_path / "f.json", [dict(x, digest="z") for x in _runs([1.0])])])
