"""Cost of planaria's run-time error detection on NPB-like kernels (paper 000 §3.2: 0.38-1.39 %).

Every launch is one plain ``mpiexec`` job (``--with-ft ulfm`` for the ulfm backend) running one
kernel of ``planaria.bench.npb`` in every rank, with ``PLANARIA_DETECT=0`` (detection off) or
``=1`` (on) in its environment; ``planaria.world()`` reads it. No controller, no injection: the
jobs differ only in that variable. Per kernel, ``pairs`` pairs of launches, the order flipping
every pair (off,on then on,off) so slow drift of the machine cancels. The figure per launch is the
kernel's timed region (set-up and verification excluded), the maximum over ranks; every launch
must pass the kernel's verification, else the benchmark fails.

Reported per kernel: the median over pairs of on/off, the median times, the spread of the pair
ratios and the communication calls per second per rank (detection costs per message). Overall:
the median of every pair ratio of every kernel, and the worst kernel median. Goal: <= 1.01 for
every kernel.

``--within-job`` runs the pairs inside one job per kernel instead: the kernel runs 2 x pairs times
and ``planaria.runtime.bootstrap.set_detection`` switches detection off (monitored communicators
back to their plain class, probe service idle) and on between runs, so both sides of a pair share
processes, placement and memory.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from planaria.bench import _launch, npb
from planaria.bench._launch import BenchError, command_line, launch, loadavg, median

GOAL = 1.01
MODES = {"off": "0", "on": "1"}
# one BLAS thread per rank: every rank is a process already, and idle BLAS threads spinning on an
# oversubscribed machine would swamp the difference being measured
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


schedule = npb.schedule


def pair_ratios(launches: list[dict[str, Any]]) -> list[float]:
    """on/off time ratio of every pair (launches: dicts with ``pair``, ``mode``, ``time_s``), by pair number."""
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


def summarize(kernel: str, launches: list[dict[str, Any]]) -> dict[str, Any]:
    """One kernel's row: median ratio over pairs, median times per mode, ratio spread, message rate."""
    ratios = pair_ratios(launches)
    off = [ln["time_s"] for ln in launches if ln["mode"] == "off"]
    on = [ln["time_s"] for ln in launches if ln["mode"] == "on"]
    ratio = median(ratios)
    return {"kernel": kernel, "pairs": len(ratios), "off_s_median": median(off), "on_s_median": median(on),
            "ratio_median": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
            "overhead_pct": (ratio - 1.0) * 100.0, "pair_ratios": ratios,
            "calls_per_s": median([ln["calls_per_s"] for ln in launches if "calls_per_s" in ln]),
            "launch_s_median": median([ln["launch_s"] for ln in launches if "launch_s" in ln]),
            "goal": GOAL, "goal_met": ratio <= GOAL}


