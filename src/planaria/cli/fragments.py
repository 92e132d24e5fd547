"""``planaria fragments run``: launch a fragmented program (planaria.fragments.run) with its runtime options."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from planaria.cli._common import launch_job
from planaria.util.env import (
    PLANARIA_BALANCER,
    PLANARIA_BALANCER_CAP,
    PLANARIA_FRAGMENT_THREADS,
    PLANARIA_JOBS_DIFFERENCE_RATIO,
    PLANARIA_JOBS_LEFT_THRESHOLD,
    PLANARIA_TERMINATION,
    PLANARIA_TRACE,
    PLANARIA_TRACE_DIR,
    PLANARIA_TRACE_FLUSH_BYTES,
)

app = typer.Typer(help="Run fragmented programs (planaria.fragments) on MPI ranks.", no_args_is_help=True)
_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("run", context_settings=_SETTINGS)
def run(
    ctx: typer.Context,
    workers: int = typer.Option(..., "-n", "--workers", help="Worker ranks (with --balancer one more rank is started)."),
    balancer: bool = typer.Option(False, "--balancer/--no-balancer", help="Dedicate one extra rank to the centralized dynamic load balancer."),
    jobs_left: int = typer.Option(2, "--jobs-left-threshold", help="JOBS_LEFT_THRESHOLD: fewest outstanding CFs for which the balancer acts."),
    ratio: float = typer.Option(0.2, "--jobs-difference-ratio", help="JOBS_DIFFERENCE_RATIO (0..1): least (H2-H1)/H2 between the most and least loaded workers that triggers a move."),
    cap: str = typer.Option("mean", "--receiver-cap", help="mean: the paper's rule (a receiver ends at most at the mean load); donor: a CF moves when it ends sooner at the receiver, which holds at most one CF beyond its free slots (moves work even when few CFs are outstanding)."),
    threads: int = typer.Option(2, "--threads", help="CFs run at once on each worker rank."),
    termination: str = typer.Option("safra", "--termination", help="When the token ring decides: safra (after one quiet round, workers + 1 visits) or paper (after 2 x workers visits, LuNA's threshold)."),
    trace_dir: Optional[str] = typer.Option(None, "--trace-dir", help="Where the per-rank traces go (default: <job dir>/trace)."),
    trace: bool = typer.Option(True, "--trace/--no-trace", help="Write traces (needed by 'planaria trace analyze')."),
    flush_bytes: int = typer.Option(256 * 1024, "--trace-flush-bytes", help="Append a rank's buffered trace to its file at this size."),
    timeout: float = typer.Option(3600.0, "--timeout", help="Stop the job after S seconds (exit 124)."),
    json_out: bool = typer.Option(False, "--json", help="Print the job summary as JSON on stdout."),
) -> None:
    """Launch PROGRAM (after --) on ranks; it calls planaria.fragments.run(main) and picks these options up.

    A run ends by itself when every CF finished, or when the remaining CFs all wait for data that
    no CF will produce (hung): rank 0 then prints the analyzer's report, and
    'planaria trace analyze <job dir>' prints it again (--all, --json).

    Examples:

      planaria fragments run -n 4 -- python prog.py

      planaria fragments run -n 8 --balancer --jobs-difference-ratio 0.3 -- python prog.py

      planaria trace analyze .planaria/jobs/<id>

    Same as 'planaria run -n N -- python prog.py' with PLANARIA_BALANCER, PLANARIA_JOBS_LEFT_THRESHOLD,
    PLANARIA_JOBS_DIFFERENCE_RATIO, PLANARIA_FRAGMENT_THREADS, PLANARIA_TRACE_DIR, PLANARIA_TRACE and
    PLANARIA_TRACE_FLUSH_BYTES set (the program may override them in its fr.run call).

    Exit status: 0 finished; 1 the program hung or failed (read from the ranks' traces in the job
    directory; with --no-trace or a trace directory chosen by the program only the job's own
    status counts); 2 usage error; 124 --timeout.
    """
    command = list(ctx.args)
    if command and command[0] == "--":
        command = command[1:]
    problem = _problem(command, workers, balancer, ratio, cap, termination, jobs_left, threads, flush_bytes)
    if problem:
        print(f"planaria fragments run: {problem}", file=sys.stderr)
        raise typer.Exit(2)
    os.environ.update({
        PLANARIA_BALANCER: "1" if balancer else "0",
        PLANARIA_JOBS_LEFT_THRESHOLD: str(jobs_left),
        PLANARIA_JOBS_DIFFERENCE_RATIO: repr(ratio),
        PLANARIA_BALANCER_CAP: cap,
        PLANARIA_FRAGMENT_THREADS: str(threads),
        PLANARIA_TERMINATION: termination,
        PLANARIA_TRACE: "1" if trace else "0",
        PLANARIA_TRACE_FLUSH_BYTES: str(flush_bytes),
    })
    if trace_dir:
        os.environ[PLANARIA_TRACE_DIR] = os.path.abspath(trace_dir)
    from planaria.launch.options import RunOptions
    jobdirs: list[Path] = []
    opts = RunOptions(command=command, nprocs=workers + (1 if balancer else 0), timeout=timeout, json=json_out,
                      prog="planaria fragments run", on_jobdir=jobdirs.append)
    code = launch_job(opts)
    # the traces of this run: the directory given, else the job directory's trace/
    trace_dir = trace_dir or (str(jobdirs[0] / "trace") if jobdirs else None)
    raise typer.Exit(_traced_status(code, trace, trace_dir))


def _problem(command: list[str], workers: int, balancer: bool, ratio: float, cap: str, termination: str,
             jobs_left: int, threads: int, flush_bytes: int) -> str | None:
    """What is wrong with the options of ``fragments run`` (None: nothing)."""
    if not command:
        return "give the program after --, e.g. -- python prog.py"
    if command[0].startswith("-"):
        # options unknown here are passed on as the command's first words
        return (f"no such option: {command[0]} (the program goes after --; "
                f"try 'planaria fragments run --help')")
    if workers < 1:
        return "-n must be at least 1"
    if balancer and workers < 2:
        return "--balancer needs at least 2 workers (-n 2)"
    if not 0.0 <= ratio <= 1.0:
        return f"--jobs-difference-ratio must be in [0, 1], got {ratio}"
    if cap not in ("mean", "donor"):
        return f"--receiver-cap must be mean or donor, got {cap!r}"
    if termination not in ("safra", "paper"):
        return f"--termination must be safra or paper, got {termination!r}"
    if jobs_left < 0 or threads < 1 or flush_bytes < 0:
        return "--jobs-left-threshold and --trace-flush-bytes must be >= 0, --threads >= 1"
    return None


def _traced_status(code: int, trace: bool, trace_dir: str | None) -> int:
    """The job's exit status, made 1 when the ranks' traces say the program hung or failed."""
    if code == 0 and trace:
        status = _run_status(trace_dir)
        if status not in (None, "finished"):
            print(f"planaria fragments run: the program {status} (report above; "
                  f"'planaria trace analyze' explains it again)", file=sys.stderr)
            return 1
    elif code != 0 and trace and _run_status(trace_dir) == "killed":
        print("planaria fragments run: the ranks were ended by a signal; 'planaria trace analyze' shows the "
              "CFs that never finished and what they awaited", file=sys.stderr)
    return code


def _run_status(trace_dir: str | None) -> str | None:
    """The worst status the ranks' traces end with (failed, hung, timeout, killed) for this run; None if unknown.

    A hung program exits normally on every rank (the runtime detected the hang and stopped), so
    the job's exit status alone would say "finished".
    """
    from planaria.trace.writer import read_traces
    if trace_dir is None:
        return None
    try:
        statuses = {r.get("status") for r in read_traces(trace_dir) if r.get("k") == "exit"}
    except (FileNotFoundError, ValueError):
        return None
    for worst in ("failed", "hung", "timeout", "killed"):
        if worst in statuses:
            return worst
    return "finished" if statuses else None
