"""Unit tests of the pure N-ABFT model (planaria.abft: partition, verify, recovery)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planaria.abft.partition import (
    block_sizes, halo, input_rows, nrow, partition, property1_rows, verification_shape,
)
from planaria.abft.taskrecovery import (
    MasterState, NoLiveWorkerError, cross_check, finish, mark_verified, plan,
)
from planaria.abft.verify import (
    CORRECT, TRANSIENT, UNRECOVERABLE, block_digest, compare, covered_rows, locate, timeouts,
    verification_set,
)

FAST = settings(max_examples=60, deadline=None)
windows = st.sampled_from([1, 3, 5, 11])


@st.composite
def layouts(draw, min_n=1, max_n=8):
    n = draw(st.integers(min_n, max_n))
    h_rows = draw(st.integers(n, 60))
    return h_rows, n, draw(windows)


# ---------------------------------------------------------------- partition

def test_halo_nrow():
    assert [halo(m) for m in (1, 3, 5, 11)] == [0, 1, 2, 5]
    assert [nrow(m) for m in (1, 3, 5, 11)] == [1, 2, 3, 6]
    with pytest.raises(ValueError):
        halo(4)
    with pytest.raises(ValueError):
        block_sizes(3, 4)


@FAST
@given(layouts())
def test_partition_invariants(lay):
    h_rows, n, m = lay
    blocks = partition(h_rows, n, m)
    h = halo(m)
    owned = [r for b in blocks for r in range(b.r0, b.r1)]
    assert owned == list(range(h_rows))                       # every row exactly once, in order
    sizes = [b.local_size for b in blocks]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    for b in blocks:
        last = b.rank == n - 1
        assert b.check_row == (None if last else b.r1)
        assert b.computed == (b.r0, b.r1 + (0 if last else 1))
        lo, hi = b.computed
        assert b.in0 == max(0, lo - h) and b.in1 == min(h_rows, hi - 1 + h + 1)
        if not last:  # Property 1: rows below the owned block = NRow (unless clipped at the bottom)
            assert b.in1 - b.r1 == min(nrow(m), h_rows - b.r1)
            assert input_rows(b) <= property1_rows(b.local_size, m) + h
    assert verification_shape(n, 7) == (2 * (n - 1), 7)


# ---------------------------------------------------------------- simulation

def row_fn(x_local: np.ndarray, in0: int, h_rows: int, r: int, h: int) -> np.ndarray:
    """Output row r from the input rows in its window (clipped at the raster edges), same code on every worker."""
    lo, hi = max(0, r - h), min(h_rows, r + h + 1)
    win = x_local[lo - in0:hi - in0]
    assert win.shape[0] == hi - lo, "block does not hold the needed input rows"
    return np.sqrt(np.abs(np.sum(win * win, axis=0))) * 0.5 + win[(r - lo)] * 0.25


def run(x: np.ndarray, n: int, m: int):
    h_rows = x.shape[0]
    blocks = partition(h_rows, n, m)
    outs = []
    for b in blocks:
        local = x[b.in0:b.in1]
        lo, hi = b.computed
        outs.append(np.stack([row_fn(local, b.in0, h_rows, r, halo(m)) for r in range(lo, hi)]))
    return blocks, outs


def reference(x, m):
    return np.stack([row_fn(x, 0, x.shape[0], r, halo(m)) for r in range(x.shape[0])])


def flagged(f):
    return {w for w, s in enumerate(f) if s != CORRECT}


sims = st.tuples(st.integers(2, 7), windows, st.integers(0, 2**32 - 1), st.integers(3, 9))


def make(n, m, seed, width, extra=0):
    rng = np.random.default_rng(seed)
    h_rows = n * (2 + extra) + int(rng.integers(0, n))
    x = rng.normal(size=(h_rows, width))
    x[rng.random(x.shape) < 0.05] = np.nan  # NoData cells: NaN must compare equal to itself
    return x


@settings(max_examples=80, deadline=None)
@given(sims)
def test_clean_runs_no_false_positive(p):
    n, m, seed, width = p
    x = make(n, m, seed, width)
    blocks, outs = run(x, n, m)
    ref = reference(x, m)
    for b, o in zip(blocks, outs, strict=True):
        lo, hi = b.computed
        assert np.array_equal(o, ref[lo:hi], equal_nan=True)
    v = verification_set(outs, blocks)
    assert v.shape == verification_shape(n, width)
    assert all(compare(v))
    for mode in ("paper", "both"):
        assert locate([CORRECT] * n, v, ambiguous=mode) == [CORRECT] * n


def corrupt(outs, w, where, rng):
    o = outs[w]
    row = {"check": -1, "first": 0, "both": None}[where]
    rows = [0, -1] if row is None else [row]
    for r in rows:
        c = int(rng.integers(0, o.shape[1]))
        o[r, c] = 1e9 + float(rng.integers(1, 2**40))  # distinct per injection: equal faults would cancel


@settings(max_examples=120, deadline=None)
@given(sims, st.data())
def test_single_fault_located_per_documented_rule(p, data):
    n, m, seed, width = p
    rng = np.random.default_rng(seed)
    x = make(n, m, seed, width)
    blocks, outs = run(x, n, m)
    where = data.draw(st.sampled_from(["check", "first", "both"]))
    lo_w = 1 if where in ("first", "both") else 0
    hi_w = n - 2 if where in ("check", "both") else n - 1
    if lo_w > hi_w:
        where, lo_w, hi_w = "check", 0, n - 2
    w = data.draw(st.integers(lo_w, hi_w))
    corrupt(outs, w, where, rng)
    v = verification_set(outs, blocks)
    got = flagged(locate([CORRECT] * n, v))
    both = flagged(locate([CORRECT] * n, v, ambiguous="both"))
    assert w in both                               # "both" never misses the faulty worker
    if where == "both":                            # two mismatches around w: located exactly
        assert got == {w} == both
    elif where == "check":
        if w < n - 2:
            assert got == {w}                      # located (next boundary matches)
        else:                                       # last boundary: undecidable without an edge check
            assert got == {n - 2, n - 1}
            assert flagged(locate([CORRECT] * n, v, edge_checks={n - 1: True})) == {w}
    else:  # first row of w
        if w < n - 1:
            assert got == {w - 1}                  # detected but blamed on the upper neighbour (paper's rule)
        else:
            assert got == {n - 2, n - 1}
            assert flagged(locate([CORRECT] * n, v, edge_checks={n - 1: False})) == {w}


@settings(max_examples=60, deadline=None)
@given(sims, st.data())
def test_interior_fault_undetected(p, data):
    n, m, seed, width = p
    x = make(n, m, seed, width, extra=1)
    blocks, outs = run(x, n, m)
    w = data.draw(st.integers(0, n - 1))
    b = blocks[w]
    interior = [r for r in range(b.r0 + 1, b.r1)]  # rows r0 < r < r1: no comparison covers them
    assert set(covered_rows(blocks)[w]).isdisjoint(interior)
    r = data.draw(st.sampled_from(interior))
    outs[w][r - b.r0, 0] = 1e9
    assert locate([CORRECT] * n, verification_set(outs, blocks)) == [CORRECT] * n


@settings(max_examples=60, deadline=None)
@given(st.integers(4, 8), windows, st.integers(0, 2**32 - 1), st.data())
def test_two_adjacent_faults_both_flagged(n, m, seed, data):
    rng = np.random.default_rng(seed)
    x = make(n, m, seed, 5)
    blocks, outs = run(x, n, m)
    k = data.draw(st.integers(1, n - 3))  # k, k+1 both interior workers
    corrupt(outs, k, "both", rng)
    corrupt(outs, k + 1, "both", rng)
    v = verification_set(outs, blocks)
    assert flagged(locate([CORRECT] * n, v)) == {k, k + 1}


def test_paper_sequential_overwrite_would_lose_a_fault():
    # mismatches at all three boundaries of N=4 (workers 1 and 2 faulty): sticky flags keep both
    v = np.zeros((6, 2))
    v[0, 0] = v[2, 0] = v[4, 0] = 1.0
    assert flagged(locate([CORRECT] * 4, v)) == {1, 2}


def test_compare_bit_patterns():
    v = np.array([[np.nan, 0.0], [np.nan, 0.0], [0.0, 1.0], [-0.0, 1.0]])
    assert compare(v) == [True, False]  # NaN == NaN (same bits); +0.0 != -0.0


def test_dead_worker_keeps_zero_and_gives_no_verdict():
    v = np.zeros((4, 3))
    v[1, 0] = 5.0  # worker 1's rows are garbage, it timed out
    v[2, 0] = 5.0
    f = locate([CORRECT, UNRECOVERABLE, CORRECT], v)
    assert f == [CORRECT, UNRECOVERABLE, CORRECT]


def test_n1_nothing_to_check():
    assert locate([CORRECT], np.empty((0, 4))) == [CORRECT]
    with pytest.raises(ValueError):
        locate([CORRECT] * 3, np.zeros((2, 4)))


def test_block_digest():
    a = np.arange(12.0).reshape(3, 4)
    d = block_digest(a)
    assert len(d) == 16 and d == block_digest(a.copy())
    assert d != block_digest(a.astype(np.float32)) and d != block_digest(a.reshape(4, 3))
    b = a.copy()
    b[1, 2] = np.nextafter(b[1, 2], 99)
    assert d != block_digest(b)


def test_timeouts():
    st_ = {0: 1.0, 1: None, 2: 1.0, 3: 4.0, 4: 1.0, 5: None}
    fin = {0: 3.0, 2: None, 4: 9.0}
    got = timeouts(st_, fin, t_now=10.0, tmaxlat=2.0, tmaxc={0: 5, 1: 5, 2: 5, 3: 5, 4: 5, 5: 5})
    # 0 on time; 1 never started; 2 never finished past 1+5+2; 3 started late; 4 finished late (9 > 8)
    assert got == {0: CORRECT, 1: UNRECOVERABLE, 2: UNRECOVERABLE, 3: UNRECOVERABLE,
                   4: UNRECOVERABLE, 5: UNRECOVERABLE}
    early = timeouts({0: 1.0, 1: None}, {}, t_now=1.5, tmaxlat=2.0, tmaxc=5.0)
    assert early == {}  # both still within their deadlines


# ---------------------------------------------------------------- recovery

@st.composite
def pools(draw):
    n = draw(st.integers(1, 8))
    f = draw(st.lists(st.sampled_from([UNRECOVERABLE, TRANSIENT, CORRECT]), min_size=n, max_size=n))
    workers = n + draw(st.integers(0, 3))
    assign = {b: draw(st.integers(0, workers - 1)) for b in range(n)}
    alive = set(draw(st.sets(st.integers(0, workers - 1))))
    excluded = set(draw(st.sets(st.integers(0, workers - 1))))
    attempts = {b: draw(st.integers(0, 2)) for b in range(n)}
    return f, assign, alive, excluded, attempts


@settings(max_examples=200, deadline=None)
@given(pools())
def test_plan_invariants(pool):
    f, assign, alive, excluded, attempts = pool
    try:
        p = plan(f, assign, alive, excluded, attempts)
    except NoLiveWorkerError:
        assert any(s != CORRECT for s in f)
        return
    assert excluded <= p.excluded
    for b, s in enumerate(f):
        kinds = [a.kind for a in p.actions if a.block == b]
        if s == CORRECT:
            assert kinds == [] and p.assignment[b] == assign[b]
            continue
        w = p.assignment[b]
        assert w in alive and w not in p.excluded
        assert kinds[-1] == "verify"
        owner_ok = assign[b] in alive and assign[b] not in p.excluded
        if s == TRANSIENT and attempts[b] == 0 and owner_ok:
            assert kinds == ["recompute", "verify"] and w == assign[b] and p.attempts[b] == 1
        else:
            assert "reassign" in kinds and assign[b] in p.excluded and w != assign[b]
    for a in p.actions:
        if a.kind in ("reassign", "recompute"):
            assert a.worker not in p.excluded


def test_transient_then_repeat_failure_excludes():
    assign = {0: 0, 1: 1, 2: 2}
    p1 = plan([CORRECT, TRANSIENT, CORRECT], assign, alive=range(4))
    assert [(a.kind, a.worker) for a in p1.actions] == [("recompute", 1), ("verify", 1)]
    p2 = plan([CORRECT, TRANSIENT, CORRECT], p1.assignment, range(4), p1.excluded, p1.attempts)
    assert p2.excluded == {1}
    assert p2.assignment[1] == 3  # least-loaded live worker (3 holds nothing)
    assert [a.kind for a in p2.actions] == ["exclude", "reassign", "recompute", "verify"]
    # success after an in-place retry resets the count
    assert mark_verified(p1, {1: CORRECT})[1] == 0


def test_unrecoverable_ties_by_rank_and_spread():
    p = plan([UNRECOVERABLE, UNRECOVERABLE, CORRECT, CORRECT], {0: 0, 1: 1, 2: 2, 3: 3}, range(4))
    assert p.excluded == {0, 1}
    assert p.assignment == {0: 2, 1: 3, 2: 2, 3: 3}  # 2 then 3: the load counts earlier choices


def test_no_live_worker():
    with pytest.raises(NoLiveWorkerError):
        plan([UNRECOVERABLE], {0: 0}, alive=[0])
    with pytest.raises(NoLiveWorkerError):
        plan([TRANSIENT, CORRECT], {0: 0, 1: 1}, alive=[0, 1], excluded=[1], attempts={0: 1})


def test_masters():
    blocks = tuple(partition(10, 3, 3))
    a = MasterState((10, 1, 10), blocks, (0, 1, 2), last_heard=5.0)
    b = MasterState((10, 1, 10), blocks, (0, 1, 2), last_heard=5.5)
    assert cross_check(a, b)
    o = finish(a, b, t_now=6.0, tmaxlat=2.0)
    assert o.finisher == "primary" and o.agreed and o.f == (10, 1, 10)
    silent_p = MasterState(a.f, blocks, a.owners, last_heard=1.0)
    o = finish(silent_p, b, t_now=6.0, tmaxlat=2.0)
    assert o.finisher == "replica" and o.master_status == {"primary": UNRECOVERABLE, "replica": CORRECT}
    o = finish(a, MasterState((0, 10, 10), blocks, (0, 1, 2), last_heard=1.0), 6.0, 2.0)
    assert o.finisher == "primary" and o.f == a.f
    c = MasterState((0, 10, 10), blocks, (0, 1, 2), last_heard=5.5)
    assert not cross_check(a, c)
    o = finish(a, c, 6.0, 2.0)
    assert not o.agreed and o.f == (0, 1, 10)
    with pytest.raises(NoLiveWorkerError):
        finish(silent_p, MasterState(b.f, blocks, b.owners, last_heard=0.0), 6.0, 2.0)


# ---------------------------------------------------------------- runtime verdicts (rows only, no MPI)

def _outputs(z, n, kernel="slope"):
    from planaria.terrain import kernels
    from planaria.terrain.window import slab_bounds
    fn, m = kernels[kernel]
    blocks = partition(z.shape[0], n, m)
    outs = []
    for b in blocks:
        s0, s1 = slab_bounds(b.computed[0], b.computed[1], z.shape[0], m)
        outs.append(fn(z[s0:s1], rows=b.computed))
    whole = fn(z, rows=None)
    referee = {k: whole[blocks[k].r1] for k in range(n - 1)}
    return blocks, outs, referee


def test_verification_rows_equals_verification_set():
    from planaria.abft.verify import verification_rows
    z = np.random.default_rng(3).normal(0, 5, (40, 13)).cumsum(axis=0)
    blocks, outs, _ = _outputs(z, 4)
    v = verification_set(outs, blocks)
    got = verification_rows([o[-1] for o in outs[:-1]], [o[0] for o in outs[1:]])
    assert got.tobytes() == v.tobytes() and got.shape == v.shape


@pytest.mark.parametrize("worker,row", [(2, 0), (1, -1), (0, -1), (3, 0)])
def test_abft_verdict_flags_the_worker_of_a_flipped_covered_row(worker, row):
    from planaria.abft.masterworker import abft_verdict, flip_bit
    z = np.random.default_rng(4).normal(0, 5, (44, 17)).cumsum(axis=1)
    blocks, outs, referee = _outputs(z, 4, "cutdepth")
    firsts = lambda: [o[0] for o in outs]  # noqa: E731
    checks = lambda: [o[-1] if b.check_row is not None else None for o, b in zip(outs, blocks, strict=True)]  # noqa: E731
    assert abft_verdict([CORRECT] * 4, firsts(), checks(), referee) == [CORRECT] * 4
    flip_bit(outs[worker], row, 8, 3)
    f = abft_verdict([CORRECT] * 4, firsts(), checks(), referee)
    assert f == [TRANSIENT if w == worker else CORRECT for w in range(4)]   # exactly the faulty worker
    # a dead worker gives no rows and keeps status 0
    f = abft_verdict([CORRECT, UNRECOVERABLE, CORRECT, CORRECT], [o[0] for o in outs], checks(), referee)
    assert f[1] == UNRECOVERABLE


def test_duplicate_verdict():
    from planaria.abft.masterworker import duplicate_verdict, initial_owner
    assert duplicate_verdict([CORRECT] * 4, [b"a", b"b", b"a", b"b"]) == [CORRECT] * 4
    assert duplicate_verdict([CORRECT] * 4, [b"a", b"b", b"a", b"x"]) == [CORRECT, TRANSIENT, CORRECT, TRANSIENT]
    assert duplicate_verdict([UNRECOVERABLE, CORRECT, CORRECT, CORRECT], [None, b"b", b"z", b"b"]) == \
        [UNRECOVERABLE, CORRECT, CORRECT, CORRECT]
    # the two copies of every block start on different workers
    n = 4
    assert [initial_owner(t, n) for t in range(2 * n)] == [2, 3, 4, 5, 3, 4, 5, 2]


@pytest.mark.parametrize("worker,row", [(2, 0), (1, -1), (0, -1), (3, 0), (1, 0), (2, -1), (None, 0)])
@pytest.mark.parametrize("dead", [None, 1, 2])
def test_abft_verdict_with_a_dead_worker_judges_the_live_rows_against_the_referee(worker, row, dead):
    """A dead worker gives no rows; its neighbour's row is judged against the masters' copy alone."""
    from planaria.abft.masterworker import abft_verdict, flip_bit
    z = np.random.default_rng(5).normal(0, 5, (48, 15)).cumsum(axis=0)
    blocks, outs, referee = _outputs(z, 4, "slope")
    if worker is not None:
        flip_bit(outs[worker], row, 6, 40)
    fin = [CORRECT] * 4
    if dead is not None:
        fin[dead] = UNRECOVERABLE
    firsts = [o[0] for o in outs]
    checks = [o[-1] if b.check_row is not None else None for o, b in zip(outs, blocks, strict=True)]
    f = abft_verdict(fin, firsts, checks, referee)
    want = [CORRECT] * 4
    if worker is not None:
        want[worker] = TRANSIENT
    if dead is not None:
        want[dead] = UNRECOVERABLE
    assert f == want
