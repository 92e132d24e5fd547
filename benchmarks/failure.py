"""Failure detection and shrink time.

Each job (``N`` ranks, one ``mpiexec`` launch): all ranks agree on a time origin ``t0`` (rank 0's
``time.time()`` just after a barrier, broadcast); the victim, rank ``N-1``, sleeps until
``t0 + delay``, records ``time.time()`` as ``t_kill`` and calls ``planaria.fail_stop``. The survivors
loop on an 8-byte ``Allreduce`` until it raises; the first ``FailureError`` of any kind
(``ProcFailedError``, or ``RevokedError`` when another survivor revoked first) marks detection.
Each survivor then times ``revoke()`` + ``shrink()``. All ranks run on one machine, so their
wall clocks agree.

Per job and over the survivors: detection = t_first_error - t_kill (median, max);
recovery = shrink returned - revoke started (median, max); kill->shrunk = shrink returned - t_kill (max).
Over ``repeat`` separate launches the driver reports the median of the per-job values.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from typing import Any

import typer

from benchmarks import _launch
from benchmarks._launch import command_line, emit, launch, loadavg, median
from planaria.util.env import PLANARIA_FINALIZE_TIMEOUT

MODULE = "benchmarks.failure"


# --------------------------------------------------------------------------- inside the ranks
def rank_main(args: argparse.Namespace) -> None:
    import numpy as np

    import planaria as pl

    comm = pl.world(args.backend)
    rank, size = comm.rank, comm.size
    victim = size - 1
    a, b = np.ones(1), np.zeros(1)
    for _ in range(5):                       # warm up the collective paths
        comm.Allreduce(a, b)
    comm.Barrier()
    t0 = np.array([time.time()])
    comm.Bcast(t0, root=0)
    t_plan = float(t0[0]) + args.delay
    if rank == victim:
        while (left := t_plan - time.time()) > 0:
            time.sleep(left)
        t_kill = time.time()
        with open(os.path.join(args.scratch, "victim.json"), "w") as f:
            json.dump({"t_kill": t_kill}, f)
        pl.fail_stop("benchmark victim")

    ops = 0
    try:
        while True:
            comm.Allreduce(a, b)
            ops += 1
    except pl.FailureError as e:
        t_detect = time.time()
        error = type(e).__name__
    t_revoke = time.time()
    comm.revoke()
    new = comm.shrink()
    t_shrunk = time.time()
    mine = {"rank": rank, "t_detect": t_detect, "error": error, "t_revoke": t_revoke,
            "t_shrunk": t_shrunk, "ops": ops}
    everyone = new.gather(mine, root=0)
    if new.rank != 0:
        return
    try:
        with open(os.path.join(args.scratch, "victim.json")) as f:
            t_kill, source = float(json.load(f)["t_kill"]), "victim"
    except (OSError, ValueError, KeyError):
        t_kill, source = t_plan, "planned"
    det = [r["t_detect"] - t_kill for r in everyone]
    rec = [r["t_shrunk"] - r["t_revoke"] for r in everyone]
    tot = [r["t_shrunk"] - t_kill for r in everyone]
    ms = 1e3
    emit({
        "ranks": size, "backend": args.backend, "survivors": len(everyone), "new_size": new.size,
        "t_kill_source": source, "kill_late_ms": (t_kill - t_plan) * ms,
        "detect_ms_median": median(det) * ms, "detect_ms_max": max(det) * ms,
        "detect_ms_min": min(det) * ms,
        "recover_ms_median": median(rec) * ms, "recover_ms_max": max(rec) * ms,
        "kill_to_shrunk_ms_max": max(tot) * ms,
        "first_errors": dict(Counter(r["error"] for r in everyone)),
        "per_rank": [{"rank": r["rank"], "error": r["error"], "ops": r["ops"],
                      "detect_ms": (r["t_detect"] - t_kill) * ms,
                      "recover_ms": (r["t_shrunk"] - r["t_revoke"]) * ms} for r in everyone],
    }, args.out)


# --------------------------------------------------------------------------- driver (outside MPI)
AGG_KEYS = ("detect_ms_median", "detect_ms_max", "recover_ms_median", "recover_ms_max",
            "kill_to_shrunk_ms_max")


def run(ranks: list[int], backend: str = "ulfm", repeat: int = 3, delay: float = 0.2,
        timeout: float = 120.0, progress: Any = None) -> dict[str, Any]:
    """Launch ``repeat`` jobs per rank count (interleaved) and aggregate: median over jobs of each per-job value."""
    if backend not in ("ulfm", "sim"):
        raise ValueError(f"backend must be ulfm or sim, not {backend!r}")
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    load0 = loadavg()
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in ranks}
    cmds: dict[int, list[str]] = {}
    # a failed job's MPI_Finalize can linger; planaria's finalize watchdog bounds it
    env = {PLANARIA_FINALIZE_TIMEOUT: "3"}
    for i in range(repeat):
        for n in ranks:
            if progress:
                progress(f"failure: {n} ranks, {backend}, job {i + 1}/{repeat}")
            got = launch(n, MODULE, ["--backend", backend, "--delay", str(delay)],
                         ft=(backend == "ulfm"), timeout=timeout, env=env)
            res = dict(got.result)
            res["launch_s"] = got.wall_s
            runs[n].append(res)
            cmds[n] = got.cmd
    rows = []
    for n in ranks:
        rs = runs[n]
        row: dict[str, Any] = {"ranks": n, "backend": backend, "jobs": len(rs)}
        for k in AGG_KEYS:
            row[k] = median([r[k] for r in rs])
        errs: Counter[str] = Counter()
        for r in rs:
            errs.update(r["first_errors"])
        row["first_errors"] = dict(errs)
        row["launch_s_median"] = median([r["launch_s"] for r in rs])
        row["mpiexec"] = " ".join(cmds[n][:-4] + ["..."]) if cmds[n] else ""
        row["runs"] = rs
        rows.append(row)
    return {"benchmark": "failure", "backend": backend, "repeat": repeat, "delay_s": delay,
            "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
            "loadavg_before": load0, "loadavg_after": loadavg(), "command": command_line(),
            "rows": rows}


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    t = Table(title=f"Failure detection and shrink ({result['backend']}, {result['repeat']} job(s) per row, "
                    f"median over jobs; {result['cores']} cores; load {result['loadavg_before'][0]:.1f}->{result['loadavg_after'][0]:.1f})")
    for col in ("ranks", "detect med", "detect max", "shrink med", "shrink max", "kill->shrunk max",
                "first error PF/Rev", "launch"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        e = r["first_errors"]
        t.add_row(str(r["ranks"]), _ms(r["detect_ms_median"]), _ms(r["detect_ms_max"]),
                  _ms(r["recover_ms_median"]), _ms(r["recover_ms_max"]), _ms(r["kill_to_shrunk_ms_max"]),
                  f"{e.get('ProcFailedError', 0)}/{e.get('RevokedError', 0)}", f"{r['launch_s_median']:.1f} s")
    t.caption = ("detect = first FailureError - kill; shrink = revoke()+shrink(); med/max over survivors; "
                 "PF/Rev = survivors whose first error was ProcFailedError/RevokedError (all jobs)")
    return t


def _ms(x: float) -> str:
    return f"{x:.1f} ms"


def show(result: dict[str, Any], as_json: bool) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table)


# --------------------------------------------------------------------------- command


def command(
    ranks: str = typer.Option("4,8,16", "--ranks", help="Rank counts, comma-separated; rank N-1 is killed."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    repeat: int = typer.Option(3, "--repeat", help="Separate launches per rank count; the median is reported."),
    delay: float = typer.Option(0.2, "--delay", help="Seconds from the shared time origin to the kill."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result (every job, every survivor) as JSON."),
) -> None:
    """Time from a rank's death to the survivors' first FailureError, and revoke()+shrink() time.

    Example: python -m benchmarks failure --ranks 4,8,16 --repeat 3
    """

    def compute() -> dict[str, Any]:
        return run(_launch.parse_ranks(ranks), backend, repeat, delay, timeout, progress=_launch.progress_printer(json_out))
    raise typer.Exit(_launch.run_and_show("failure", compute, show, json_out))


def rank_entry(argv: list[str] | None = None) -> int:
    """One rank of the job (``python -m benchmarks.failure --rank ...``, started by the driver)."""
    p = _launch.rank_parser("benchmarks.failure")
    p.add_argument("--backend", default="ulfm", choices=["ulfm", "sim"])
    p.add_argument("--delay", type=float, default=0.2)
    rank_main(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(rank_entry())
