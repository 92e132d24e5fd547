"""Rank program of ``python -m benchmarks abft``'s detection campaign: many silent faults in one MPI job.

Run with N+1 ranks: rank 0 verifies, ranks 1..N are the workers (block w-1). Trial t uses
its own synthetic DEM (shape, relief, NoData holes, kernel drawn from ``(seed, t)``) and is
``clean``, ``covered`` or ``uncovered`` in turn. Every worker computes its rows
``block.computed`` (owned rows and the check row) from its slab with the real kernel; in a
faulty trial one worker, drawn from the trial's RNG, flips one random bit (any of the 64) of
one random cell in one of its rows, chosen among the rows some comparison covers
(:func:`planaria.abft.verify.covered_rows`) or among those none covers. Rank 0 gathers the
real outputs and judges them with :func:`planaria.abft.masterworker.abft_verdict` (the runtime's
own verification: every first/check row against the masters' referee copy of that row), then
scores against the truth, which only the scorer knows:
detected (any worker flagged), located (the faulty worker flagged), exact (only it flagged),
and whether the assembled raster differs from the serial one (a silent wrong output).
Clean trials count flagged workers and mismatching comparisons (false positives). Comparisons
are V's (one per boundary); the comparisons of rows with the referee are counted apart.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

KINDS = ("clean", "covered", "uncovered")


def trial_dem(seed: int, t: int) -> tuple[np.ndarray, float | None, str]:
    """The DEM, its NoData value and the kernel of trial ``t`` (deterministic in ``(seed, t)``)."""
    rng = np.random.default_rng([seed, t, 1])
    rows, cols = int(rng.integers(48, 161)), int(rng.integers(24, 97))
    y, x = np.mgrid[0:rows, 0:cols].astype(np.float64)
    z = (rng.uniform(0, 3000) + rng.uniform(5, 200) * np.sin(y / rng.uniform(3, 40))
         + rng.uniform(5, 200) * np.cos(x / rng.uniform(3, 40)) + rng.normal(0, rng.uniform(0.01, 5), (rows, cols)))
    z = z.astype(np.float32 if rng.random() < 0.5 else np.float64)
    nodata = -9999.0 if rng.random() < 0.5 else None
    if rng.random() < 0.6:
        holes = rng.random((rows, cols)) < rng.uniform(0.0, 0.02)
        z[holes] = np.nan if nodata is None else nodata
    kernel = "slope" if (t // len(KINDS)) % 2 == 0 else "cutdepth"
    return z, nodata, kernel


def trial_fault(seed: int, t: int, blocks: list[Any]) -> dict[str, Any] | None:
    """Where trial ``t`` flips a bit: worker (block), local row, column, bit; None for a clean trial."""
    from planaria.abft.verify import covered_rows
    kind = KINDS[t % len(KINDS)]
    if kind == "clean":
        return None
    rng = np.random.default_rng([seed, t, 2])
    w = int(rng.integers(len(blocks)))
    blk = blocks[w]
    lo, hi = blk.computed
    cov = set(covered_rows(blocks)[w])
    cand = sorted(cov) if kind == "covered" else [r for r in range(lo, hi) if r not in cov]
    row = cand[int(rng.integers(len(cand)))]
    return {"kind": kind, "worker": w, "row": row - lo, "abs_row": row, "col": -1, "bit": int(rng.integers(64)),
            "col_u": float(rng.random())}


def worker_output(z: np.ndarray, nodata: float | None, kernel: str, blk: Any, fault: dict[str, Any] | None) -> np.ndarray:
    """The rows a worker computes, from its slab only, with the trial's bit flip if it is the faulty one."""
    from planaria.abft.masterworker import flip_bit
    from planaria.terrain import kernels
    from planaria.terrain.window import slab_bounds
    fn, window = kernels[kernel]
    s0, s1 = slab_bounds(blk.computed[0], blk.computed[1], z.shape[0], window)
    out = fn(z[s0:s1], nodata=nodata, rows=blk.computed)
    if fault is not None and fault["worker"] == blk.rank:
        flip_bit(out, fault["row"], int(fault["col_u"] * out.shape[1]), fault["bit"])
    return out


