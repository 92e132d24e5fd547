"""The benchmark's graphs and bounds (pure), and the CLI's one-line errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from benchmarks.fragments import (critical_path, descendants, ideal_makespan, irregular_graph, list_schedule,
                                  matmul_error, matmul_graph, seeded_block)

ROOT = Path(__file__).resolve().parents[2]


@given(st.integers(1, 200), st.integers(1, 8), st.integers(0, 50))
def test_irregular_graph_is_a_dag_with_the_asked_mean(tasks, layers, seed):
    g = irregular_graph(tasks, layers, 0.04, 1.0, seed)
    assert len(g["dur"]) == len(g["deps"]) == tasks
    assert all(j < i for i, ds in enumerate(g["deps"]) for j in ds)
    assert sum(g["dur"]) / tasks == pytest.approx(0.04, rel=1e-3)
    assert g == irregular_graph(tasks, layers, 0.04, 1.0, seed)        # deterministic


@given(st.lists(st.floats(0.001, 1.0), min_size=1, max_size=30), st.integers(1, 8), st.randoms())
def test_ideal_makespan_bounds(dur, workers, rnd):
    deps = [sorted({rnd.randrange(i) for _ in range(2)}) if i else [] for i in range(len(dur))]
    cp = critical_path(dur, deps)
    assert max(dur) <= cp + 1e-12 <= sum(dur) + 1e-9
    ideal = ideal_makespan(dur, deps, workers)
    assert ideal >= sum(dur) / workers - 1e-12 and ideal >= cp - 1e-12
    assert ideal_makespan(dur, [[] for _ in dur], 1) == pytest.approx(sum(dur))


@pytest.mark.parametrize("args,needle", [
    (["fragments", "run", "-n", "1", "--balancer", "--", "python", "x.py"], "at least 2 workers"),
    (["fragments", "run", "-n", "2", "--jobs-difference-ratio", "1.5", "--", "python", "x.py"], "[0, 1]"),
    (["fragments", "run", "-n", "2"], "after --"),
    (["fragments", "run", "-n", "2", "--termination", "never", "--", "python", "x.py"], "safra or paper"),
])
def test_cli_bad_input_is_one_line_exit_2(args, needle):
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args,needle", [
    (["fragments", "--workers", "0"], "worker list"),
    (["fragments", "--modes", "nope", "--workers", "1"], "unknown mode"),
    (["fragments", "--priority", "nope", "--workers", "1"], "unknown priority"),
    (["fragments", "--graphs", "matmul", "--nb", "0", "--workers", "1"], "--nb >= 1"),
])
def test_bench_bad_input_is_one_line_exit_2(args, needle):
    """``python -m benchmarks fragments`` from the repository root: bad options, one line, exit 2."""
    res = subprocess.run([sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_descendants_counts_every_task_below():
    #   0 -> 1 -> 3,  0 -> 2 -> 3,  3 -> 4;  5 alone
    deps = [[], [0], [0], [1, 2], [3], []]
    assert descendants(deps) == [4, 2, 2, 1, 0, 0]


@given(st.integers(8, 120), st.integers(2, 6), st.integers(0, 30), st.integers(1, 8))
def test_priority_schedules_stay_within_the_bounds(tasks, layers, seed, workers):
    g = irregular_graph(tasks, layers, 0.04, 1.0, seed)
    ideal = ideal_makespan(g["dur"], g["deps"], workers)
    for prio in ("fifo", "descendants", "critical"):
        mk = list_schedule(g["dur"], g["deps"], workers, prio)
        assert ideal - 1e-9 <= mk <= sum(g["dur"]) + 1e-9       # never below the bound, never worse than serial
        assert mk <= sum(g["dur"]) / workers + critical_path(g["dur"], g["deps"]) + 1e-9   # Graham's bound for any greedy order


@pytest.mark.parametrize("nb", [1, 2, 4])
def test_matmul_graph_has_every_block_task_after_its_inputs(nb):
    g = matmul_graph(nb)
    kinds, deps = g["kinds"], g["deps"]
    assert [kinds.count(k) for k in ("make", "mul", "sum", "collect")] == [2 * nb * nb, nb ** 3, nb * nb, 1]
    assert all(j < i for i, ds in enumerate(deps) for j in ds)
    assert all(sorted(kinds[j] for j in deps[i]) == ["make", "make"] for i in range(len(kinds)) if kinds[i] == "mul")
    assert all(len(deps[i]) == nb and {kinds[j] for j in deps[i]} == {"mul"} for i in range(len(kinds)) if kinds[i] == "sum")
    assert len(deps[-1]) == nb * nb and {kinds[j] for j in deps[-1]} == {"sum"}
    # the longest chain is one task of each kind
    t = {"make": 1.0, "mul": 10.0, "sum": 100.0, "collect": 1000.0}
    assert critical_path([t[k] for k in kinds], deps) == pytest.approx(1111.0)


def test_matmul_error_is_zero_for_the_product_and_not_otherwise():
    nb, bs = 2, 8
    a = np.block([[seeded_block(1000 + i * nb + k, bs) for k in range(nb)] for i in range(nb)])
    b = np.block([[seeded_block(2000 + k * nb + j, bs) for j in range(nb)] for k in range(nb)])
    c = a @ b
    blocks = [c[i * bs:(i + 1) * bs, j * bs:(j + 1) * bs].copy() for i in range(nb) for j in range(nb)]
    assert matmul_error(blocks, nb, bs) < 1e-12
    blocks[3][0, 0] += 0.5
    assert matmul_error(blocks, nb, bs) == pytest.approx(0.5)
