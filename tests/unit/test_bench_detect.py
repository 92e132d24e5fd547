"""The detection-overhead driver's pairing, ratio and interval logic, its verdicts, the block timer of
``--within-job``, its option checks, and serial runs of the kernels."""
from __future__ import annotations

import random
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from benchmarks import detect, npb
from benchmarks._launch import BenchError
from benchmarks.cli import app

times = st.floats(min_value=1e-3, max_value=100.0, allow_nan=False)
factors = st.floats(min_value=0.5, max_value=2.0, allow_nan=False)


def _launches(offs: list[float], facs: list[float]) -> list[dict]:
    """Launches in schedule order: pair i took offs[i] with detection off and offs[i]*facs[i] with it on."""
    return [{"pair": i, "mode": mode, "time_s": offs[i] * (facs[i] if mode == "on" else 1.0),
             "calls_per_s": 10.0, "launch_s": 2.0}
            for i, mode in detect.schedule(len(offs))]


@given(st.integers(min_value=1, max_value=40))
def test_schedule_pairs_each_mode_once_and_flips_order(pairs: int) -> None:
    order = detect.schedule(pairs)
    assert len(order) == 2 * pairs
    for i in range(pairs):
        first, second = order[2 * i], order[2 * i + 1]
        assert first[0] == second[0] == i
        assert {first[1], second[1]} == {"off", "on"}
        assert first[1] == ("off" if i % 2 == 0 else "on")


@settings(max_examples=60)
@given(st.lists(st.tuples(times, factors), min_size=1, max_size=15), st.randoms(use_true_random=False))
def test_summary_is_median_of_per_pair_ratios(data: list[tuple[float, float]], rnd: random.Random) -> None:
    offs, facs = [d[0] for d in data], [d[1] for d in data]
    launches = _launches(offs, facs)
    rnd.shuffle(launches)                       # the order launches are listed in does not matter
    row = detect.summarize("cg", launches)
    assert row["pairs"] == len(data)
    assert row["ratio_median"] == pytest.approx(statistics.median(facs), rel=1e-12)
    assert sorted(row["pair_ratios"]) == pytest.approx(sorted(facs), rel=1e-12)
    assert row["off_s_median"] == pytest.approx(statistics.median(offs))
    assert row["on_s_median"] == pytest.approx(statistics.median([o * f for o, f in zip(offs, facs, strict=True)]))
    assert row["ratio_min"] <= row["ci_low"] <= row["ratio_median"] <= row["ci_high"] <= row["ratio_max"]
    assert row["verdict"] == detect.verdict(row["ratio_median"], row["ci_high"], row["pairs"])
    assert row["goal_met"] == (row["verdict"] == "met")
    assert row["overhead_pct"] == pytest.approx((row["ratio_median"] - 1) * 100)
    on = sum(o * f for o, f in zip(offs, facs, strict=True))
    assert row["ratio_of_sums"] == pytest.approx(on / sum(offs))


def test_ratios_pair_adjacent_launches_not_global_medians() -> None:
    # the machine slows down 3x between pairs; each pair alone shows the 2 % cost of detection
    row = detect.summarize("mg", _launches([1.0, 3.0, 1.0, 3.0], [1.02] * 4))
    assert row["ratio_median"] == pytest.approx(1.02)
    assert row["verdict"] == "missed" and not row["goal_met"]


@settings(max_examples=30)
@given(st.lists(st.lists(factors, min_size=1, max_size=6), min_size=1, max_size=6))
def test_overall_pools_every_pair(per_kernel: list[list[float]]) -> None:
    rows = [detect.summarize(f"k{i}", _launches([1.0] * len(f), f)) for i, f in enumerate(per_kernel)]
    o = detect.overall(rows)
    pooled = [x for f in per_kernel for x in f]
    assert o["pairs"] == len(pooled)
    assert o["ratio_median"] == pytest.approx(statistics.median(pooled))
    assert o["ci_low"] <= o["ratio_median"] <= o["ci_high"]
    assert o["verdict"] == detect.worst([r["verdict"] for r in rows])                       # every kernel
    assert o["goal_met"] == all(r["verdict"] == "met" for r in rows)
    if o["verdict"] == "missed":
        assert o["worst_ratio"] > detect.GOAL


