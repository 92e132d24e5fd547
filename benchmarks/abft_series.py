"""Many timed runs of the ABFT runtime in one MPI job (``python -m benchmarks abft --per-job K``).

Run with N+2 ranks::

    python -m benchmarks.abft_series --dem DEM.npy --scratch DIR --kernels slope --modes plain,abft \\
        --reps K --warmup 1 --out RESULT.json

Every run is exactly what ``python -m planaria.abft.masterworker --mode M --bench`` does in a job of
its own (:func:`planaria.abft.masterworker.run_rank`: barrier, then the masters and workers of that
mode), but the processes stay: the interpreter, the imports, the MPI library and the heap are
those of the previous run. Each run gets a fresh duplicate of the world communicator, so no
message or pending receive of one run can match in another. Between runs, outside the timed
region, rank 0 hashes the output (the driver checks that every mode wrote the same raster),
removes it, and, unless ``--settle`` is 0, syncs the file systems and pauses ``--settle`` seconds;
the other ranks wait for it asleep (:func:`release`), not spinning in a barrier.

Repetition r (0-based) runs the modes in order ``permutations(modes)[r % len]``, kernel after
kernel; ``--warmup W`` repetitions come first and are reported apart (``warmup_runs``), not
counted: they take the processes from cold (first imports, first touches of the heap) to the
state every counted run starts in.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import planaria
from benchmarks._launch import emit
from planaria import events
from planaria.abft import masterworker as runtime
from planaria.terrain import dem_info

T_GO = 99  # on the world communicator, which the runs themselves never use


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (the output raster), read in 16 MB chunks (SHA-256 because it is the
    fastest strong hash here, ~1.8 GB/s with the CPU's SHA instructions: it keeps the gap between runs short)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def release(world: Any) -> None:
    """Rank 0 lets the others go; they wait for it sleeping, not spinning in a barrier, so that rank 0's
    work between runs (hashing the output, the pause, the prefault) has the cores to itself."""
    if world.Get_rank() == 0:
        for r in range(1, world.Get_size()):
            world.send(None, r, T_GO)
        return
    req = world.irecv_matched(source=0, tag=T_GO)
    while not req.Test():
        time.sleep(0.005)
    req.wait()


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="benchmarks.abft_series")
    ap.add_argument("--dem", required=True)
    ap.add_argument("--scratch", required=True, help="directory of the outputs and part files")
    ap.add_argument("--kernels", default="slope,cutdepth")
    ap.add_argument("--modes", default="plain,abft,duplicate")
    ap.add_argument("--reps", type=int, required=True, help="counted repetitions")
    ap.add_argument("--warmup", type=int, default=1, help="repetitions before them, not counted")
    ap.add_argument("--settle", type=float, default=1.0, help="pause between runs (s), after a sync")
    ap.add_argument("--backend", default="ulfm")
    ap.add_argument("--out", default=None, help="result JSON (rank 0)")
    args = ap.parse_args(argv)
    args.kernels = [k for k in args.kernels.split(",") if k]
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.modes or any(m not in runtime.MODES for m in args.modes) or len(set(args.modes)) != len(args.modes):
        ap.error(f"--modes: distinct entries of {', '.join(runtime.MODES)}")
    if args.reps < 1 or args.warmup < 0 or args.settle < 0:
        ap.error("--reps >= 1, --warmup >= 0, --settle >= 0")
    return args


def one_run(comm: Any, world: Any, args: argparse.Namespace, info: Any, kernel: str, mode: str) -> dict[str, Any] | None:
    """One timed run on a fresh communicator; on rank 0 its report and the output's digest."""
    out = Path(args.scratch) / f"out-{kernel}.npy"
    rargs = runtime.parse(["--kernel", kernel, "--dem", args.dem, "--out", str(out), "--mode", mode, "--bench",
                           "--backend", args.backend])
    code, report = runtime.run_rank(comm, rargs, info)
    world.Barrier()  # every rank is done with this run: the output is complete
    if world.Get_rank() != 0:
        return None
    if code != 0 or report is None:
        raise RuntimeError(f"abft {kernel} {mode}: exit {code}, rank 0 did not finish the run")
    t0 = time.perf_counter()
    digest = file_digest(out)
    out.unlink()
    return {"report": report, "digest": digest, "digest_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    world = planaria.world(args.backend)
    events.handle_failures("planaria-abft", action="abft-replan")     # as the runtime's own main
    if world.Get_size() < 4:
        print("benchmarks.abft_series: needs at least 4 ranks (2 masters + 2 workers)", file=sys.stderr)
        return 2
    info = dem_info(args.dem)
    orders = list(itertools.permutations(args.modes))
    runs: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for rep in range(-args.warmup, args.reps):
        order = orders[rep % len(orders)]
        for kernel in args.kernels:
            for mode in order:
                if world.Get_rank() == 0 and args.settle > 0:
                    os.sync()
                    time.sleep(args.settle)
                release(world)
                comm = world.dup()  # outside the timed region (run_rank's barrier starts it)
                got = one_run(comm, world, args, info, kernel, mode)
                if got is not None:
                    got.update(kernel=kernel, mode=mode, repetition=rep)
                    (runs if rep >= 0 else warm).append(got)
    if world.Get_rank() == 0:
        emit({"runs": runs, "warmup_runs": warm, "job_s": time.perf_counter() - t_start, "pid0": os.getpid()}, args.out)
    return 0


if __name__ == "__main__":
    code = main()
    planaria.finalize(code)
    sys.exit(code)
