"""Hang filter: sample count bound, stable-thread mask, grouping (against a dict-based reference), rank-range
text, in-process sampling of real threads, and a tiny run of the grouping benchmark and its command."""
from __future__ import annotations

import json
import math
import threading
import time

import numpy as np
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planaria.bench import hangfilter as hb
from planaria.cli import bench as bench_cli
from planaria.diagnose.hangfilter import (group, parse_rank_ranges, rank_ranges, sample_local, samples_needed,
                                          stable_threads)

FAST = settings(max_examples=150, deadline=None)


# --------------------------------------------------------------------------- samples_needed
def test_samples_needed_paper_value() -> None:
    assert samples_needed(10_000_000, 250) == 4
    assert samples_needed(12_779_520) == 4


def test_samples_needed_exact_power_is_strict() -> None:
    # n = k**2: 1 + ln n / ln k = 3 exactly, and s must be > 3
    assert samples_needed(250 ** 2, 250) == 4
    assert samples_needed(250 ** 2 - 1, 250) == 3
    assert samples_needed(1, 250) == 2
    assert samples_needed(2, 2) == 3


@FAST
@given(st.integers(1, 10 ** 15), st.integers(2, 10 ** 5))
def test_samples_needed_is_minimal(n: int, k: int) -> None:
    s = samples_needed(n, k)
    assert s >= 2
    assert k ** (s - 1) > n                       # expected false positives n * k**(1-s) < 1
    if s > 2:
        assert k ** (s - 2) <= n                  # s - 1 would not do
    bound = 1 + math.log(n) / math.log(k)
    assert s > bound - 1e-9 and s - 1 <= max(bound, 1) + 1e-9


@pytest.mark.parametrize("n,k", [(0, 250), (-5, 250), (10, 1), (10, 0), (2.5, 250), (10, 250.0), (True, 250)])
def test_samples_needed_rejects_bad_input(n: object, k: object) -> None:
    with pytest.raises(ValueError):
        samples_needed(n, k)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- rank_ranges
def test_rank_ranges_examples() -> None:
    assert rank_ranges([0, 1, 2, 3, 5, 9, 10, 11]) == "0-3,5,9-11"
    assert rank_ranges(np.array([7, 3, 3, 4])) == "3-4,7"
    assert rank_ranges([]) == ""
    assert rank_ranges(np.array([42], dtype=np.uint16)) == "42"
    with pytest.raises(ValueError):
        rank_ranges([-1, 2])
    with pytest.raises(ValueError):
        rank_ranges([1.5])


@FAST
@given(st.lists(st.integers(0, 300), max_size=80))
def test_rank_ranges_round_trip(ranks: list[int]) -> None:
    text = rank_ranges(ranks)
    assert parse_rank_ranges(text).tolist() == sorted(set(ranks))
    assert rank_ranges(parse_rank_ranges(text)) == text
    # canonical: no two items touch or overlap
    items = [list(map(int, p.split("-"))) for p in text.split(",")] if text else []
    for a, b in zip(items, items[1:], strict=False):
        assert b[0] > a[-1] + 1


@pytest.mark.parametrize("bad", ["x", "3-1", "1,,2", "-4", "1-2-3"])
def test_parse_rank_ranges_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_rank_ranges(bad)


# --------------------------------------------------------------------------- reference implementation
def _reference(samples: np.ndarray, ranks: np.ndarray, names: list[str] | None) -> list[tuple]:
    classes: dict[int, dict] = {}
    for i in range(samples.shape[0]):
        row = samples[i].tolist()
        if all(v == row[0] for v in row):
            c = classes.setdefault(row[0], {"count": 0, "ranks": set(), "names": set()})
            c["count"] += 1
            c["ranks"].add(int(ranks[i]))
            if names is not None:
                c["names"].add(names[i])
    out = [(sid, c["count"], sorted(c["ranks"]), c["names"]) for sid, c in classes.items()]
    return sorted(out, key=lambda t: (t[1], t[0]))