@pytest.mark.parametrize("ratio,hi,pairs,expect", [
    (1.004, 1.009, 200, "met"),
    (1.004, 1.010, 200, "met"),              # the goal itself counts as within
    (1.004, 1.012, 200, "consistent"),       # the median is within, the interval is not
    (1.004, 1.009, detect.MIN_PAIRS - 1, "consistent"),   # too few pairs to claim it
    (1.011, 1.02, 200, "missed"),
    (1.011, 1.009, 200, "missed"),           # (an inconsistent interval never rescues the median)
    (float("nan"), 1.0, 200, "missed"),
])
def test_verdict_rules(ratio: float, hi: float, pairs: int, expect: str) -> None:
    assert detect.verdict(ratio, hi, pairs) == expect


def test_worst_verdict_wins() -> None:
    assert detect.worst(["met", "met"]) == "met"
    assert detect.worst(["met", "consistent", "met"]) == "consistent"
    assert detect.worst(["consistent", "missed", "met"]) == "missed"


def test_interval_covers_the_true_median_about_95_percent_of_the_time() -> None:
    # pair ratios around a true median of 1.006 with a 5 % spread, as on a noisy machine
    rng = np.random.default_rng(11)
    trials, n, true = 200, 100, 1.006
    hits = 0
    for i in range(trials):
        xs = true + 0.05 * rng.standard_normal(n)
        lo, hi = detect.median_ci([xs.tolist()], resamples=1000, seed=i)
        hits += lo <= true <= hi
    assert 0.88 * trials <= hits <= trials        # nominal 95 %; the percentile bootstrap runs a little low


def test_interval_narrows_with_more_pairs() -> None:
    rng = np.random.default_rng(5)
    widths = {}
    for n in (25, 400):
        lo, hi = detect.median_ci([(1.0 + 0.05 * rng.standard_normal(n)).tolist()], resamples=2000)
        widths[n] = hi - lo
    assert 2.5 < widths[25] / widths[400] < 7.0     # ~ sqrt(16) = 4


def test_interval_is_reproducible_and_of_the_median() -> None:
    xs = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 5.0]     # one wild pair does not move a median's interval much
    assert detect.median_ci([xs]) == detect.median_ci([xs])
    lo, hi = detect.median_ci([xs])
    assert 0.9 <= lo <= 1.02 <= hi <= 1.1
    assert detect.median_ci([[1.03] * 5]) == (1.03, 1.03)
    with pytest.raises(ValueError):
        detect.median_ci([[]])


def test_overall_interval_resamples_each_kernel_within_itself() -> None:
    # 11 pairs at 1.0 in one kernel, 9 at 2.0 in another: every stratified resample keeps 11 vs 9,
    # so the pooled median is always 1.0 (resampling the pool as one would often give 1.5 or 2.0)
    assert detect.median_ci([[1.0] * 11, [2.0] * 9]) == (1.0, 1.0)


