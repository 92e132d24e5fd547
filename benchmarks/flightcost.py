"""Where detection's time goes in a kernel: the flight record's note, timed inside the kernel's run
and in a tight loop.

With detection on under ``planaria run``, every count-checked collective first writes a note into
the rank's flight record (``planaria.comm.flight.note``: the call's number, operation, bytes and
call site). Timed in a loop, a note costs a few hundred nanoseconds; between two collectives of a
kernel, whose data has pushed Python's code and objects out of the CPU's caches, it costs several
times that. This benchmark measures both in one job under ``planaria run`` (the record exists only
with a job directory), detection on:

- **in the kernel**: the kernel runs ``pairs`` times with every note timed (``perf_counter_ns``
  before and after the call) and as many times with the same two clock reads around nothing,
  alternating (note first in even pairs); per rank and pair, the note's cost is the difference of
  the two means per call (the clock's own cost taken out); the median over pairs;
- **hot**: then, in the same processes, the same two in a loop of ``LOOP`` calls.

Two jobs per kernel: one with the note ``planaria run`` picks (the C note where it could build it,
see ``planaria.comm.flight``), one with the Python note (``PLANARIA_FLIGHT_NOTE=python``).
Reported per kernel and note: notes per second per rank, the note's cost in the kernel and hot (median over
ranks, and the highest rank), and the notes' share of a rank's time. The timer sits between the
communicator's method and the note, so the note records that method as its call site (one frame
further than in normal use, the same work).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from benchmarks import _launch, npb
from benchmarks._launch import BenchError, launch, loadavg, median
from benchmarks.detect import THREAD_ENV
from planaria.comm import flight
from planaria.util.env import PLANARIA_DETECT, PLANARIA_FLIGHT_NOTE

MODULE = "benchmarks.flightcost"
PAIRS = 3              # default pairs of kernel runs (timed note, bare clock) per kernel
LOOP = 20000           # calls per mode in the hot loop
#: the notes measured, one job each: the one planaria run picks (C where it could build it), and Python's
NOTES = ("auto", "python")


# --------------------------------------------------------------------------- inside the ranks
def _shims(real: Any, acc: list[int]) -> dict[str, Any]:
    """Stand-ins for ``flight.note``: ``note`` times the real note, ``clock`` only reads the clock
    twice; both add the nanoseconds and the call to ``acc``."""
    pc = time.perf_counter_ns

    def note(*args: Any) -> None:
        t = pc()
        real(*args)
        acc[0] += pc() - t
        acc[1] += 1

    def clock(*args: Any) -> None:
        t = pc()
        acc[0] += pc() - t
        acc[1] += 1

    return {"note": note, "clock": clock}


def _hot(comm: Any, real: Any, op: int) -> dict[str, float]:
    """Mean ns per call of each stand-in in a loop of LOOP calls (caches warm)."""
    import numpy as np
    buf, out = np.zeros(1), np.zeros(1)
    res = {}
    for mode in ("clock", "note", "clock", "note"):
        acc = [0, 0]
        fn = _shims(real, acc)[mode]
        for _ in range(LOOP):
            fn(comm._fl, comm._ml_seq, op, buf, out)
        res[mode] = min(res.get(mode, float("inf")), acc[0] / acc[1])
    return res


def _kernel(comm: Any, flight: Any, kernel: str, klass: str, pairs: int) -> dict[str, Any]:
    """This rank's figures for one kernel: per pair, (mean ns per call, calls) of each stand-in, and
    the kernel's time (max over ranks) in each run."""
    npb.run_kernel(comm, kernel, klass, False)                  # warm-up, untimed
    real = flight.note              # after a first note: the C note waits for numpy until then
    runs: dict[str, list[list[float]]] = {"note": [], "clock": []}
    for i in range(pairs):
        for mode in (("note", "clock") if i % 2 == 0 else ("clock", "note")):
            acc = [0, 0]
            flight.note = _shims(real, acc)[mode]
            try:
                rec = npb.run_kernel(comm, kernel, klass, False)
            finally:
                flight.note = real
            if not rec["verified"]:
                raise RuntimeError(f"{kernel} class {klass} failed verification")
            runs[mode].append([acc[0] / acc[1] if acc[1] else float("nan"), acc[1], rec["time_s"]])
    return {"runs": runs, "hot": _hot(comm, real, flight.ALLREDUCE)}


def rank_main(args: argparse.Namespace) -> int:
    import planaria as pl
    from benchmarks._launch import emit
    from planaria.comm import flight
    comm = pl.world(args.backend)
    recording = bool(comm.allreduce(1 if flight.open_here() else 0) == comm.size)
    out: dict[str, Any] = {"benchmark": "flightcost", "ranks": comm.size, "class": args.klass,
                           "recording": recording, "kernels": []}
    if recording:
        for k in args.kernels:
            mine = _kernel(comm, flight, k, args.klass, args.pairs)
            ranks = comm.gather(mine, root=0)
            if comm.rank == 0:
                out["kernels"].append({"kernel": k, "per_rank": ranks})
    kinds = comm.gather(flight.note_kind(), root=0)          # the note that wrote the kernels' notes
    if comm.rank == 0:
        out["note"] = sorted(set(kinds or []))
        emit(out, args.out)
    return 0 if recording else 2


