"""Cost of planaria's run-time error detection on NPB-like kernels (paper 000 §3.2: 0.38-1.39 %).

Two ways to compare detection on and off:

- **launches** (default): every launch is one plain ``mpiexec`` job running one kernel of
  ``planaria.bench.npb`` in every rank, with ``PLANARIA_DETECT=0`` (off) or ``=1`` (on) in its
  environment (``planaria.world()`` reads it); no controller, no injection. Per kernel, ``pairs``
  pairs of launches, off,on then on,off. The figure per launch is the kernel's timed region
  (set-up and verification excluded), the maximum over ranks.
- ``--within-job``: one job per kernel; the kernel's iterations are timed in blocks of about
  ``block_s`` seconds, and ``planaria.runtime.bootstrap.set_detection`` switches detection off
  (communicators back to their plain class, probe service blocked) or on before each block, in
  ABBA order (off,on, on,off, ...), so both sides of a pair share processes, placement, memory
  and the state of the machine within a fraction of a second. ``pairs`` is the number of block
  pairs. Each block's figure is the maximum over ranks.

Every run must pass the kernel's verification, else the benchmark fails.

Reported per kernel: the median over pairs of on/off with a percentile-bootstrap 95 % interval
(pairs resampled), the spread of the pair ratios, the ratio of the summed times (sensitive to
rare costs the median ignores) and the communication calls per second per rank (detection costs
per message). Overall: the median of every pair ratio of every kernel, its interval (each
kernel's pairs resampled within the kernel) and the worst kernel. Verdict against the goal
(median <= 1.01): *met* when the interval's upper end is <= the goal (and at least MIN_PAIRS
pairs), *consistent* when the median is but the interval is not, *missed* when the median is
above; the overall verdict is the worst kernel's.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from planaria.bench import _launch, npb
from planaria.bench._launch import BenchError, command_line, launch, loadavg, median

GOAL = 1.01
LEVEL = 0.95                 # confidence level of the bootstrap intervals
RESAMPLES = 4000             # bootstrap resamples
SEED = 20240112              # fixed: the same figures give the same interval
PAIRS_LAUNCH = 7             # default launch pairs per kernel
PAIRS_WITHIN = 200           # default block pairs per kernel with --within-job
BLOCK_S = 0.25               # default seconds per block with --within-job
MIN_PAIRS = 10               # fewer pairs never make a "met" verdict (their interval means little)
VERDICTS = ("met", "consistent", "missed")
MODES = {"off": "0", "on": "1"}
# one BLAS thread per rank: every rank is a process already, and idle BLAS threads spinning on an
# oversubscribed machine would swamp the difference being measured
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


schedule = npb.schedule


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
    groups = [list(g) for g in groups if len(g)]
    if not groups:
        raise ValueError("no values to bootstrap")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1, not {level}")
    rng = np.random.default_rng(seed)
    draws = [np.asarray(g, dtype=np.float64)[rng.integers(0, len(g), size=(resamples, len(g)))] for g in groups]
    meds = np.median(np.concatenate(draws, axis=1), axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(meds, [tail, 1.0 - tail])
    return float(lo), float(hi)


def verdict(ratio: float, hi: float, pairs: int, goal: float = GOAL) -> str:
    """met: the interval's upper end is within the goal; consistent: only the median is; missed: the median is not."""
    if not ratio <= goal:
        return "missed"
    if hi <= goal and pairs >= MIN_PAIRS:
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