@st.composite
def _inputs(draw: st.DrawFn, big_ranks: bool = False) -> tuple[np.ndarray, np.ndarray, list[str]]:
    n = draw(st.integers(0, 60))
    s = draw(st.integers(1, 4))
    hi = draw(st.integers(0, 8))
    base = draw(st.lists(st.integers(0, hi), min_size=n, max_size=n))
    flips = draw(st.lists(st.booleans(), min_size=n * s, max_size=n * s))
    noise = draw(st.lists(st.integers(-2, hi + 3), min_size=n * s, max_size=n * s))
    samples = np.array(base, dtype=np.int32).reshape(n, 1).repeat(s, axis=1)
    for idx, (f, v) in enumerate(zip(flips, noise, strict=True)):
        if f and idx % s:                          # column 0 stays the base id; later rounds may change
            samples[idx // s, idx % s] = v
    rank_pool = st.integers(0, 3 * 10 ** 9) if big_ranks else st.integers(0, 12)
    ranks = np.array(draw(st.lists(rank_pool, min_size=n, max_size=n)), dtype=np.int64)
    names = draw(st.lists(st.sampled_from(["main", "agent", "io", "w1"]), min_size=n, max_size=n))
    return samples, ranks, names


def _as_tuples(classes: list) -> list[tuple]:
    return [(c.stack_id, c.count, c.ranks.tolist(), c.names) for c in classes]


@FAST
@given(_inputs())
def test_group_matches_reference(data: tuple) -> None:
    samples, ranks, names = data
    want = _reference(samples, ranks, names)
    assert _as_tuples(group(samples, ranks, names)) == want
    # same answer from a Fortran-order array and from per-round columns, and without names
    cols = [samples[:, j].copy() for j in range(samples.shape[1])]
    assert _as_tuples(group(cols, ranks.astype(np.int32), names)) == want
    assert _as_tuples(group(np.asfortranarray(samples), ranks)) == [(a, b, c, set()) for a, b, c, _ in want]


@FAST
@given(_inputs(big_ranks=True))
def test_group_matches_reference_wide_rank_span(data: tuple) -> None:
    # rank span up to 3e9: too wide for the presence table and beyond int32, so the sorted-key path runs
    samples, ranks, names = data
    assert _as_tuples(group(samples, ranks, names)) == _reference(samples, ranks, names)


@FAST
@given(_inputs())
def test_stable_threads_matches_rows(data: tuple) -> None:
    samples, _, _ = data
    want = np.array([len(set(row.tolist())) == 1 for row in samples], dtype=bool).reshape(-1)
    assert np.array_equal(stable_threads(samples), want)
    assert np.array_equal(stable_threads([samples[:, j] for j in range(samples.shape[1])]), want)


def test_group_orders_small_classes_first_and_fills_fields() -> None:
    stacks = [
        [("app.py", 1, "main"), ("app.py", 20, "solve"), ("mpi.py", 7, "Allreduce")],
        [("app.py", 1, "main"), ("app.py", 33, "exchange"), ("mpi.py", 9, "Recv")],
        [("app.py", 1, "main")],
        [],
    ]
    # 7 threads (ranks 0-4,6,7) waiting in Allreduce, 2 (ranks 3, 5) in Recv, 1 thread changing stacks
    col0 = np.array([0, 0, 0, 1, 0, 1, 0, 0, 0, 2], dtype=np.int32)
    col1 = col0.copy()
    col1[9] = 3
    ranks = np.array([0, 1, 2, 3, 4, 5, 6, 7, 3, 9])
    names = [f"t{i}" for i in range(10)]
    out = group([col0, col1, col0.copy()], ranks, names, stacks)
    assert [c.stack_id for c in out] == [1, 0]
    recv, coll = out
    assert recv.count == 2 and recv.ranks.tolist() == [3, 5] and recv.rank_ranges == "3,5"
    assert recv.names == {"t3", "t5"}
    assert recv.site == "mpi.py:9 in Recv" and recv.stack == tuple(stacks[1])
    assert coll.count == 7 and coll.rank_ranges == "0-4,6-7" and coll.n_ranks == 7
    # ties by stack id; an empty stack gets a placeholder site
    tie = group(np.array([[3, 3], [2, 2]]), [0, 1], stacks=stacks)
    assert [(c.stack_id, c.site) for c in tie] == [(2, "app.py:1 in main"), (3, "<no frames>")]


def test_group_edge_cases() -> None:
    assert group(np.empty((0, 3), dtype=np.int32), np.empty(0, dtype=np.int32)) == []
    assert group(np.array([[1, 2], [3, 4]]), [0, 1]) == []          # nothing stable
    one = group(np.array([[5], [5], [6]]), [2, 2, 0])               # a single round: every thread counts
    assert [(c.stack_id, c.count, c.rank_ranges) for c in one] == [(6, 1, "0"), (5, 2, "2")]


@pytest.mark.parametrize("call", [
    lambda: group(np.zeros((3, 2), np.int32), [0, 1]),                      # rank count
    lambda: group(np.zeros((3, 2), np.int32), [0, 1, 2], ["a"]),            # name count
    lambda: group(np.zeros(3, np.int32), [0, 1, 2]),                        # 1-D samples
    lambda: group(np.zeros((3, 0), np.int32), [0, 1, 2]),                   # no rounds
    lambda: group([], []),                                                  # no rounds
    lambda: group([np.zeros(3, np.int32), np.zeros(2, np.int32)], [0, 1, 2]),  # ragged rounds
    lambda: group(np.zeros((3, 2), np.float64), [0, 1, 2]),                 # float ids
    lambda: group(np.full((3, 2), -1), [0, 1, 2]),                          # negative stable id
    lambda: group(np.zeros((3, 2), np.int32), [0, -1, 2]),                  # negative rank
    lambda: group(np.full((3, 2), 4), [0, 1, 2], stacks=[[], []]),          # id outside the table
])
def test_group_rejects_bad_input(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        call()


def test_group_ignores_negative_ids_of_unstable_threads() -> None:
    samples = np.array([[0, -1], [1, 1], [-1, -2]])
    assert _as_tuples(group(samples, [0, 1, 2])) == [(1, 1, [1], set())]


# --------------------------------------------------------------------------- sample_local
def _blocked_here(ev: threading.Event, done: threading.Event) -> None:
    ev.wait()
    done.set()


def _locked_here(lock: threading.Lock) -> None:
    lock.acquire()
    lock.release()


def _spin_here(stop: threading.Event, box: list[int]) -> None:
    x = 0
    while not stop.is_set():
        x += 1
    box.append(x)


def test_sample_local_finds_blocked_threads() -> None:
    ev, done, stop = threading.Event(), threading.Event(), threading.Event()
    lock = threading.Lock()
    lock.acquire()
    box: list[int] = []
    blocked = threading.Thread(target=_blocked_here, args=(ev, done), name="hf-blocked", daemon=True)
    locked = threading.Thread(target=_locked_here, args=(lock,), name="hf-locked", daemon=True)
    spinner = threading.Thread(target=_spin_here, args=(stop, box), name="hf-spin", daemon=True)
    for t in (blocked, locked, spinner):
        t.start()
    try:
        time.sleep(0.05)
        samples, names, stacks = sample_local(rounds=4, interval=0.02)
    finally:
        ev.set()
        lock.release()
        stop.set()
        for t in (blocked, locked, spinner):
            t.join(5)
    assert samples.shape[1] == 4 and samples.dtype == np.int32 and samples.flags.f_contiguous
    assert len(names) == samples.shape[0]
    assert threading.current_thread().name not in names            # the sampling thread is left out
    for want in ("hf-blocked", "hf-locked", "hf-spin"):
        assert want in names
    stable = stable_threads(samples)
    row = {name: i for i, name in enumerate(names)}
    for name, func in (("hf-blocked", "_blocked_here"), ("hf-locked", "_locked_here")):
        i = row[name]
        assert stable[i], name
        stack = stacks[samples[i, 0]]
        assert stack[0][2] == "_bootstrap"                         # outermost first
        assert any(f[0] == __file__ and f[2] == func for f in stack)
    # a C-level lock wait leaves the calling line of this file as the innermost frame
    classes = group(samples, np.zeros(len(names), dtype=np.int64), names, stacks)
    locked_cls = next(c for c in classes if "hf-locked" in c.names)
    assert locked_cls.site.startswith(f"{__file__}:") and locked_cls.site.endswith(" in _locked_here")
    # the spinning thread is sampled in every round inside its loop (it may look stable: the known false positive)
    i = row["hf-spin"]
    assert all(any(f[2] == "_spin_here" for f in stacks[sid]) for sid in samples[i])


def test_sample_local_rejects_bad_input() -> None:
    for rounds, interval in ((0, 0.1), (2.0, 0.1), (2, -1.0), (2, float("nan"))):
        with pytest.raises(ValueError):
            sample_local(rounds, interval)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- benchmark and command
def test_bench_run_small_grid() -> None:
    res = hb.run(threads=[2000, 6500], samples=3, classes=[2, 16], repeat=2, warmup=0, hung_fraction=0.5)
    assert [(r["threads"], r["classes"]) for r in res["rows"]] == [(2000, 2), (2000, 16), (6500, 2), (6500, 16)]
    for r in res["rows"]:
        assert len(r["group_s"]) == 2 and 0 < r["group_s_min"] <= r["group_s_median"]
        assert r["samples_needed"] == samples_needed(r["threads"])
        assert 0 < r["hung"] < r["threads"] and "goal_met" not in r
    assert res["rows"][0]["ranks"] == math.ceil(2000 / 65)


@pytest.mark.parametrize("layout", hb.LAYOUTS)
def test_bench_synth_truth(layout: str) -> None:
    data, ranks, truth = hb.synth(3000, 4, 8, hung_fraction=0.3, layout=layout, seed=3)
    out = group(data, ranks)
    assert sum(c.count for c in out) == truth["n_hung"]
    assert sorted(c.stack_id for c in out) == truth["hung_ids"].tolist()
    hb._check(sorted(out, key=lambda c: (c.count, c.stack_id)), ranks, truth)


def _root() -> typer.Typer:
    root = typer.Typer()
    root.add_typer(bench_cli.app, name="bench")

    @root.callback()
    def _group() -> None:
        pass
    return root


def test_bench_command_json_and_bad_input() -> None:
    res = CliRunner().invoke(_root(), ["bench", "hangfilter", "--threads", "1000,3000", "--classes", "4",
                                       "--repeat", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["benchmark"] == "hangfilter" and [r["threads"] for r in out["rows"]] == [1000, 3000]
    for args in (["--threads", "12x"], ["--classes", "0"], ["--threads", "10", "--classes", "64"],
                 ["--hung-fraction", "0"], ["--layout", "Z"], ["--repeat", "0"]):
        bad = CliRunner().invoke(_root(), ["bench", "hangfilter", "--threads", "1000", *args])
        assert bad.exit_code == 2, (args, bad.output)
