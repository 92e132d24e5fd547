"""Job start: ``planaria run`` against ``mpiexec`` with raw mpi4py, the same program, side by side.

The program only gets its world communicator (``pl.world()``, or ``MPI.COMM_WORLD`` after
``from mpi4py import MPI``), notes the time and its process's CPU time (user + system, from the
interpreter's start: imports, MPI's initialization and, under planaria, the runtime's threads),
and meets the others in a barrier. Measured per launch: from the command's start to the moment
the last rank holds its communicator (its first line of user code), the whole command's wall
time, and the ranks' median CPU time at that point. Where the time goes: until the first rank's
first line (the launcher), until the last rank is past MPI's initialization, and from there to
the last rank's communicator (planaria's ``world()``: MPI's initialization ends by waiting for
every rank, so every rank's ``world()`` runs after that point, all of them sharing the cores).
The two launchers alternate, ``--repeat`` times each; the table gives medians and planaria's
ratios to the raw launch.

Run as ``python -m benchmarks start`` (from the repository root).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from benchmarks import _launch
from benchmarks._launch import BenchError, mpiexec_prefix, run_bounded
from planaria.util.env import PLANARIA_HOME

MODES = ("raw", "planaria")
KEYS = ("ready_s", "wall_s", "rank_cpu_s", "first_line_s", "cpu_interpreter_s", "cpu_mpi_s", "cpu_after_mpi_s",
        "mpi_ready_s", "after_mpi_s", "world_wall_s")
GOAL_RATIO = 1.5         # planaria's time to the last rank's communicator / the raw launch's
GOAL_CPU_ADDED = 0.1     # CPU seconds planaria adds to a rank's start


#: the program both launchers run, as a file of its own: the raw launch imports only mpi4py
PROGRAM = """\
import resource, sys, time
def now():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return time.time(), ru.ru_utime + ru.ru_stime
first = now()
mode, out = sys.argv[1], sys.argv[2]
if mode == "planaria":
    import planaria as pl
    from mpi4py import MPI
    mpi = now()
    comm = pl.world()
else:
    from mpi4py import MPI
    mpi = now()
    comm = MPI.COMM_WORLD
t, cpu = now()
import json
with open(f"{out}/{comm.Get_rank()}.json", "w") as f:
    json.dump({"t": t, "cpu": cpu, "t_first": first[0], "cpu_first": first[1], "t_mpi": mpi[0], "cpu_mpi": mpi[1]}, f)
comm.Barrier()
"""

def _command(mode: str, nprocs: int, prog: str, out: str, timeout: float) -> list[str]:
    me = [sys.executable, prog, mode, out]
    if mode == "raw":
        return mpiexec_prefix(nprocs, ft=True) + me
    return [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(nprocs), "--timeout", repr(timeout), "--", *me]


def launch_once(mode: str, nprocs: int, timeout: float) -> dict[str, float]:
    """One launch: seconds to the last rank's communicator, the command's wall time, median rank CPU."""
    with tempfile.TemporaryDirectory(prefix="planaria-start-") as tmp:
        prog, out = Path(tmp, "start.py"), Path(tmp, "out")
        prog.write_text(PROGRAM)
        out.mkdir()
        env = {PLANARIA_HOME: str(Path(tmp) / "home")} if mode == "planaria" else None
        t0 = time.time()
        code, _, stderr = run_bounded(_command(mode, nprocs, str(prog), str(out), timeout * 0.9), env, timeout,
                                      f"{mode} start")
        wall = time.time() - t0
        recs = [json.loads(p.read_text()) for p in out.glob("*.json")]
        if code != 0 or len(recs) != nprocs:
            raise BenchError(f"{mode} launch of {nprocs} ranks: exit {code}, {len(recs)} rank(s) reported\n"
                             f"{stderr[-2000:]}")
        med = statistics.median
        return {"ready_s": max(r["t"] for r in recs) - t0, "wall_s": wall,
                "rank_cpu_s": med(r["cpu"] for r in recs),
                # where the time goes: the launcher until the first rank's program runs, and each
                # rank's CPU before its first line (the interpreter), in MPI's import and
                # initialization, and after it (planaria's world(): its imports, threads and hello)
                "first_line_s": min(r["t_first"] for r in recs) - t0,
                "cpu_interpreter_s": med(r["cpu_first"] for r in recs),
                "cpu_mpi_s": med(r["cpu_mpi"] - r["cpu_first"] for r in recs),
                "cpu_after_mpi_s": med(r["cpu"] - r["cpu_mpi"] for r in recs),
                # the critical path: until the last rank has MPI, then until the last communicator
                # (raw: nothing; planaria: every rank's world(), all started as MPI's initialization
                # ends, sharing the cores), and world()'s wall time per rank
                "mpi_ready_s": max(r["t_mpi"] for r in recs) - t0,
                "after_mpi_s": max(r["t"] for r in recs) - max(r["t_mpi"] for r in recs),
                "world_wall_s": med(r["t"] - r["t_mpi"] for r in recs)}


def run(nprocs: int, repeat: int, timeout: float, progress: Any = None) -> dict[str, Any]:
    """``repeat`` launches of each mode, alternating; medians and planaria's ratios to raw."""
    if nprocs < 1 or repeat < 1 or not timeout > 0:
        raise ValueError(f"--ranks and --repeat must be at least 1 and --timeout positive "
                         f"(got {nprocs}, {repeat}, {timeout:g})")
    import compileall

    import planaria
    from planaria.comm import flight
    from planaria.launch import rankfate
    # ranks run with compiled modules, as after an install (where PYTHONDONTWRITEBYTECODE is set, a
    # source checkout's ranks would otherwise compile planaria each time and time that), and under
    # the C rank recorder, with the flight record's C note, as after a first job (which builds them once)
    compileall.compile_dir(str(Path(planaria.__file__).parent), quiet=1)
    rankfate.recorder_binary()
    flight.note_build()
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for i in range(repeat):
        for mode in MODES:
            runs[mode].append(launch_once(mode, nprocs, timeout))
            if progress:
                progress(f"{mode} launch {i + 1}/{repeat}: {runs[mode][-1]['ready_s']:.2f} s to the last rank")
    med = {m: {k: statistics.median(r[k] for r in rs) for k in KEYS} for m, rs in runs.items()}
    return {"benchmark": "start", "ranks": nprocs, "repeat": repeat, "cores": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "median": med, "runs": runs,
            "ratio_ready": med["planaria"]["ready_s"] / med["raw"]["ready_s"],
            "ratio_wall": med["planaria"]["wall_s"] / med["raw"]["wall_s"],
            "rank_cpu_added_s": med["planaria"]["rank_cpu_s"] - med["raw"]["rank_cpu_s"],
            "goal_ratio_ready": GOAL_RATIO, "goal_cpu_added_s": GOAL_CPU_ADDED}


