"""``python -m benchmarks fragments`` at a tiny size: each mode runs through real ranks and its numbers hang together."""
from __future__ import annotations

import json

import pytest

from tests.mpi.mpijob import invoke_bench

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(120)
def test_bench_fragments_tiny() -> None:
    code, out = invoke_bench("fragments", ["--graphs", "irregular", "--workers", "2", "--modes", "balancer-donor,static",
                                           "--tasks", "12", "--layers", "3", "--mean-ms", "5", "--repeat", "1",
                                           "--overhead-repeat", "0", "--timeout", "90", "--json"])
    assert code == 0, out
    r = json.loads(out)
    assert [(x["mode"], x["workers"]) for x in r["rows"]] == [("balancer-donor", 2), ("static", 2)]
    work = r["graph_irregular"]["total_work_s"]
    for x in r["rows"]:
        assert x["check"] == [pytest.approx(work, abs=1e-4)], x      # the sum of every task's duration (4 decimals)
        assert x["ideal_s"] <= x["greedy_fifo_s"] <= work, x
        assert 0 < x["efficiency"] <= 1.0, x                       # nothing beats the lower bound
        assert 0 < x["cpu_s"] == pytest.approx(x["cpus_s"][0], abs=1e-4), x   # ranks' CPU during fr.run, one launch
    assert r["rows"][1]["moves"] == 0                              # static placement never moves a CF


@pytest.mark.timeout(180)
def test_bench_fragments_matmul_against_dask() -> None:
    # the block product on ranks and on a Dask LocalCluster, both checked against A @ B after the clock,
    # and the ideal makespan from each kind of block task timed alone
    code, out = invoke_bench("fragments", ["--graphs", "matmul", "--workers", "2", "--modes", "balancer-donor,dask",
                                           "--nb", "2", "--bs", "40", "--repeat", "1", "--overhead-repeat", "0",
                                           "--timeout", "120", "--json"])
    assert code == 0, out
    r = json.loads(out)
    g = r["graph_matmul"]
    assert g["tasks"] == 2 * 4 + 8 + 4 + 1 and set(g["task_s"]) == {"make", "mul", "sum", "collect"}
    assert 0 < g["critical_path_s"] < g["total_work_s"]
    assert [(x["mode"], x["workers"]) for x in r["rows"]] == [("balancer-donor", 2), ("dask", 2)]
    for x in r["rows"]:
        assert x["check"][0] < 1e-9, x                            # C equals A @ B
        assert x["ideal_s"] == pytest.approx(max(g["total_work_s"] / 2, g["critical_path_s"]))
        assert x["efficiency"] == pytest.approx(x["ideal_s"] / x["wall_s"])