def overall(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every pair ratio of every kernel, and the worst kernel's median ratio."""
    pooled = [r for row in rows for r in row["pair_ratios"]]
    ratio = median(pooled)
    worst = max(rows, key=lambda row: row["ratio_median"])
    return {"ratio_median": ratio, "overhead_pct": (ratio - 1.0) * 100.0, "pairs": len(pooled),
            "worst_kernel": worst["kernel"], "worst_ratio": worst["ratio_median"],
            "goal": GOAL, "goal_met": all(row["goal_met"] for row in rows)}


def within_runs(res: dict[str, Any], kernel: str, klass: str, ranks: int, pairs: int) -> list[dict[str, Any]]:
    """The runs of a ``--alternate`` job; BenchError unless all ran what was asked and verified."""
    recs = [k for k in res.get("kernels", []) if k.get("kernel") == kernel]
    if len(recs) != 1 or res.get("detect_env") != "1":
        raise BenchError(f"the alternating job of {kernel} returned no result for it with detection available")
    runs = recs[0].get("runs") or []
    if len(runs) != 2 * pairs or recs[0].get("class") != klass or recs[0].get("ranks") != ranks:
        raise BenchError(f"the alternating job of {kernel} ran {len(runs)} runs of class "
                         f"{recs[0].get('class')} on {recs[0].get('ranks')} ranks")
    bad = [r for r in runs if not r.get("verified")]
    if bad:
        raise BenchError(f"{kernel} class {klass} failed verification with detection {bad[0]['mode']}")
    return [{"kernel": kernel, **r} for r in runs]


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


def run(kernels: list[str] | str, ranks: int = 4, klass: str = "W", pairs: int = 7, backend: str = "ulfm",
        timeout: float = 120.0, progress: Any = None, within: bool = False) -> dict[str, Any]:
    """Per kernel, ``pairs`` pairs of launches with detection off and on (order flipped every pair).

    ``within``: one launch per kernel instead, running the pairs inside the job with detection
    switched off and on between runs (same processes, placement and memory: no launch-to-launch
    spread in the comparison).
    """
    names = npb.parse_kernels(kernels) if isinstance(kernels, str) else npb.parse_kernels(",".join(kernels))
    klass = npb.check_class(klass)
    if backend not in ("ulfm", "sim"):
        raise ValueError(f"backend must be ulfm or sim, not {backend!r}")
    if ranks < 2:
        raise ValueError(f"ranks must be >= 2, not {ranks}")
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, not {pairs}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, not {timeout}")
    for k in names:
        err = npb.problem_error(k, klass, ranks)
        if err:
            raise ValueError(err)
    load0, t_start = loadavg(), time.perf_counter()
    rows, launches, cmd = [], [], []
    order = schedule(pairs)
    for k in names:
        mine = []
        if within:
            got = launch(ranks, npb.MODULE, ["--kernel", k, "--class", klass, "--backend", backend,
                                             "--alternate", str(pairs)],
                         ft=(backend == "ulfm"), timeout=timeout * 2 * pairs,
                         env={"PLANARIA_DETECT": "1", **THREAD_ENV})
            cmd = got.cmd
            mine = within_runs(got.result, k, klass, ranks, pairs)
            if progress:
                progress(f"detect: {k} class {klass}, {ranks} ranks, {pairs} pairs in one job: "
                         f"{got.wall_s:.1f} s launch")
            rows.append(summarize(k, mine))
            launches += mine
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
    return {"benchmark": "detect", "within_job": within, "class": klass, "ranks": ranks, "backend": backend, "pairs": pairs,
            "kernels": names, "goal": GOAL, "rows": rows, "overall": overall(rows), "launches": launches,
            "total_s": time.perf_counter() - t_start, "cores": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d"), "loadavg_before": load0, "loadavg_after": loadavg(),
            "mpiexec": " ".join(cmd[:-4] + ["..."]) if cmd else "", "command": command_line()}


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    where = "runs in one job per kernel" if result.get("within_job") else "launches"
    t = Table(title=f"Detection on/off ({where}), NPB-like kernels class {result['class']}, {result['ranks']} ranks, "
                    f"{result['backend']} ({result['pairs']} pair(s) per kernel; {result['cores']} cores; "
                    f"load {result['loadavg_before'][0]:.1f}->{result['loadavg_after'][0]:.1f})")
    for col in ("kernel", "calls/s/rank", "off (median)", "on (median)", "on/off (median)", "pair range",
                "overhead", "goal"):
        t.add_column(col, justify="right")

    def goal(g: dict[str, Any]) -> str:
        return f"<= {g['goal']} {'met' if g['goal_met'] else 'MISSED'}"
    for r in result["rows"]:
        t.add_row(r["kernel"], f"{r['calls_per_s']:.0f}", f"{r['off_s_median']:.3f} s", f"{r['on_s_median']:.3f} s",
                  f"{r['ratio_median']:.4f}", f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}",
                  f"{r['overhead_pct']:+.2f} %", goal(r))
    o = result["overall"]
    t.add_row("overall", "", "", "", f"{o['ratio_median']:.4f}", f"worst {o['worst_kernel']} {o['worst_ratio']:.4f}",
              f"{o['overhead_pct']:+.2f} %", goal(o))
    t.caption = ("timed region = max over ranks, set-up and verification excluded; on/off = median over pairs "
                 f"of adjacent {where}; goal per kernel; overall = median of all {o['pairs']} pair ratios "
                 f"(met when every kernel meets it); {len(result['launches'])} {where} in {result['total_s']:.0f} s")
    return t


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=132)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python benchmarks/detect.py",
                                description="Cost of planaria's run-time error detection on NPB-like kernels.")
    p.add_argument("--kernels", default=",".join(npb.KERNELS), help="kernels, comma-separated")
    p.add_argument("--ranks", type=int, default=4, help="ranks per job")
    p.add_argument("--class", dest="klass", default="W", help="problem class: S, W or A")
    p.add_argument("--pairs", type=int, default=7, help="off/on launch pairs per kernel")
    p.add_argument("--backend", default="ulfm", help="ulfm or sim")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per launch")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)

    def compute() -> dict[str, Any]:
        return run(args.kernels, args.ranks, args.klass, args.pairs, args.backend, args.timeout,
                   progress=_launch.progress_printer(args.json))
    return _launch.run_and_show("detect", compute, show, args.json)


if __name__ == "__main__":
    sys.exit(main())
