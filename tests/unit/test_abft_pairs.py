"""Two faulty workers at once (issue 27, failure 4): every adjacent pair and every pair of blocks, with the
runtime's verification (referee rows), correlated faults included; the injected-fault plan; non-finite DEMs."""
from __future__ import annotations

import argparse
import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planaria.abft.partition import partition
from planaria.abft.verify import CORRECT, TRANSIENT, UNRECOVERABLE, locate, referee_verdict, verification_rows

pytestmark = pytest.mark.timeout(120)
FAST = settings(max_examples=40, deadline=None)


def _setup(n: int, rows: int, cols: int, seed: int, kernel: str = "slope"):
    from planaria.terrain import kernels
    from planaria.terrain.window import slab_bounds
    fn, m = kernels[kernel]
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 3, (rows, cols)).cumsum(axis=0) + 50 * np.sin(np.arange(cols) / 5.0)
    blocks = partition(rows, n, m)
    outs = []
    for b in blocks:
        s0, s1 = slab_bounds(b.computed[0], b.computed[1], rows, m)
        outs.append(fn(z[s0:s1], rows=b.computed))
    whole = fn(z)
    referee = {k: whole[blocks[k].r1].copy() for k in range(n - 1)}
    return blocks, outs, referee, whole


def _flip(row: np.ndarray, col: int, bit: int) -> None:
    row.view(np.uint64)[col] ^= np.uint64(1) << np.uint64(bit)


def _copies(w: int, n: int) -> list[str]:
    return ([] if w == 0 else ["first"]) + ([] if w == n - 1 else ["check"])


def _verdict(n, blocks, outs, referee):
    from planaria.abft.masterworker import abft_judge
    firsts = [o[0] for o in outs]
    checks = [o[-1] if b.check_row is not None else None for o, b in zip(outs, blocks, strict=True)]
    return abft_judge([CORRECT] * n, firsts, checks, referee)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_every_pair_with_the_same_flip_in_every_copy_combination_is_located(n: int) -> None:
    """Exhaustive: every pair of workers, every choice of compared row for each, the same cell and bit in
    both (the correlated fault of failure 4 when they share a row): exactly the two workers are flagged,
    and a shared row is reported as a conflict."""
    for a, b in itertools.combinations(range(n), 2):
        for ca, cb in itertools.product(_copies(a, n), _copies(b, n)):
            blocks, outs, referee, _ = _setup(n, 6 * n + 7, 19, seed=n * 100 + a * 10 + b)
            for w, c in ((a, ca), (b, cb)):
                _flip(outs[w][-1 if c == "check" else 0], 9, 44)
            v = _verdict(n, blocks, outs, referee)
            assert v.f == [TRANSIENT if w in (a, b) else CORRECT for w in range(n)], (a, b, ca, cb)
            shared = b == a + 1 and ca == "check" and cb == "first"
            assert v.conflicts == ([a] if shared else []), (a, b, ca, cb)


@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_paper_comparison_alone_misses_a_correlated_adjacent_pair(n: int) -> None:
    """What failure 4 was: V alone (``locate``) sees nothing when neighbours corrupt their shared row alike."""
    for a in range(n - 1):
        blocks, outs, referee, _ = _setup(n, 5 * n + 9, 17, seed=a)
        _flip(outs[a][-1], 8, 51)
        _flip(outs[a + 1][0], 8, 51)
        checks = [o[-1] for o in outs[:-1]]
        firsts = [o[0] for o in outs[1:]]
        assert locate([CORRECT] * n, verification_rows(checks, firsts), ambiguous="both") == [CORRECT] * n
        assert _verdict(n, blocks, outs, referee).f[a:a + 2] == [TRANSIENT, TRANSIENT]


@st.composite
def pair_faults(draw):
    n = draw(st.integers(2, 8))
    a, b = sorted(draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True)))
    cols = draw(st.integers(7, 30))
    same = draw(st.booleans())
    fa = (draw(st.sampled_from(_copies(a, n))), draw(st.integers(0, cols - 1)), draw(st.integers(0, 63)))
    fb = (draw(st.sampled_from(_copies(b, n))),) + (fa[1:] if same else
                                                    (draw(st.integers(0, cols - 1)), draw(st.integers(0, 63))))
    dead = draw(st.sampled_from([None] + [w for w in range(n) if w not in (a, b)]))
    return n, cols, a, b, fa, fb, dead, draw(st.integers(0, 2**16)), draw(st.sampled_from(["slope", "cutdepth"]))


@FAST
@given(pair_faults())
def test_any_pair_of_faulty_workers_is_flagged_and_nobody_else(case) -> None:
    """Any two workers, any compared rows, same or different bits, with or without a third worker dead."""
    from planaria.abft.masterworker import abft_verdict
    n, cols, a, b, fa, fb, dead, seed, kernel = case
    blocks, outs, referee, _ = _setup(n, 12 * n + 11, cols, seed, kernel)
    for w, (copy, col, bit) in ((a, fa), (b, fb)):
        _flip(outs[w][-1 if copy == "check" else 0], col, bit)
    fin = [CORRECT] * n
    if dead is not None:
        fin[dead] = UNRECOVERABLE
    firsts = [o[0] for o in outs]
    checks = [o[-1] if blk.check_row is not None else None for o, blk in zip(outs, blocks, strict=True)]
    f = abft_verdict(fin, firsts, checks, referee)
    want = [UNRECOVERABLE if w == dead else TRANSIENT if w in (a, b) else CORRECT for w in range(n)]
    assert f == want