def show(result: dict[str, Any], as_json: bool = False) -> None:
    """The table of ``run``'s result (or the result as JSON)."""
    if as_json:
        print(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"job start, {result['ranks']} ranks, median of {result['repeat']} "
                    f"({result['cores']} cores, load {result['loadavg'][0]:g})")
    for col in ("launcher", "to the last rank's communicator", "whole command", "CPU per rank"):
        t.add_column(col, justify="right")
    for mode, label in (("raw", "mpiexec + mpi4py"), ("planaria", "planaria run")):
        m = result["median"][mode]
        t.add_row(label, f"{m['ready_s']:.2f} s", f"{m['wall_s']:.2f} s", f"{m['rank_cpu_s']:.3f} s")
    t.add_row("ratio / added", f"{result['ratio_ready']:.2f}×", f"{result['ratio_wall']:.2f}×",
              f"+{result['rank_cpu_added_s']:.3f} s")
    t.add_row("goal", f"≤ {result['goal_ratio_ready']:g}×", "", f"≤ +{result['goal_cpu_added_s']:g} s")
    c = Console()
    c.print(t)
    # where the time above the raw launch goes
    w = Table(title="where the time goes (medians)")
    for col in ("", "mpiexec + mpi4py", "planaria run", "added"):
        w.add_column(col, justify="right")
    raw, pl = result["median"]["raw"], result["median"]["planaria"]
    for key, label in (("first_line_s", "command start → first rank's first line"),
                       ("mpi_ready_s", "command start → last rank past MPI init"),
                       ("after_mpi_s", "then → last rank's communicator"),
                       ("world_wall_s", "a rank's wall time after MPI init (world())"),
                       ("cpu_interpreter_s", "rank CPU: interpreter start"),
                       ("cpu_mpi_s", "rank CPU: mpi4py import + MPI init"),
                       ("cpu_after_mpi_s", "rank CPU: after MPI init (planaria's world())")):
        w.add_row(label, f"{raw[key]:.3f} s", f"{pl[key]:.3f} s", f"{pl[key] - raw[key]:+.3f} s")
    c.print(w)
    n, cores = result["ranks"], result["cores"] or 1
    c.print(f"{n} ranks on {cores} cores: every 0.01 s of CPU added per rank costs about "
            f"{0.01 * n / min(n, cores):.2f} s of start")


def command(
    ranks: int = typer.Option(16, "--ranks", help="Ranks per launch."),
    repeat: int = typer.Option(3, "--repeat", help="Launches of each launcher, alternating."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Job start: planaria run against mpiexec with raw mpi4py, the same program, side by side.

    Per launcher (medians): seconds from the command's start to the last rank holding its world
    communicator, the whole command, and each rank's CPU time by then; planaria's ratios.
    Example: python -m benchmarks start --ranks 16 --repeat 3
    """

    raise typer.Exit(_launch.run_and_show("start", lambda: run(ranks, repeat, timeout, _launch.progress_printer(json_out)),
                                  show, json_out))
