"""Cost of planaria's run-time error detection on NPB-like kernels ([Gao 2024] §3.2: 0.38-1.39 %).

Two ways to compare detection on and off:

- **launches** (default): every launch is one plain ``mpiexec`` job running one kernel of
  ``benchmarks.npb`` in every rank, with ``PLANARIA_DETECT=0`` (off) or ``=1`` (on) in its
  environment (``planaria.world()`` reads it); no controller, no injection. Per kernel, ``pairs``
  pairs of launches, off,on then on,off. The figure per launch is the kernel's timed region
  (set-up and verification excluded), the maximum over ranks.
- ``--within-job``: one job per kernel; the kernel's iterations are timed in blocks of about
  ``block_s`` seconds, and ``planaria.runtime.bootstrap.set_detection`` switches detection off
  (communicators back to their plain class, probe service blocked) or on before each block, in
  ABBA order (off,on, on,off, ...), so both sides of a pair share processes, placement, memory
  and the state of the machine within a fraction of a second. ``pairs`` is the number of block
  pairs. Each block's figure is the maximum over ranks.
- ``--within-job --jobs J``: J such jobs per kernel, one after the other, pooled. The spread from
  one job to the next (where its ranks landed on the cores, what else ran) is larger than the
  interval of one job admits, so the job, not the pair, is the independent unit: the pooled
  interval is a two-stage bootstrap (jobs resampled, then pairs within each drawn job), and
  *met* needs at least MIN_JOBS jobs.

Every run must pass the kernel's verification, else the benchmark fails.

Reported per kernel: the median over pairs of on/off with a percentile-bootstrap 95 % interval
(pairs resampled), the spread of the pair ratios, the ratio of the summed times (sensitive to
rare costs the median ignores) and the communication calls per second per rank (detection costs
per message). Overall: the median of every pair ratio of every kernel, its interval (each
kernel's pairs resampled within the kernel) and the worst kernel. Verdict against the goal
(median <= 1.01): *met* when the interval's upper end is <= the goal (and at least MIN_PAIRS
pairs), *consistent* when the median is but the interval is not, *missed* when the median is
above; the overall verdict is the worst kernel's. Pooled (``jobs`` > 1), per kernel: every job's
own row, the median of all pair ratios of all jobs with the two-stage interval, and the median of
the per-job medians.
"""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import typer

from benchmarks import _launch, npb
from benchmarks._launch import BenchError, command_line, launch, loadavg, median
from planaria.util.env import PLANARIA_DETECT

GOAL = 1.01
LEVEL = 0.95                 # confidence level of the bootstrap intervals
RESAMPLES = 4000             # bootstrap resamples
SEED = 20240112              # fixed: the same figures give the same interval
PAIRS_LAUNCH = 7             # default launch pairs per kernel
PAIRS_WITHIN = 200           # default block pairs per kernel with --within-job
BLOCK_S = 0.25               # default seconds per block with --within-job
MIN_PAIRS = 10               # fewer pairs never make a "met" verdict (their interval means little)
MIN_JOBS = 2                 # pooled jobs: fewer never make a "met" verdict (one job cannot show the job-to-job spread)
VERDICTS = ("met", "consistent", "missed")
MODES = {"off": "0", "on": "1"}
# what "off" means in the tables' titles, per ``--part``
PART_NOTE = {"all": "", "log": ", off = message log off (probe service on)",
             "probes": ", off = probe service paused (message log on)",
             "none": ", A/A control: 'off' switches nothing (the timing's own bias)"}
# one BLAS thread per rank: every rank is a process already, and idle BLAS threads spinning on an
# oversubscribed machine would swamp the difference being measured
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


schedule = npb.schedule
PARTS = npb.PARTS


def pair_ratios(launches: list[dict[str, Any]]) -> list[float]:
    """on/off time ratio of every pair (launches or blocks: dicts with ``pair``, ``mode``, ``time_s``), by pair number."""
    by_pair: dict[int, dict[str, float]] = {}
    for ln in launches:
        slot = by_pair.setdefault(int(ln["pair"]), {})
        if ln["mode"] in slot:
            raise ValueError(f"pair {ln['pair']} has two '{ln['mode']}' launches")
        slot[ln["mode"]] = float(ln["time_s"])
    ratios = []
    for i in sorted(by_pair):
        slot = by_pair[i]
        if set(slot) != set(MODES):
            raise ValueError(f"pair {i} lacks a launch with detection {'on' if 'on' not in slot else 'off'}")
        if slot["off"] <= 0:
            raise ValueError(f"pair {i}: non-positive time with detection off")
        ratios.append(slot["on"] / slot["off"])
    return ratios


