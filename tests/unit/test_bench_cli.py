"""Smoke test of ``planaria bench``: tiny runs of both benchmarks through the typer sub-app."""
from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from planaria.cli import bench

pytestmark = pytest.mark.mpi


def _root() -> typer.Typer:
    root = typer.Typer()
    root.add_typer(bench.app, name="bench")

    @root.callback()
    def _group() -> None:
        pass
    return root


def _invoke(args: list[str]) -> dict:
    res = CliRunner().invoke(_root(), ["bench", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.timeout(120)
def test_bench_overhead_tiny() -> None:
    out = _invoke(["overhead", "--ranks", "2", "--backend", "ulfm,sim", "--iters", "20", "--sr-iters", "2",
                   "--blocks", "6", "--json"])
    assert out["benchmark"] == "overhead"
    cases = {(r["backend"], r["case"]) for r in out["rows"]}
    assert cases == {(b, c) for b in ("ulfm", "sim") for c in ("allreduce_8B", "sendrecv_1MiB")}
    for r in out["rows"]:
        assert r["ranks"] == 2
        for k in ("raw_ns_median", "planaria_ns_median", "ratio", "paired_ratio_median"):
            assert r[k] > 0, (k, r)
        if r["backend"] == "ulfm":
            assert r["goal"] > 0 and isinstance(r["goal_met"], bool)
        else:
            assert r["goal"] is None


@pytest.mark.timeout(120)
def test_bench_failure_sim_4_ranks() -> None:
    out = _invoke(["failure", "--ranks", "4", "--backend", "sim", "--repeat", "1", "--json"])
    assert out["benchmark"] == "failure" and out["backend"] == "sim"
    (row,) = out["rows"]
    assert row["ranks"] == 4 and row["jobs"] == 1
    for k in ("detect_ms_median", "detect_ms_max", "recover_ms_median", "recover_ms_max",
              "kill_to_shrunk_ms_max", "launch_s_median"):
        assert row[k] > 0, (k, row)
    assert row["detect_ms_max"] >= row["detect_ms_median"]
    (job,) = row["runs"]
    assert job["survivors"] == 3 and job["new_size"] == 3
    assert sum(row["first_errors"].values()) == 3
    assert len(job["per_rank"]) == 3
