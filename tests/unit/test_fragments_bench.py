"""The benchmark's graphs and bounds (pure), and the CLI's one-line errors."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from planaria.bench.fragments import critical_path, descendants, ideal_makespan, irregular_graph, list_schedule


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
    (["bench", "fragments", "--workers", "0"], "worker list"),
    (["bench", "fragments", "--modes", "nope", "--workers", "1"], "unknown mode"),
    (["bench", "fragments", "--priority", "nope", "--workers", "1"], "unknown priority"),
])
def test_cli_bad_input_is_one_line_exit_2(args, needle):
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", *args], capture_output=True, text=True, timeout=60)
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