def test_incomplete_or_doubled_pairs_are_errors() -> None:
    full = _launches([1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="pair 1 lacks"):
        detect.pair_ratios(full[:3])
    with pytest.raises(ValueError, match="two 'on'"):
        detect.pair_ratios(full + [dict(full[1])])


class _Comm:
    """What the block timer needs of a communicator: a barrier (counted)."""

    def __init__(self) -> None:
        self.barriers = 0

    def Barrier(self) -> None:
        self.barriers += 1


def test_block_timer_switches_before_each_block_and_drops_open_blocks() -> None:
    order = [m for _, m in detect.schedule(3)]          # off on on off off on
    switched: list[bool] = []
    comm = _Comm()
    timer = npb.BlockTimer(comm, 3, order, switched.append)
    for run_iters in (8, 8, 8):                        # 8 iterations: boundaries at 0, 3, 6 -> 2 blocks a run
        timer.new_run()
        for i in range(run_iters):
            timer(i)
    assert len(timer.times) == 6 and timer.done and all(t >= 0 for t in timer.times)
    # a block opened at every boundary until done; the block open at each run's end was dropped
    # and its mode opened again at the next run's first boundary
    assert switched == [False, True, True, True, False, False, False, True]
    assert comm.barriers == len(switched)


def test_block_size_follows_the_warmup_and_closes_a_block_per_run() -> None:
    assert npb.block_size(100, 2.0, 0.25) == 12       # 20 ms per iteration
    assert npb.block_size(6, 1.8, 0.25) == 1          # one 0.3 s iteration is more than a block
    assert npb.block_size(10, 0.01, 0.25) == 9        # very fast: at most iters - 1
    assert npb.block_size(4, 0.0, 0.25) == 1


def test_alternate_needs_equal_iterations_on_every_rank() -> None:
    assert npb.alternate_error("ep", "A", 4) is None
    assert "evenly" in (npb.alternate_error("ep", "A", 3) or "")
    assert npb.alternate_error("cg", "A", 3) is None


def test_within_blocks_rejects_missing_blocks_or_failed_runs() -> None:
    blocks = [{"pair": p, "mode": m, "time_s": 0.2} for p, m in detect.schedule(2)]
    rec = {"kernel": "cg", "class": "W", "ranks": 4, "every": 3, "warmup": {"verified": True},
           "runs": [{"verified": True, "calls_per_s": 10.0}], "blocks": blocks}
    assert detect.within_blocks({"detect_env": "1", "kernels": [rec]}, "cg", "W", 4, 2) is rec
    with pytest.raises(BenchError, match="timed 4 blocks of the 6"):
        detect.within_blocks({"detect_env": "1", "kernels": [rec]}, "cg", "W", 4, 3)
    bad = dict(rec, runs=[{"verified": False}])
    with pytest.raises(BenchError, match="failed verification"):
        detect.within_blocks({"detect_env": "1", "kernels": [bad]}, "cg", "W", 4, 2)
    with pytest.raises(BenchError, match="detection available"):
        detect.within_blocks({"detect_env": "0", "kernels": [rec]}, "cg", "W", 4, 2)


def _rec(**kw) -> dict:
    rec = {"kernel": "cg", "class": "W", "ranks": 4, "verified": True, "time_s": 1.0, "detail": {}}
    rec.update(kw)
    return rec


def test_check_launch_rejects_unverified_or_wrong_environment() -> None:
    good = {"detect_env": "1", "kernels": [_rec()]}
    assert detect.check_launch(good, "cg", "W", 4, "on")["time_s"] == 1.0
    with pytest.raises(BenchError, match="PLANARIA_DETECT"):
        detect.check_launch(good, "cg", "W", 4, "off")
    with pytest.raises(BenchError, match="failed verification"):
        detect.check_launch({"detect_env": "0", "kernels": [_rec(verified=False)]}, "cg", "W", 4, "off")
    with pytest.raises(BenchError, match="class"):
        detect.check_launch({"detect_env": "0", "kernels": [_rec(ranks=2)]}, "cg", "W", 4, "off")
    with pytest.raises(BenchError, match="no result"):
        detect.check_launch({"detect_env": "0", "kernels": []}, "cg", "W", 4, "off")


def _cli(args: list[str]):
    return CliRunner().invoke(app, ["detect", *args])


@pytest.mark.parametrize("args,words", [
    (["--kernels", "cg,bogus"], "bogus"),
    (["--class", "Z"], "class"),
    (["--pairs", "0"], "pairs"),
    (["--backend", "mpich"], "backend"),
    (["--kernels", "mg", "--ranks", "6"], "mg class W"),
    (["--kernels", "ft", "--ranks", "3"], "ft class W"),
    (["--kernels", "ep", "--ranks", "3", "--within-job"], "evenly"),
    (["--within-job", "--block-s", "0"], "block-s"),
    (["--bind-to", "socket"], "bind-to"),
    (["--under-run"], "needs --within-job"),
])
def test_bad_options_exit_2_with_one_line(args: list[str], words: str) -> None:
    res = _cli(args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0], res.output


@pytest.mark.parametrize("ranks", [1, 2, 4, 8, 3, 6])
def test_problem_error_matches_what_mg_can_build(ranks: int) -> None:
    for klass in npb.CLASSES:
        p = npb.PARAMS["mg"][klass]
        err = npb.problem_error("mg", klass, ranks)
        built = True
        for rank in range(ranks):
            net = npb.Net(None)
            net.rank, net.size = rank, ranks
            try:
                npb.MGSolver(net, p["n"], max(4, ranks), p["nu"], p["coarse"])
            except ValueError:
                built = False
        assert (err is None) == built, (klass, ranks, err)


def test_serial_mg_and_cg_converge_at_class_s() -> None:
    """The kernels' numerics on one process (the same code the serial checks run)."""
    p = npb.PARAMS["mg"]["S"]
    norms = npb.mg_iterate(npb.mg_setup(npb.Net(None), p, 4), p["cycles"], None)
    assert npb.mg_converged(norms) and norms[-1] < 1e-3 * norms[0]
    out = npb.CGSolver(npb.Net(None), npb.PARAMS["cg"]["S"]).iterate(None)
    assert out["max_rel_residual"] < 1e-6


def test_mg_convergence_rule() -> None:
    assert npb.mg_converged([1.0, 0.1, 0.01])
    assert not npb.mg_converged([1.0, 0.1, 0.05])              # second cycle reduced only 2x
    assert npb.mg_converged([1.0, 1e-13, 5e-14])               # at the rounding floor
    assert not npb.mg_converged([1.0, 1.0])


def test_cg_matrix_is_symmetric_and_diagonally_dominant() -> None:
    na = 300
    r, c, v, d = npb.cg_rows(na, 5, 0, na)
    a = np.zeros((na, na))
    np.add.at(a, (r, c), v)
    a[np.arange(na), np.arange(na)] += d
    assert np.array_equal(a, a.T)
    off = np.abs(a).sum(axis=1) - np.abs(np.diag(a))
    assert np.all(np.diag(a) > off)
    # a row block is exactly those rows of the whole matrix
    rb, cb, vb, db = npb.cg_rows(na, 5, 100, 200)
    blk = np.zeros((100, na))
    np.add.at(blk, (rb, cb), vb)
    blk[np.arange(100), np.arange(100, 200)] += db
    assert np.array_equal(blk, a[100:200])


# --- pooling several jobs per kernel (--within-job --jobs J) ---

def _job(facs: list[float], off: float = 0.25, rate: float = 100.0) -> dict:
    """One job's blocks in ABBA order: pair i took ``off`` with detection off and ``off*facs[i]`` with it on."""
    return {"blocks": [{"kernel": "mg", **ln} for ln in _launches([off] * len(facs), facs)],
            "calls_per_s": rate, "every": 1, "runs": 3, "launch_s": 30.0}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(factors, min_size=1, max_size=30), min_size=1, max_size=4),
       st.integers(min_value=0, max_value=2**31))