def median_ci(groups: list[list[float]], level: float = LEVEL, resamples: int = RESAMPLES,
              seed: int = SEED) -> tuple[float, float]:
    """Percentile-bootstrap interval of the median of all values pooled; each group is resampled within itself.

    One group: the ordinary bootstrap of a median. Several (kernels): a stratified bootstrap, so
    every resample keeps each kernel's number of pairs.
    """
    return jobs_median_ci([[g] for g in groups], level, resamples, seed)


def jobs_median_ci(strata: list[list[list[float]]], level: float = LEVEL, resamples: int = RESAMPLES,
                   seed: int = SEED) -> tuple[float, float]:
    """Two-stage percentile-bootstrap interval of the median of all values pooled: jobs, then pairs.

    ``strata[k][j]`` are the pair ratios of job j of kernel k. In every resample each kernel's jobs
    are drawn with replacement (as many as it has), then each drawn job's pairs with replacement
    (as many as it has), and the median of everything drawn is taken. Jobs are the unit because the
    spread between jobs exceeds what the pairs inside one job show; kernels are kept apart as in
    ``median_ci``, which is this with one job per kernel.
    """
    strata = [[np.asarray(job, dtype=np.float64) for job in jobs if len(job)] for jobs in strata]
    strata = [jobs for jobs in strata if jobs]
    if not strata:
        raise ValueError("no values to bootstrap")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1, not {level}")
    pair_rng = np.random.default_rng(seed)
    job_rng = np.random.default_rng([seed, 1])
    cols = []
    for jobs in strata:
        n_jobs, width = len(jobs), max(len(job) for job in jobs)
        chosen = (job_rng.integers(0, n_jobs, size=(resamples, n_jobs)) if n_jobs > 1
                  else np.zeros((resamples, 1), dtype=np.int64))
        for slot in range(n_jobs):
            col = np.full((resamples, width), np.nan)
            for j, vals in enumerate(jobs):
                rows = np.flatnonzero(chosen[:, slot] == j)
                if rows.size:
                    col[rows, :len(vals)] = vals[pair_rng.integers(0, len(vals), size=(rows.size, len(vals)))]
            cols.append(col)
    pooled = np.concatenate(cols, axis=1)
    meds = np.nanmedian(pooled, axis=1) if np.isnan(pooled).any() else np.median(pooled, axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(meds, [tail, 1.0 - tail])
    return float(lo), float(hi)


def verdict(ratio: float, hi: float, pairs: int, goal: float = GOAL, jobs: int | None = None) -> str:
    """met: the interval's upper end is within the goal; consistent: only the median is; missed: the median is not.

    ``jobs``: the number of jobs pooled (None: one job, not pooled); fewer than MIN_JOBS are never met.
    """
    if not ratio <= goal:
        return "missed"
    if hi <= goal and pairs >= MIN_PAIRS and (jobs is None or jobs >= MIN_JOBS):
        return "met"
    return "consistent"


def worst(verdicts: list[str]) -> str:
    """The weakest verdict (missed < consistent < met)."""
    return max(verdicts, key=VERDICTS.index) if verdicts else "missed"


def summarize(kernel: str, launches: list[dict[str, Any]], calls_per_s: float | None = None) -> dict[str, Any]:
    """One kernel's row: median ratio over pairs with its interval, median times per mode, spread, message rate."""
    ratios = pair_ratios(launches)
    off = [ln["time_s"] for ln in launches if ln["mode"] == "off"]
    on = [ln["time_s"] for ln in launches if ln["mode"] == "on"]
    ratio = median(ratios)
    lo, hi = median_ci([ratios])
    if calls_per_s is None:
        calls_per_s = median([ln["calls_per_s"] for ln in launches if "calls_per_s" in ln])
    v = verdict(ratio, hi, len(ratios))
    return {"kernel": kernel, "pairs": len(ratios), "off_s_median": median(off), "on_s_median": median(on),
            "ratio_median": ratio, "ci_low": lo, "ci_high": hi, "ci_level": LEVEL,
            "ratio_min": min(ratios), "ratio_max": max(ratios), "ratio_of_sums": sum(on) / sum(off),
            "overhead_pct": (ratio - 1.0) * 100.0, "pair_ratios": ratios, "calls_per_s": calls_per_s,
            "launch_s_median": median([ln["launch_s"] for ln in launches if "launch_s" in ln]),
            "goal": GOAL, "verdict": v, "goal_met": v == "met"}


def summarize_jobs(kernel: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """One kernel's pooled row over several jobs (each a dict with ``blocks`` and ``calls_per_s``).

    Every job keeps its own row (``per_job``: median and pair interval of that job alone); pooled:
    the median of all pair ratios with the two-stage interval (jobs, then pairs), the median of the
    job medians, and a verdict that needs MIN_JOBS jobs to be met.
    """
    if not jobs:
        raise ValueError(f"no jobs of {kernel} to pool")
    per_job = []
    for n, job in enumerate(jobs):
        row = summarize(kernel, job["blocks"], calls_per_s=job["calls_per_s"])
        row.update({k: job[k] for k in ("every", "runs", "launch_s") if k in job}, job=n)
        if job["blocks"]:
            row["block_s_median"] = median([b["time_s"] for b in job["blocks"]])
        per_job.append(row)
    groups = [row["pair_ratios"] for row in per_job]
    ratios = [r for g in groups for r in g]
    blocks = [b for job in jobs for b in job["blocks"]]
    off = [b["time_s"] for b in blocks if b["mode"] == "off"]
    on = [b["time_s"] for b in blocks if b["mode"] == "on"]
    ratio = median(ratios)
    lo, hi = jobs_median_ci([groups])
    job_medians = [row["ratio_median"] for row in per_job]
    v = verdict(ratio, hi, len(ratios), jobs=len(jobs))
    return {"kernel": kernel, "jobs": len(jobs), "pairs": len(ratios), "off_s_median": median(off),
            "on_s_median": median(on), "ratio_median": ratio, "ci_low": lo, "ci_high": hi, "ci_level": LEVEL,
            "ci_method": "two-stage bootstrap: jobs, then pairs within each job",
            "ratio_min": min(ratios), "ratio_max": max(ratios), "ratio_of_sums": sum(on) / sum(off),
            "overhead_pct": (ratio - 1.0) * 100.0, "pair_ratios": ratios,
            "job_medians": job_medians, "median_of_job_medians": median(job_medians),
            "calls_per_s": median([row["calls_per_s"] for row in per_job]),
            "every": sorted({row["every"] for row in per_job if "every" in row}),
            "block_s_median": median([b["time_s"] for b in blocks]),
            "per_job": per_job, "min_jobs_for_met": MIN_JOBS,
            "goal": GOAL, "verdict": v, "goal_met": v == "met"}


def overall(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every pair ratio of every kernel with its stratified interval; the verdict of the worst kernel."""
    groups = [row["pair_ratios"] for row in rows]
    pooled = [r for g in groups for r in g]
    ratio = median(pooled)
    jobs = None
    if any("per_job" in row for row in rows):        # pooled jobs: each kernel's jobs, then their pairs
        lo, hi = jobs_median_ci([[job["pair_ratios"] for job in row.get("per_job") or [row]] for row in rows])
        jobs = min(len(row.get("per_job") or [row]) for row in rows)
    else:
        lo, hi = median_ci(groups)
    bad = max(rows, key=lambda row: (VERDICTS.index(row["verdict"]), row["ratio_median"]))
    v = worst([row["verdict"] for row in rows])
    out = {"ratio_median": ratio, "ci_low": lo, "ci_high": hi, "ci_level": LEVEL,
           "overhead_pct": (ratio - 1.0) * 100.0, "pairs": len(pooled),
           "worst_kernel": bad["kernel"], "worst_ratio": bad["ratio_median"],
           "pooled_verdict": verdict(ratio, hi, len(pooled), jobs=jobs),
           "goal": GOAL, "verdict": v, "goal_met": v == "met"}
    if jobs is not None:
        out["ci_method"] = "two-stage bootstrap per kernel: jobs, then pairs within each job"
    return out


def within_blocks(res: dict[str, Any], kernel: str, klass: str, ranks: int, pairs: int,
                  part: str = "all") -> dict[str, Any]:
    """The kernel record of a ``--alternate`` job; BenchError unless it timed what was asked and every run verified."""
    recs = [k for k in res.get("kernels", []) if k.get("kernel") == kernel]
    if len(recs) != 1 or res.get("detect_env") != "1":
        raise BenchError(f"the alternating job of {kernel} returned no result for it with detection available")
    if res.get("detect_part", "all") != part:
        raise BenchError(f"the alternating job of {kernel} switched {res.get('detect_part')!r}, not {part!r}")
    rec = recs[0]
    if rec.get("class") != klass or rec.get("ranks") != ranks:
        raise BenchError(f"the alternating job of {kernel} ran class {rec.get('class')} on {rec.get('ranks')} ranks")
    runs = [rec.get("warmup") or {}] + list(rec.get("runs") or [])
    if not all(r.get("verified") for r in runs):
        raise BenchError(f"{kernel} class {klass} failed verification in the alternating job")
    blocks = rec.get("blocks") or []
    if len(blocks) != 2 * pairs:
        raise BenchError(f"the alternating job of {kernel} timed {len(blocks)} blocks of the {2 * pairs} asked "
                         f"({len(runs) - 1} runs of {rec.get('every')} iterations per block)")
    return rec


def check_launch(res: dict[str, Any], kernel: str, klass: str, ranks: int, mode: str) -> dict[str, Any]:
    """The kernel record of one launch's result; BenchError unless it ran what was asked and verified."""
    recs = [k for k in res.get("kernels", []) if k.get("kernel") == kernel]
    if len(recs) != 1:
        raise BenchError(f"launch of {kernel} returned no result for it")
    rec = recs[0]
    if res.get("detect_env") != MODES[mode]:
        raise BenchError(f"launch of {kernel} saw PLANARIA_DETECT={res.get('detect_env')!r}, "
                         f"expected {MODES[mode]!r}")
    if rec.get("class") != klass or rec.get("ranks") != ranks:
        raise BenchError(f"launch of {kernel} ran class {rec.get('class')} on {rec.get('ranks')} ranks")
    if not rec.get("verified"):
        raise BenchError(f"{kernel} class {klass} failed verification with detection {mode}: {rec.get('detail')}")
    return rec


def run_within(k: str, ranks: int, klass: str, pairs: int, backend: str, timeout: float,
               block_s: float, bind: str = "none", under_run: bool = False,
               part: str = "all") -> tuple[dict[str, Any], Any]:
    """One ``--alternate`` job of kernel ``k``: (its verified kernel record, the launch)."""
    got = launch(ranks, npb.MODULE, ["--kernel", k, "--class", klass, "--backend", backend,
                                     "--alternate", str(pairs), "--block-s", repr(block_s), "--detect-part", part],
                 ft=(backend == "ulfm"), timeout=timeout + 8 * pairs * block_s,
                 env={PLANARIA_DETECT: "1", **THREAD_ENV}, bind=bind, under_run=under_run)
    return within_blocks(got.result, k, klass, ranks, pairs, part), got


def run(kernels: list[str] | str, ranks: int = 4, klass: str = "W", pairs: int | None = None, backend: str = "ulfm",
        timeout: float = 120.0, progress: Any = None, within: bool = False,
        block_s: float = BLOCK_S, jobs: int = 1, bind: str = "none", under_run: bool = False,
        part: str = "all") -> dict[str, Any]:
    """Per kernel, ``pairs`` pairs of launches with detection off and on (order flipped every pair).

    ``within``: one launch per kernel instead, timing ``pairs`` pairs of blocks of iterations
    (about ``block_s`` seconds each) with detection switched off and on between blocks in ABBA
    order. ``pairs`` defaults to PAIRS_LAUNCH or PAIRS_WITHIN. ``jobs`` (with ``within``): that
    many such launches per kernel, one after the other, pooled (``summarize_jobs``). ``bind``:
    ``core`` pins the ranks to cores (``_launch.BINDINGS``), ``none`` leaves them to the scheduler.
    ``under_run`` (with ``within``): each job runs under ``planaria run``, controller and agents
    included, as detection is used; else under a bare ``mpiexec`` (the service without a controller).
    ``part`` (with ``within``): what the 'off' blocks switch off, all of detection or one part of it
    (``planaria.runtime.bootstrap.DETECTION_PARTS``), to see which part costs what, or none (an A/A control).
    """
    names, klass, pairs = _checked(kernels, ranks, klass, pairs, backend, timeout, within, block_s, jobs, bind,
                                   under_run, part)
    load0, t_start = loadavg(), time.perf_counter()
    rows, launches, blocks, job_recs, cmd = [], [], [], [], []
    order = schedule(pairs)
    for k in names:
        if within:
            got_rows, got_blocks, got_jobs, cmd = _kernel_within(k, ranks, klass, pairs, backend, timeout, block_s,
                                                                 jobs, bind, under_run, progress, part)
            rows += got_rows
            blocks += got_blocks
            job_recs += got_jobs
            continue
        mine, cmd = _kernel_launches(k, order, ranks, klass, backend, timeout, bind, progress)
        rows.append(summarize(k, mine))
        launches += mine
    out = {"benchmark": "detect", "within_job": within, "class": klass, "ranks": ranks, "backend": backend,
           "bind_to": bind, "runner": "planaria run" if under_run else "mpiexec", "part": part,
           "pairs": pairs, "kernels": names, "goal": GOAL, "rows": rows, "overall": overall(rows),
           "total_s": time.perf_counter() - t_start, "cores": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d"), "loadavg_before": load0, "loadavg_after": loadavg(),
           "mpiexec": " ".join(cmd[:-4] + ["..."]) if cmd else "", "command": command_line()}
    if within:
        out.update(block_s=block_s, blocks=blocks, jobs=job_recs)
        if jobs > 1:
            out.update(jobs_per_kernel=jobs, min_jobs_for_met=MIN_JOBS)
    else:
        out["launches"] = launches
    return out


def _checked(kernels: list[str] | str, ranks: int, klass: str, pairs: int | None, backend: str, timeout: float,
             within: bool, block_s: float, jobs: int, bind: str, under_run: bool,
             part: str = "all") -> tuple[list[str], str, int]:
    """``run``'s arguments checked (ValueError naming the wrong one): the kernels, the class and the pair count."""
    names = npb.parse_kernels(kernels) if isinstance(kernels, str) else npb.parse_kernels(",".join(kernels))
    klass = npb.check_class(klass)
    if pairs is None:
        pairs = PAIRS_WITHIN if within else PAIRS_LAUNCH
    if backend not in ("ulfm", "sim"):
        raise ValueError(f"backend must be ulfm or sim, not {backend!r}")
    if ranks < 2:
        raise ValueError(f"ranks must be >= 2, not {ranks}")
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, not {pairs}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, not {jobs}")
    if jobs > 1 and not within:
        raise ValueError("jobs > 1 needs --within-job (without it every launch is a job already)")
    if under_run and not within:
        raise ValueError("--under-run needs --within-job (detection is switched inside the job)")
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, not {part!r}")
    if part != "all" and not within:
        raise ValueError("--part needs --within-job (a part is switched inside the job)")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, not {timeout}")
    if not block_s > 0:
        raise ValueError(f"block-s must be > 0, not {block_s}")
    _launch.check_bind(bind)
    for k in names:
        err = npb.problem_error(k, klass, ranks) or (npb.alternate_error(k, klass, ranks) if within else None)
        if err:
            raise ValueError(err)
    return names, klass, pairs


def _kernel_within(k: str, ranks: int, klass: str, pairs: int, backend: str, timeout: float, block_s: float,
                   jobs: int, bind: str, under_run: bool, progress: Any,
                   part: str = "all") -> tuple[list[Any], list[Any], list[Any], Any]:
    """Kernel ``k`` in ``jobs`` alternating jobs: (its rows, its blocks, its job records, the last launch's command)."""
    rows, blocks, job_recs, pooled = [], [], [], []
    cmd = []
    for n in range(jobs):
        rec, got = run_within(k, ranks, klass, pairs, backend, timeout, block_s, bind, under_run, part)
        cmd = got.cmd
        mine = [{"kernel": k, **b} for b in rec["blocks"]]
        rate = median([r["calls_per_s"] for r in rec["runs"]])
        row = summarize(k, mine, calls_per_s=rate)
        row.update(every=rec["every"], block_s_median=median([b["time_s"] for b in mine]),
                   runs=len(rec["runs"]), launch_s=got.wall_s)
        if progress:
            which = f"job {n + 1}/{jobs}" if jobs > 1 else "one job"
            progress(f"detect: {k} class {klass}, {ranks} ranks, {pairs} block pairs of {rec['every']} "
                     f"iteration(s) ({row['block_s_median']:.3f} s) in {which}: on/off "
                     f"{row['ratio_median']:.4f} [{row['ci_low']:.4f}, {row['ci_high']:.4f}], "
                     f"{got.wall_s:.1f} s launch" + (f", load {loadavg()[0]:.1f}" if jobs > 1 else ""))
        job = {"kernel": k, "every": rec["every"], "warmup": rec.get("warmup"), "runs": rec["runs"],
               "launch_s": got.wall_s}
        if jobs > 1:
            mine = [{**b, "job": n} for b in mine]
            job["job"] = n
            pooled.append({"blocks": mine, "calls_per_s": rate, "every": rec["every"],
                           "runs": len(rec["runs"]), "launch_s": got.wall_s})
        else:
            rows.append(row)
        blocks += mine
        job_recs.append(job)
    if jobs > 1:
        row = summarize_jobs(k, pooled)
        if progress:
            progress(f"detect: {k} pooled over {jobs} jobs: on/off {row['ratio_median']:.4f} "
                     f"[{row['ci_low']:.4f}, {row['ci_high']:.4f}] (jobs, then pairs resampled), "
                     f"job medians {', '.join(f'{m:.4f}' for m in row['job_medians'])}: {row['verdict']}")
        rows.append(row)
    return rows, blocks, job_recs, cmd


def _kernel_launches(k: str, order: list[tuple[int, str]], ranks: int, klass: str, backend: str, timeout: float,
                     bind: str, progress: Any) -> tuple[list[dict[str, Any]], Any]:
    """Kernel ``k`` in one launch per (pair, mode) of ``order``: (the launches' records, the last command)."""
    mine = []
    cmd = []
    for n, (pair, mode) in enumerate(order, 1):
        got = launch(ranks, npb.MODULE, ["--kernel", k, "--class", klass, "--backend", backend],
                     ft=(backend == "ulfm"), timeout=timeout,
                     env={PLANARIA_DETECT: MODES[mode], **THREAD_ENV}, bind=bind)
        rec = check_launch(got.result, k, klass, ranks, mode)
        cmd = got.cmd
        ln = {"kernel": k, "pair": pair, "mode": mode, "time_s": rec["time_s"],
              "calls_per_rank": rec["calls_per_rank"], "calls_per_s": rec["calls_per_s"],
              "launch_s": got.wall_s}
        mine.append(ln)
        if progress:
            progress(f"detect: {k} class {klass}, {ranks} ranks, launch {n}/{len(order)} "
                     f"(pair {pair + 1}, detection {mode}): {rec['time_s']:.3f} s timed, "
                     f"{got.wall_s:.1f} s launch")
    return mine, cmd


def _title_note(result: dict[str, Any]) -> str:
    """Table-title note of the ranks' binding and of the part switched (nothing for the defaults)."""
    return (" bound to cores" if result.get("bind_to", "none") == "core" else "") + PART_NOTE[result.get("part", "all")]


def pooled_table(result: dict[str, Any]) -> Any:
    """The table of ``--within-job --jobs J`` (J > 1): every job's row, then each kernel's pooled row."""
    from rich.table import Table
    pct = int(round(LEVEL * 100))
    jobs = result["jobs_per_kernel"]
    t = Table(title=f"Detection on/off (blocks inside {jobs} jobs per kernel, ABBA, pooled), NPB-like kernels class "
                    f"{result['class']}, {result['ranks']} ranks{_title_note(result)}, {result['backend']} ({result['pairs']} pair(s) per job; "
                    f"{result['cores']} cores; load {result['loadavg_before'][0]:.1f}->{result['loadavg_after'][0]:.1f})")
    for col in ["kernel", "job", "calls/s/rank", "block", "off (median)", "on (median)",
                f"on/off median [{pct} % CI]", "pair range", "sum on/sum off", "median of job medians", "verdict"]:
        t.add_column(col, justify="right")

    def ci(g: dict[str, Any]) -> str:
        return f"{g['ratio_median']:.4f} [{g['ci_low']:.4f}, {g['ci_high']:.4f}]"
    for r in result["rows"]:
        for j in r["per_job"]:
            t.add_row(r["kernel"], str(j["job"] + 1), f"{j['calls_per_s']:.0f}",
                      f"{j['every']} it, {j['block_s_median']:.3f} s", f"{j['off_s_median']:.4f} s",
                      f"{j['on_s_median']:.4f} s", ci(j), f"{j['ratio_min']:.3f}-{j['ratio_max']:.3f}",
                      f"{j['ratio_of_sums']:.4f}", "", "")
        every = "-".join(str(e) for e in (r["every"][0], r["every"][-1])) if len(r["every"]) > 1 else str(r["every"][0])
        t.add_row(r["kernel"], f"pooled ({r['jobs']})", f"{r['calls_per_s']:.0f}",
                  f"{every} it, {r['block_s_median']:.3f} s", f"{r['off_s_median']:.4f} s",
                  f"{r['on_s_median']:.4f} s", ci(r), f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}",
                  f"{r['ratio_of_sums']:.4f}",
                  f"{r['median_of_job_medians']:.4f} ({min(r['job_medians']):.4f}-{max(r['job_medians']):.4f})",
                  r["verdict"], end_section=True)
    o = result["overall"]
    t.add_row("overall", "", "", "", "", "", ci(o), f"worst {o['worst_kernel']} {o['worst_ratio']:.4f}", "", "",
              o["verdict"])
    t.caption = (f"time = max over ranks (each block of iterations); job rows: median over that job's pairs, "
                 f"{pct} % percentile-bootstrap interval of its pairs; pooled: median of all pair ratios of all "
                 f"jobs, {pct} % two-stage bootstrap interval (jobs resampled, then pairs within each job); "
                 f"goal median <= {result['goal']}: met = pooled interval within the goal and at least "
                 f"{result['min_jobs_for_met']} jobs, consistent = median only, missed = median above; overall = "
                 f"all {o['pairs']} pair ratios (kernels resampled separately), verdict of the worst kernel; "
                 f"{len(result['blocks'])} blocks in {len(result['jobs'])} jobs in {result['total_s']:.0f} s")
    return t


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    if result.get("jobs_per_kernel", 1) > 1:
        return pooled_table(result)
    within = result.get("within_job")
    where = "blocks in one job per kernel, ABBA" if within else "launches"
    pct = int(round(LEVEL * 100))
    t = Table(title=f"Detection on/off ({where}), NPB-like kernels class {result['class']}, {result['ranks']} ranks{_title_note(result)}, "
                    f"{result['backend']} ({result['pairs']} pair(s) per kernel; {result['cores']} cores; "
                    f"load {result['loadavg_before'][0]:.1f}->{result['loadavg_after'][0]:.1f})")
    cols = ["kernel", "calls/s/rank"] + (["block"] if within else []) + [
        "off (median)", "on (median)", f"on/off median [{pct} % CI]", "pair range", "sum on/sum off", "verdict"]
    for col in cols:
        t.add_column(col, justify="right")

    def ci(g: dict[str, Any]) -> str:
        return f"{g['ratio_median']:.4f} [{g['ci_low']:.4f}, {g['ci_high']:.4f}]"
    for r in result["rows"]:
        cells = [r["kernel"], f"{r['calls_per_s']:.0f}"]
        if within:
            cells.append(f"{r['every']} it, {r['block_s_median']:.3f} s")
        cells += [f"{r['off_s_median']:.4f} s", f"{r['on_s_median']:.4f} s", ci(r),
                  f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}", f"{r['ratio_of_sums']:.4f}", r["verdict"]]
        t.add_row(*cells)
    o = result["overall"]
    t.add_row(*(["overall", ""] + ([""] if within else []) +
                ["", "", ci(o), f"worst {o['worst_kernel']} {o['worst_ratio']:.4f}", "", o["verdict"]]))
    n = len(result["blocks"] if within else result["launches"])
    t.caption = (f"time = max over ranks ({'each block of iterations' if within else 'timed region, set-up and verification excluded'}); "
                 f"on/off = median over pairs, {pct} % percentile-bootstrap interval; goal median <= {result['goal']}: "
                 f"met = interval within the goal, consistent = median only, missed = median above; overall = "
                 f"all {o['pairs']} pair ratios (kernels resampled separately), verdict of the worst kernel; "
                 f"{n} {'blocks' if within else 'launches'} in {result['total_s']:.0f} s")
    return t


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=215 if result.get("jobs_per_kernel", 1) > 1 else 150)


def command(
    kernels: str = typer.Option("cg,mg,ft,ep,is,halo", "--kernels", help="NPB-like kernels, comma-separated."),
    ranks: int = typer.Option(4, "--ranks", help="Ranks per job."),
    klass: str = typer.Option("W", "--class", help="Problem class: S (tests), W or A."),
    pairs: int | None = typer.Option(None, "--pairs", help="Pairs (detection off and on) per kernel: launches "
                              "(default 7; order flips every pair) or, with --within-job, blocks (default 200)."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result (every launch or block) as JSON."),
    within_job: bool = typer.Option(False, "--within-job", help="Compare inside one job per kernel: blocks of "
                                    "iterations with detection switched off and on in ABBA order (no launch-to-launch spread)."),
    block_s: float = typer.Option(0.25, "--block-s", help="Seconds per block with --within-job (about; set from a warm-up run)."),
    part: str = typer.Option("all", "--part", help="With --within-job: what the 'off' blocks switch off: all "
                             "(message log and probe service), log (the message log only) or probes (the probe "
                             "service only); the other part stays on. none: an A/A control, the 'off' blocks switch nothing, so the "
                             "ratio shows the timing's own bias and spread."),
    jobs: int = typer.Option(1, "--jobs", help="With --within-job: jobs per kernel, one after the other, pooled: "
                             "median of all pairs, two-stage bootstrap interval (jobs, then pairs); 'met' needs >= 2 jobs."),
    bind: str = typer.Option("none", "--bind-to", help="none: Open MPI's default (no binding once the ranks outnumber "
                             "the cores); core: pin every rank to a core, several per core when they outnumber them."),
    under_run: bool = typer.Option(False, "--under-run", help="With --within-job: run every job under 'planaria run' "
                                   "(controller and agents, as users run detection) instead of a bare mpiexec."),
    note_cost: bool = typer.Option(False, "--note-cost", help="Instead of the on/off ratio: where detection's time "
                                   "goes, the flight record's note timed inside each kernel's runs and in a tight "
                                   "loop, one job per kernel under 'planaria run' (--pairs: pairs of runs, default 3)."),
) -> None:
    """Time of NPB-like kernels with run-time error detection on (PLANARIA_DETECT=1) vs off, and their ratio.

    Example: python -m benchmarks detect --kernels cg,mg,ft,ep,is,halo --class W --pairs 7

    With --within-job each kernel's iterations are timed in blocks inside one job, planaria's
    detection paused (message log off, probe service blocked) for the 'off' blocks; the median
    on/off ratio comes with a bootstrap 95 % interval and a verdict (met / consistent / missed).
    --jobs J runs J such jobs per kernel and pools them, the job as the unit of the interval
    (the spread between jobs is larger than one job's interval shows).

    --note-cost shows where the time goes instead: the flight record's note (written before every
    count-checked collective under 'planaria run') timed inside each kernel and in a tight loop.
    Example: python -m benchmarks detect --kernels cg --class A --ranks 4 --note-cost
    """

    if note_cost:
        from benchmarks import flightcost

        def costs() -> dict[str, Any]:
            return flightcost.run(kernels, ranks, klass, flightcost.PAIRS if pairs is None else pairs, backend, timeout,
                                  progress=_launch.progress_printer(json_out))
        raise typer.Exit(_launch.run_and_show("detect", costs, flightcost.show, json_out))

    def compute() -> dict[str, Any]:
        return run(kernels, ranks, klass, pairs, backend, timeout, progress=_launch.progress_printer(json_out),
                      within=within_job, block_s=block_s, jobs=jobs, bind=bind, under_run=under_run, part=part)
    raise typer.Exit(_launch.run_and_show("detect", compute, show, json_out))