@pytest.mark.parametrize("trial", range(0, 400, 7))
def test_campaign_trial_recovers_the_serial_output(trial: int) -> None:
    """The benchmark's trials (rounds of verify + recompute, as the runtime): verified, output serial, both located."""
    from benchmarks.abft_pairs import run_trial
    r = run_trial(5, trial)
    assert r["verified"] and not r["undecidable"] and not r["wrong_output"], r
    assert r["located"] == [True, True] and r["innocent_flagged"] == [], r
    if r["way"] == "shared":
        assert r["conflicts"] == [r["pair"][0]] and not r["paper_detected"], r


def test_campaign_covers_every_pair() -> None:
    from benchmarks.abft_pairs import NS, pairs_of, trial_plan
    seen = set()
    for t in range(2000):
        p = trial_plan(0, t)
        seen.add((p["n"], tuple(p["pair"]), p["way"]))
    for n in NS:
        for a, b in pairs_of(n):
            assert (n, (a, b), "same-bit") in seen or (n, (a, b), "shared") in seen
            if b == a + 1:
                assert (n, (a, b), "shared") in seen


def test_referee_conflict_and_dead_neighbour() -> None:
    row = np.arange(5.0)
    bad = row.copy()
    _flip(bad, 2, 3)
    # both copies equal each other, not the referee: both flagged, conflict reported
    v = referee_verdict([CORRECT, CORRECT], [bad], [bad.copy()], [row])
    assert v.f == [TRANSIENT, TRANSIENT] and v.conflicts == [0] and v.mismatches == []
    # a dead neighbour: the live row judged alone
    v = referee_verdict([CORRECT, UNRECOVERABLE], [bad], [None], [row])
    assert v.f == [TRANSIENT, UNRECOVERABLE] and v.conflicts == []
    v = referee_verdict([UNRECOVERABLE, CORRECT], [None], [row.copy()], [row])
    assert v.f == [UNRECOVERABLE, CORRECT]
    with pytest.raises(ValueError):
        referee_verdict([CORRECT, CORRECT], [], [], [])


def _args(**kw) -> argparse.Namespace:
    base = dict(seed=0, error_rate=0.0, force={}, mode="abft")
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_silent_sites_of_neighbours_share_a_row_when_worker_plus_seed_is_even(n: int) -> None:
    from planaria.abft.masterworker import silent_site
    blocks = partition(10 * n, n, 3)
    for seed in (0, 1, 2, 29):
        for k in range(n - 1):
            s1, s2 = silent_site(k, blocks, seed, 40, "abft"), silent_site(k + 1, blocks, seed, 40, "abft")
            assert (s1["col"], s1["bit"]) == (s2["col"], s2["bit"])          # correlated: the same cell and bit
            assert s1["copy"] in _copies(k, n) and s2["copy"] in _copies(k + 1, n)
            if (k + seed) % 2 == 0 or k == 0 and n == 2:
                assert s1["copy"] == "check" and s2["copy"] == "first" and s1["row"] == s2["row"] == blocks[k].r1


def test_injected_faults_list_kind_worker_and_where() -> None:
    from planaria.abft.masterworker import injected_faults
    blocks = partition(40, 4, 3)
    got = injected_faults(_args(force={4: "silent", 5: "silent", 2: "crash"}), blocks, 30)
    assert [(f["kind"], f["worker"], f["rank"]) for f in got] == [("crash", 0, 2), ("silent", 2, 4), ("silent", 3, 5)]
    assert got[1]["where"]["copy"] == "check" and got[2]["where"]["copy"] == "first"
    assert got[1]["where"]["row"] == got[2]["where"]["row"] == blocks[2].r1
    # the runtime's --force takes worker indices
    from planaria.abft.masterworker import parse
    a = parse(["--kernel", "slope", "--dem", "d.npy", "--out", "o.npy", "--force", "silent:0", "--force", "crash:3"])
    assert a.force == {2: "silent", 5: "crash"}
    with pytest.raises(SystemExit):
        parse(["--kernel", "slope", "--dem", "d.npy", "--out", "o.npy", "--force", "silent:٣"])


@pytest.mark.parametrize("kernel", ["slope", "cutdepth"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_cells_are_nodata_without_warnings(kernel: str, bad: float) -> None:
    """An inf (or NaN) elevation is NoData: the windows touching it get the fill value, and numpy stays quiet."""
    from planaria.terrain import kernels
    fn, m = kernels[kernel]
    h = (m - 1) // 2
    z = np.random.default_rng(0).normal(100, 3, (40, 30))
    z[20, 15] = bad
    z[0, 0] = bad
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = fn(z, nodata=-9999.0)
        big = fn(np.full((30, 30), 1e308), nodata=None)      # finite, overflows in the arithmetic
    assert np.all(out[20 - h:21 + h, 15 - h:16 + h] == -9999.0)
    assert np.isfinite(out[h:-h, h:-h][out[h:-h, h:-h] != -9999.0]).all()
    ref = z.copy()
    ref[20, 15] = ref[0, 0] = -9999.0
    assert out.tobytes() == fn(ref, nodata=-9999.0).tobytes()
    assert big.shape == (30, 30)