def test_one_job_per_kernel_is_the_pair_bootstrap(groups: list[list[float]], seed: int) -> None:
    # the job stage has nothing to choose: the same draws as a plain stratified pair bootstrap,
    # written out here (median_ci is jobs_median_ci with one job per group)
    rng = np.random.default_rng(seed)
    draws = [np.asarray(g)[rng.integers(0, len(g), size=(300, len(g)))] for g in groups]
    meds = np.median(np.concatenate(draws, axis=1), axis=1)
    tail = (1.0 - detect.LEVEL) / 2.0
    want = tuple(float(x) for x in np.quantile(meds, [tail, 1.0 - tail]))
    assert detect.jobs_median_ci([[g] for g in groups], resamples=300, seed=seed) == want
    assert detect.median_ci(groups, resamples=300, seed=seed) == want


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(factors, min_size=1, max_size=20), min_size=1, max_size=5))
def test_pooled_interval_is_reproducible_and_within_the_values(jobs: list[list[float]]) -> None:
    lo, hi = detect.jobs_median_ci([jobs], resamples=300)
    assert (lo, hi) == detect.jobs_median_ci([jobs], resamples=300)          # fixed seed: same interval
    values = [x for job in jobs for x in job]
    assert min(values) <= lo <= hi <= max(values)


def test_pooled_interval_changes_with_the_seed() -> None:
    rng = np.random.default_rng(3)
    jobs = [(1.0 + 0.05 * rng.standard_normal(40) + 0.01 * j).tolist() for j in range(4)]
    assert detect.jobs_median_ci([jobs], seed=1) != detect.jobs_median_ci([jobs], seed=2)


def test_interval_widens_when_the_jobs_differ() -> None:
    # the same pairs inside each job, shifted by a job effect of -1.5 .. +1.5 %
    rng = np.random.default_rng(7)
    noise = [0.02 * rng.standard_normal(100) for _ in range(6)]
    alike = [(1.0 + e).tolist() for e in noise]
    apart = [(1.0 + e + s).tolist() for e, s in zip(noise, np.linspace(-0.015, 0.015, 6), strict=True)]
    a_lo, a_hi = detect.jobs_median_ci([alike])
    b_lo, b_hi = detect.jobs_median_ci([apart])
    assert b_hi - b_lo > 2 * (a_hi - a_lo)
    p_lo, p_hi = detect.median_ci([[x for job in apart for x in job]])        # pairs only: blind to it
    assert b_hi - b_lo > 2 * (p_hi - p_lo)