def overall(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every pair ratio of every kernel with its stratified interval; the verdict of the worst kernel."""
    groups = [row["pair_ratios"] for row in rows]
    pooled = [r for g in groups for r in g]
    ratio = median(pooled)
    lo, hi = median_ci(groups)
    bad = max(rows, key=lambda row: (VERDICTS.index(row["verdict"]), row["ratio_median"]))
    v = worst([row["verdict"] for row in rows])
    return {"ratio_median": ratio, "ci_low": lo, "ci_high": hi, "ci_level": LEVEL,
            "overhead_pct": (ratio - 1.0) * 100.0, "pairs": len(pooled),
            "worst_kernel": bad["kernel"], "worst_ratio": bad["ratio_median"],
            "pooled_verdict": verdict(ratio, hi, len(pooled)),
            "goal": GOAL, "verdict": v, "goal_met": v == "met"}


def within_blocks(res: dict[str, Any], kernel: str, klass: str, ranks: int, pairs: int) -> dict[str, Any]:
    """The kernel record of a ``--alternate`` job; BenchError unless it timed what was asked and every run verified."""
    recs = [k for k in res.get("kernels", []) if k.get("kernel") == kernel]
    if len(recs) != 1 or res.get("detect_env") != "1":
        raise BenchError(f"the alternating job of {kernel} returned no result for it with detection available")
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


def run(kernels: list[str] | str, ranks: int = 4, klass: str = "W", pairs: int | None = None, backend: str = "ulfm",
        timeout: float = 120.0, progress: Any = None, within: bool = False,
        block_s: float = BLOCK_S) -> dict[str, Any]:
    """Per kernel, ``pairs`` pairs of launches with detection off and on (order flipped every pair).

    ``within``: one launch per kernel instead, timing ``pairs`` pairs of blocks of iterations
    (about ``block_s`` seconds each) with detection switched off and on between blocks in ABBA
    order. ``pairs`` defaults to PAIRS_LAUNCH or PAIRS_WITHIN.
    """
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
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, not {timeout}")
    if not block_s > 0:
        raise ValueError(f"block-s must be > 0, not {block_s}")
    for k in names:
        err = npb.problem_error(k, klass, ranks) or (npb.alternate_error(k, klass, ranks) if within else None)
        if err:
            raise ValueError(err)
    load0, t_start = loadavg(), time.perf_counter()
    rows, launches, blocks, jobs, cmd = [], [], [], [], []
    order = schedule(pairs)
    for k in names:
        mine = []
        if within:
            got = launch(ranks, npb.MODULE, ["--kernel", k, "--class", klass, "--backend", backend,
                                             "--alternate", str(pairs), "--block-s", repr(block_s)],
                         ft=(backend == "ulfm"), timeout=timeout + 8 * pairs * block_s,
                         env={"PLANARIA_DETECT": "1", **THREAD_ENV})
            cmd = got.cmd
            rec = within_blocks(got.result, k, klass, ranks, pairs)
            mine = [{"kernel": k, **b} for b in rec["blocks"]]
            rate = median([r["calls_per_s"] for r in rec["runs"]])
            row = summarize(k, mine, calls_per_s=rate)
            row.update(every=rec["every"], block_s_median=median([b["time_s"] for b in mine]),
                       runs=len(rec["runs"]), launch_s=got.wall_s)
            if progress:
                progress(f"detect: {k} class {klass}, {ranks} ranks, {pairs} block pairs of {rec['every']} "
                         f"iteration(s) ({row['block_s_median']:.3f} s) in one job: on/off {row['ratio_median']:.4f} "
                         f"[{row['ci_low']:.4f}, {row['ci_high']:.4f}], {got.wall_s:.1f} s launch")
            rows.append(row)
            blocks += mine
            jobs.append({"kernel": k, "every": rec["every"], "warmup": rec.get("warmup"), "runs": rec["runs"],
                         "launch_s": got.wall_s})
            continue
        for n, (pair, mode) in enumerate(order, 1):
            got = launch(ranks, npb.MODULE, ["--kernel", k, "--class", klass, "--backend", backend],
                         ft=(backend == "ulfm"), timeout=timeout,
                         env={"PLANARIA_DETECT": MODES[mode], **THREAD_ENV})
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
        rows.append(summarize(k, mine))
        launches += mine
    out = {"benchmark": "detect", "within_job": within, "class": klass, "ranks": ranks, "backend": backend,
           "pairs": pairs, "kernels": names, "goal": GOAL, "rows": rows, "overall": overall(rows),
           "total_s": time.perf_counter() - t_start, "cores": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d"), "loadavg_before": load0, "loadavg_after": loadavg(),
           "mpiexec": " ".join(cmd[:-4] + ["..."]) if cmd else "", "command": command_line()}
    if within:
        out.update(block_s=block_s, blocks=blocks, jobs=jobs)
    else:
        out["launches"] = launches
    return out


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    within = result.get("within_job")
    where = "blocks in one job per kernel, ABBA" if within else "launches"
    pct = int(round(LEVEL * 100))
    t = Table(title=f"Detection on/off ({where}), NPB-like kernels class {result['class']}, {result['ranks']} ranks, "
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
    _launch.show(result, as_json, table, min_width=150)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python benchmarks/detect.py",
                                description="Cost of planaria's run-time error detection on NPB-like kernels.")
    p.add_argument("--kernels", default=",".join(npb.KERNELS), help="kernels, comma-separated")
    p.add_argument("--ranks", type=int, default=4, help="ranks per job")
    p.add_argument("--class", dest="klass", default="W", help="problem class: S, W or A")
    p.add_argument("--pairs", type=int, default=None,
                   help=f"off/on pairs per kernel: launches ({PAIRS_LAUNCH}) or, with --within-job, blocks ({PAIRS_WITHIN})")
    p.add_argument("--within-job", action="store_true",
                   help="time blocks of iterations inside one job per kernel, detection switched off/on in ABBA order")
    p.add_argument("--block-s", type=float, default=BLOCK_S, help="seconds per block with --within-job (about)")
    p.add_argument("--backend", default="ulfm", help="ulfm or sim")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per launch")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)

    def compute() -> dict[str, Any]:
        return run(args.kernels, args.ranks, args.klass, args.pairs, args.backend, args.timeout,
                   progress=_launch.progress_printer(args.json), within=args.within_job, block_s=args.block_s)
    return _launch.run_and_show("detect", compute, show, args.json)


if __name__ == "__main__":
    sys.exit(main())