# --------------------------------------------------------------------------- the driver
def summarize(kernel: str, per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """One kernel's row from every rank's figures (see ``_kernel``)."""
    costs, hots, shares, rates = [], [], [], []
    for fig in per_rank:
        note, clock = fig["runs"]["note"], fig["runs"]["clock"]
        diffs = [n[0] - c[0] for n, c in zip(note, clock, strict=True)]
        cost = median(diffs)
        calls = median([n[1] for n in note])
        secs = median([n[2] for n in note])
        costs.append(cost)
        hots.append(fig["hot"]["note"] - fig["hot"]["clock"])
        shares.append(calls * cost * 1e-9 / secs if secs > 0 else float("nan"))
        rates.append(calls / secs if secs > 0 else float("nan"))
    return {"kernel": kernel, "notes_per_s": median(rates), "ns_in_kernel": median(costs),
            "ns_in_kernel_max": max(costs), "ns_hot": median(hots), "cold_over_hot": median(costs) / median(hots),
            "share_of_rank_time": median(shares), "share_max": max(shares)}


def run(kernels: list[str] | str, ranks: int = 4, klass: str = "A", pairs: int = PAIRS,
        backend: str = "ulfm", timeout: float = 120.0, progress: Any = None) -> dict[str, Any]:
    """One job under ``planaria run`` per kernel: the note's cost in the kernel and hot."""
    names = npb.parse_kernels(kernels if isinstance(kernels, str) else ",".join(kernels))
    klass = npb.check_class(klass)
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, not {pairs}")
    for k in names:
        err = npb.problem_error(k, klass, ranks)
        if err:
            raise ValueError(err)
    load0, rows, cmd = loadavg(), [], []
    for k, which in ((k, which) for k in names for which in NOTES):
        env = {PLANARIA_DETECT: "1", **THREAD_ENV, **({PLANARIA_FLIGHT_NOTE: flight.NOTE_OFF} if which == "python" else {})}
        got = launch(ranks, MODULE, ["--kernel", k, "--class", klass, "--backend", backend, "--pairs", str(pairs)],
                     ft=(backend == "ulfm"), timeout=timeout * (2 * pairs + 2), env=env, under_run=True)
        res, cmd = got.result, got.cmd
        if not res.get("recording"):
            raise BenchError("the ranks kept no flight record (it needs the job directory 'planaria run' gives)")
        note = "+".join(res.get("note") or [])
        row = summarize(k, res["kernels"][0]["per_rank"])
        row["note"] = note
        rows.append(row)
        if progress:
            progress(f"flightcost: {k} class {klass}, {ranks} ranks, {note} note: {row['ns_in_kernel']:.0f} ns in the "
                     f"kernel, {row['ns_hot']:.0f} ns hot; {100 * row['share_of_rank_time']:.2f} % of a rank's time")
    return {"benchmark": "flightcost", "class": klass, "ranks": ranks, "backend": backend, "pairs": pairs,
            "loop": LOOP, "rows": rows, "load_before": load0, "load_after": loadavg(),
            "command": _launch.command_line(), "job": " ".join(cmd)}


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    t = Table(title=f"the flight record's note, detection on, under planaria run: {result['ranks']} ranks, "
                    f"class {result['class']}, {result['pairs']} pairs of runs, load {result['load_before'][0]} -> "
                    f"{result['load_after'][0]}")
    for col in ("kernel", "note", "notes/s per rank", "ns per note in the kernel (max rank)", "ns per note hot",
                "in kernel / hot", "share of a rank's time (max rank)"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        t.add_row(r["kernel"], r["note"], f"{r['notes_per_s']:.0f}", f"{r['ns_in_kernel']:.0f} ({r['ns_in_kernel_max']:.0f})",
                  f"{r['ns_hot']:.0f}", f"{r['cold_over_hot']:.1f}",
                  f"{100 * r['share_of_rank_time']:.2f} % ({100 * r['share_max']:.2f} %)")
    t.caption = ("per note: mean time of the timed note minus that of the clock reads alone, per rank the median "
                 "over pairs of runs; ranks that share a core count about their share times the ranks per core "
                 "on the wall clock")
    return t


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=150)


def main(argv: list[str] | None = None) -> int:
    p = _launch.rank_parser("python -m benchmarks.flightcost")
    p.add_argument("--kernel", default="cg")
    p.add_argument("--class", dest="klass", default="A")
    p.add_argument("--backend", default="ulfm")
    p.add_argument("--pairs", type=int, default=PAIRS)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    args.kernels = npb.parse_kernels(args.kernel)
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