def test_two_stage_interval_covers_despite_a_job_effect_the_pair_interval_misses() -> None:
    # 8 jobs of 30 pairs; each job shifted by N(0, 1 %), pair noise 2 %; the true median is 1.0.
    # The pair bootstrap treats 240 pairs as independent and covers far less than 95 %.
    rng = np.random.default_rng(21)
    trials, hits_jobs, hits_pairs = 100, 0, 0
    for i in range(trials):
        jobs = [(1.0 + 0.01 * rng.standard_normal() + 0.02 * rng.standard_normal(30)).tolist() for _ in range(8)]
        lo, hi = detect.jobs_median_ci([jobs], resamples=400, seed=i)
        hits_jobs += lo <= 1.0 <= hi
        lo, hi = detect.median_ci([[x for job in jobs for x in job]], resamples=400, seed=i)
        hits_pairs += lo <= 1.0 <= hi
    assert hits_jobs >= 0.85 * trials
    assert hits_pairs <= 0.8 * trials


def test_jobs_of_unequal_length_pool_every_pair() -> None:
    # job 0: 20 pairs at 1.00; job 1: 5 pairs at 1.10 -> a resample of (0, 0) gives 1.00, (1, 1) 1.10,
    # and a mixed one 1.00 (20 of 25 values): the interval spans both
    lo, hi = detect.jobs_median_ci([[[1.0] * 20, [1.1] * 5]])
    assert (lo, hi) == (1.0, 1.1)
    with pytest.raises(ValueError):
        detect.jobs_median_ci([[[], []]])
    with pytest.raises(ValueError, match="level"):
        detect.jobs_median_ci([[[1.0]]], level=1.0)


@pytest.mark.parametrize("ratio,hi,pairs,jobs,expect", [
    (1.004, 1.009, 400, 4, "met"),
    (1.004, 1.009, 400, detect.MIN_JOBS, "met"),
    (1.004, 1.009, 400, 1, "consistent"),          # one job cannot show the job-to-job spread
    (1.004, 1.012, 400, 4, "consistent"),
    (1.012, 1.020, 400, 4, "missed"),
    (1.004, 1.009, 400, None, "met"),              # not pooled: today's rule
])
def test_pooled_verdict_needs_two_jobs(ratio: float, hi: float, pairs: int, jobs: int | None, expect: str) -> None:
    assert detect.verdict(ratio, hi, pairs, jobs=jobs) == expect


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(factors, min_size=1, max_size=12), min_size=1, max_size=5))
def test_summarize_jobs_pools_every_pair_and_keeps_each_job(per_job: list[list[float]]) -> None:
    row = detect.summarize_jobs("mg", [_job(f) for f in per_job])
    pooled = [x for f in per_job for x in f]
    assert row["jobs"] == len(per_job) and row["pairs"] == len(pooled)
    assert row["ratio_median"] == pytest.approx(statistics.median(pooled), rel=1e-12)
    assert [j["ratio_median"] for j in row["per_job"]] == pytest.approx([statistics.median(f) for f in per_job])
    assert row["job_medians"] == [j["ratio_median"] for j in row["per_job"]]
    assert row["median_of_job_medians"] == pytest.approx(statistics.median(row["job_medians"]))
    for j, f in zip(row["per_job"], per_job, strict=True):         # each job's own interval is its pair bootstrap
        assert (j["ci_low"], j["ci_high"]) == detect.median_ci([j["pair_ratios"]])
        assert sorted(j["pair_ratios"]) == pytest.approx(sorted(f))
    assert (row["ci_low"], row["ci_high"]) == detect.jobs_median_ci([[j["pair_ratios"] for j in row["per_job"]]])
    assert row["verdict"] == detect.verdict(row["ratio_median"], row["ci_high"], row["pairs"], jobs=row["jobs"])
    if len(per_job) < detect.MIN_JOBS:
        assert row["verdict"] != "met"