def judge(seed: int, t: int, n: int, outputs: list[np.ndarray]) -> dict[str, Any]:
    """Rank 0: the runtime's verdict on the gathered outputs of trial ``t``, scored against the truth."""
    from planaria.abft.masterworker import abft_verdict
    from planaria.abft.partition import partition
    from planaria.abft.verify import CORRECT, compare, verification_rows
    from planaria.terrain import kernels
    from planaria.terrain.window import slab_bounds
    z, nodata, kernel = trial_dem(seed, t)
    fn, window = kernels[kernel]
    blocks = partition(z.shape[0], n, window)
    fault = trial_fault(seed, t, blocks)
    referee = {}   # the masters' own copy of every compared row, as in the runtime
    for k in range(n - 1):
        r = blocks[k].r1
        s0, s1 = slab_bounds(r, r + 1, z.shape[0], window)
        referee[k] = fn(z[s0:s1], nodata=nodata, rows=(r, r + 1))[0]
    firsts = [o[0] for o in outputs]
    checks = [o[-1] if b.check_row is not None else None for o, b in zip(outputs, blocks, strict=False)]
    t0 = time.perf_counter()
    f = abft_verdict([CORRECT] * n, firsts, checks, referee)
    dt = time.perf_counter() - t0
    flagged = sorted(w for w in range(n) if f[w] != CORRECT)
    mism = [not ok for ok in compare(verification_rows(checks[:-1], firsts[1:]))] if n > 1 else []
    ref_bad = [not np.array_equal(referee[k].view(np.uint8), row.view(np.uint8))
               for k in range(n - 1) for row in (checks[k], firsts[k + 1])]
    assembled = np.concatenate([o[: b.local_size] for o, b in zip(outputs, blocks, strict=False)])
    serial = fn(z, nodata=nodata)
    wrong = assembled.tobytes() != serial.tobytes()
    rec = {"t": t, "kind": fault["kind"] if fault else "clean", "kernel": kernel, "shape": list(z.shape),
           "flagged": flagged, "comparisons": len(mism), "mismatches": sum(mism),
           "referee_comparisons": len(ref_bad), "referee_mismatches": sum(ref_bad),
           "wrong_output": wrong, "verify_s": dt}
    if fault:
        rec.update(worker=fault["worker"], abs_row=fault["abs_row"], bit=fault["bit"], detected=bool(flagged),
                   located=fault["worker"] in flagged, exact=flagged == [fault["worker"]])
    return rec


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per kind: injected, detected, located, exact, silent wrong outputs; clean: false positives."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        rs = [r for r in records if r["kind"] == kind]
        row: dict[str, Any] = {"trials": len(rs), "comparisons": sum(r["comparisons"] for r in rs),
                               "mismatching_comparisons": sum(r["mismatches"] for r in rs),
                               "referee_comparisons": sum(r["referee_comparisons"] for r in rs),
                               "mismatching_referee_comparisons": sum(r["referee_mismatches"] for r in rs),
                               "wrong_outputs": sum(r["wrong_output"] for r in rs)}
        if kind == "clean":
            row["runs_flagged"] = sum(bool(r["flagged"]) for r in rs)
        else:
            row.update(injected=len(rs), detected=sum(r["detected"] for r in rs),
                       located=sum(r["located"] for r in rs), exact=sum(r["exact"] for r in rs),
                       undetected_wrong_outputs=sum(r["wrong_output"] and not r["detected"] for r in rs),
                       by_kernel={k: {"injected": sum(r["kernel"] == k for r in rs),
                                      "detected": sum(r["kernel"] == k and r["detected"] for r in rs)}
                                  for k in ("slope", "cutdepth")})
        out[kind] = row
    return out


def rank_main(argv: list[str] | None = None) -> int:
    import planaria
    from benchmarks._launch import emit
    from planaria.abft.partition import partition
    from planaria.terrain import kernels

    p = argparse.ArgumentParser(prog="benchmarks.abft_faults")
    p.add_argument("--trials", type=int, required=True, help="trials in all (clean, covered, uncovered in turn)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="auto")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    comm = planaria.world(args.backend)
    rank, n = comm.Get_rank(), comm.Get_size() - 1
    records = []
    t_start = time.perf_counter()
    for t in range(args.trials):
        z, nodata, kernel = trial_dem(args.seed, t)
        blocks = partition(z.shape[0], n, kernels[kernel][1])
        out = None
        if rank > 0:
            out = worker_output(z, nodata, kernel, blocks[rank - 1], trial_fault(args.seed, t, blocks))
        got = comm.gather(out, root=0)
        if rank == 0:
            records.append(judge(args.seed, t, n, got[1:]))
    if rank == 0:
        emit({"workers": n, "trials": args.trials, "seed": args.seed, "total_s": time.perf_counter() - t_start,
              "summary": summarize(records), "records": records}, args.out)
    return 0


if __name__ == "__main__":
    code = rank_main()
    import planaria
    planaria.finalize(code)
    sys.exit(code)