def test_pooled_rows_and_overall_verdicts() -> None:
    rng = np.random.default_rng(2)
    near = [_job((1.002 + 0.004 * rng.standard_normal(60)).tolist()) for _ in range(4)]
    row = detect.summarize_jobs("cg", near)
    assert row["verdict"] == "met" and row["ci_high"] <= detect.GOAL
    one = detect.summarize_jobs("ep", near[:1])                      # the same pairs, one job: never met
    assert one["verdict"] == "consistent"
    far = detect.summarize_jobs("is", [_job((1.02 + 0.004 * rng.standard_normal(60)).tolist()) for _ in range(3)])
    assert far["verdict"] == "missed"
    o = detect.overall([row, far])
    assert o["verdict"] == "missed" and o["worst_kernel"] == "is"
    assert (o["ci_low"], o["ci_high"]) == detect.jobs_median_ci(
        [[j["pair_ratios"] for j in r["per_job"]] for r in (row, far)])
    assert "jobs" in o["ci_method"]


def test_pooled_table_lists_every_job_and_the_pool() -> None:
    from rich.console import Console
    rows = [detect.summarize_jobs("mg", [_job([1.0, 1.01, 0.99] * 4), _job([1.02, 1.0, 1.01] * 4)])]
    result = {"within_job": True, "class": "A", "ranks": 4, "backend": "ulfm", "pairs": 12, "cores": 2,
              "loadavg_before": [1.0, 1.0, 1.0], "loadavg_after": [4.0, 3.0, 2.0], "goal": detect.GOAL,
              "rows": rows, "overall": detect.overall(rows), "jobs_per_kernel": 2,
              "min_jobs_for_met": detect.MIN_JOBS, "blocks": [b for r in rows for b in r["per_job"]],
              "jobs": [{}, {}], "total_s": 60.0}
    con = Console(width=240, record=True)
    con.print(detect.table(result))
    text = con.export_text()
    assert "pooled (2)" in text and "two-stage" in text and "at least 2 jobs" in text
    assert f"{rows[0]['per_job'][1]['ratio_median']:.4f}" in text


@pytest.mark.parametrize("args,words", [
    (["--within-job", "--jobs", "0"], "jobs"),
    (["--jobs", "3"], "within-job"),
])
def test_bad_jobs_option_exits_2_with_one_line(args: list[str], words: str) -> None:
    res = _cli(args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0], res.output


def test_bind_to_core_pins_ranks_with_overload_and_none_leaves_the_default() -> None:
    from benchmarks._launch import mpiexec_cmd
    plain = mpiexec_cmd(4, "benchmarks.npb", ["--kernel", "halo"], ft=True)
    bound = mpiexec_cmd(4, "benchmarks.npb", ["--kernel", "halo"], ft=True, bind="core")
    assert "--bind-to" not in plain
    i = bound.index("--bind-to")
    assert bound[i + 1] == "core:overload-allowed"          # 4 ranks on fewer cores: several per core
    assert bound[:i] + bound[i + 2:] == plain                  # nothing else changes
    assert bound.index("--oversubscribe") < i < bound.index("-n")
    with pytest.raises(ValueError, match="bind-to"):
        mpiexec_cmd(4, "m", [], ft=False, bind="socket")


def test_part_is_checked_before_any_launch() -> None:
    """--part: one of the detection parts, and only inside a job (a launch has detection on or off whole)."""
    with pytest.raises(ValueError, match="part must be one of all, log, probes, none"):
        detect.run(["halo"], ranks=2, klass="S", pairs=2, within=True, part="network")
    with pytest.raises(ValueError, match="--part needs --within-job"):
        detect.run(["halo"], ranks=2, klass="S", pairs=2, part="log")


def test_a_job_that_switched_another_part_is_refused() -> None:
    """The figures of a job are used only when the job switched the part asked for."""
    rec = {"kernel": "halo", "class": "S", "ranks": 2, "every": 1, "warmup": {"verified": True},
           "runs": [{"verified": True}], "blocks": [{}] * 4}
    res = {"detect_env": "1", "detect_part": "log", "kernels": [rec]}
    assert detect.within_blocks(res, "halo", "S", 2, 2, part="log") is rec
    with pytest.raises(BenchError, match="switched 'log', not 'probes'"):
        detect.within_blocks(res, "halo", "S", 2, 2, part="probes")
