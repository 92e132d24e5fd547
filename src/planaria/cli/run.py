"""``planaria run``: launch an MPI job under the planaria controller.

The options and their help are declared here; the work is in ``planaria.cli.runjob``, which also
reads the common command line without typer (``runjob.OPTIONS`` mirrors these options)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from planaria.cli._common import app

_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def run(
    ctx: typer.Context,
    nprocs: int = typer.Option(..., "-n", "--np", help="Number of working ranks N."),
    spares: int = typer.Option(0, "--spares", help="Extra spare processes K (N+K are launched)."),
    backend: str = typer.Option("auto", "--backend", help="Failure backend: ulfm, sim or auto (auto = ulfm)."),
    inject: list[str] = typer.Option([], "--inject", help="Fault to inject, e.g. 'kill:rank=2,iter=10'. Repeatable."),
    timeout: float = typer.Option(3600.0, "--timeout", help="Stop the whole job after S seconds (exit 124)."),
    start_timeout: float = typer.Option(300.0, "--start-timeout", help="Stop the job when no rank has started S seconds after the launch (exit 2): the MPI launcher could not start its daemons or waits for resources. A rank has started once its recorder noted it (in the job directory) or it reached planaria's runtime. 0: no bound; off with --no-rank-fates."),
    hosts: Optional[str] = typer.Option(None, "--hosts", help="Hosts: h1,h2 or h1:2,h2:2 (default: the Slurm/PBS allocation, else this machine)."),
    json_out: bool = typer.Option(False, "--json", help="Print the job summary as JSON on stdout (application output goes to stderr)."),
    mpiexec_arg: list[str] = typer.Option([], "--mpiexec-arg", help="Extra raw argument for mpiexec. Repeatable."),
    control: Optional[str] = typer.Option(None, "--control", help="Controller address (default ipc://<jobdir>/control.sock; e.g. tcp://127.0.0.1:*)."),
    restart: int = typer.Option(0, "--restart", help="After a node failure, relaunch the job at most N times on the hosts left (same job directory; the application resumes from its file checkpoints)."),
    reinject: bool = typer.Option(False, "--reinject", help="Pass the --inject plan to restarted attempts too (default: only the first attempt injects)."),
    netns: Optional[str] = typer.Option(None, "--netns", help="Run on the test hosts NAME1,NAME2 made by 'planaria hosts up' (network namespaces)."),
    detect: bool = typer.Option(True, "--detect/--no-detect", help="Run-time error detection in every rank: message timers, ping/status/vote probes, incidents in the job directory."),
    detect_timeouts: Optional[str] = typer.Option(None, "--detect-timeouts", help="Message timer thresholds in seconds, e.g. p2p=10,coll=20,remote=1.5,slow=0.25,probe=3 (see docs/localize.md)."),
    diagnose_on_timeout: bool = typer.Option(True, "--diagnose-on-timeout/--no-diagnose-on-timeout", help="Before a --timeout kill or a default-handler abort, collect every rank's state and write a diagnosis."),
    launcher_kills: bool = typer.Option(False, "--launcher-kills", help="The launcher sends the --inject plan's timed kills (kill:rank=R,time=T, random kills) itself, through the recorders' pids: for a program without planaria's runtime, whose ranks have no injector. Time counts from when every rank had started."),
    rank_fates: bool = typer.Option(True, "--rank-fates/--no-rank-fates", help="Start every rank under a small recorder process that notes how it ended (exit code or signal) and ends what outlives mpiexec: with ULFM, mpiexec exits 0 when ranks are killed. --no-rank-fates where remote hosts lack this Python installation."),
    stdin: str = typer.Option("0", "--stdin", metavar="RANK", help="The rank that reads this command's standard input, as with mpiexec (default 0), or none. Through the rank recorder, on this host."),
    on_hang: str = typer.Option("report", "--on-hang", metavar="report|diagnose|abort", help="When run-time detection confirms a hang or deadlock: report (one line, the job runs on), diagnose (the line and a full diagnosis, the job runs on) or abort (diagnosis, then the job is stopped, exit 124). Every confirmed incident is announced with one line."),
    node_agents: Optional[bool] = typer.Option(None, "--node-agents/--no-node-agents", help="Ranks reach the controller through one agent per host (started by the host's first rank): the controller holds one connection per host instead of one per rank, heartbeats are summed up per host, an event goes out once per host, and pids are looked at on their own host. Default: on when the job has hosts other than this one (see docs/launcher.md)."),
    world: bool = typer.Option(False, "--world", help="Run an unchanged mpi4py program with planaria's runtime: its MPI.COMM_WORLD becomes planaria's world communicator (python PROG becomes python -m planaria PROG; see docs/adopt.md)."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE.png", help="At the end, write a PNG of the job's timeline: per rank, when it worked or waited as a spare, its checkpoints, the failures and each recovery's phases (revoke+shrink, substitution, restore), from the job record (needs matplotlib: pip install 'planaria[plot]'; see docs/recovery.md)."),
    default_handler: str = typer.Option("abort", "--default-handler", help="What the ranks' default event handler does with a process-failure event no other handler completed: abort (end the job cleanly, exit 1; for a program without planaria's runtime, the launcher ends the job when a rank dies, with that rank's status) or none (as plain ULFM; see docs/events.md)."),
) -> None:
    """Run an MPI program (the command after --) with failure tracking.

    Every rank's output comes back tagged with its rank: [R] for stdout, [R!] for stderr.
    A job directory .planaria/jobs/<id>/ (or $PLANARIA_HOME/jobs) keeps the manifest, events,
    output and summary. When a rank fails, a summary tells which rank, where, when and how.

    Examples:

      planaria run -n 4 -- python app.py --steps 100

      planaria run -n 4 --spares 1 --inject 'kill:rank=2,iter=50' -- python app.py

      planaria run -n 3 --spares 1 --inject 'kill:rank=1,iter=20' --plot timeline.png -- python app.py

      planaria run -n 8 --hosts node1:4,node2:4 --timeout 600 -- python app.py

      planaria run -n 4 --json -- python app.py > summary.json

      echo 1000000 | planaria run -n 4 -- python cpi.py      (standard input goes to rank 0)

      planaria run -n 4 --world -- python cpi.py       (an unchanged mpi4py program, with planaria's runtime)

      planaria run -n 4 --netns pl-h1,pl-h2 --restart 1 -- python app.py

    While it runs, 'planaria diagnose JOB' (or 'kill -USR1 <planaria run pid>') collects every
    rank's state and names the ranks and call sites a hang comes from.

    With --restart N, a job that ends by a node failure (no rank finished, and mpiexec reported a
    lost daemon or ranks were lost) is launched again in the same job directory on the hosts that
    still answer, at most N times; --timeout bounds all attempts together.

    Exit status (of the last attempt): 0 finished; the survivors' exit code if non-zero; 1 no rank
    finished (or the default event handler aborted the job); 2 usage or launch error (or no rank
    started by --start-timeout); 124 --timeout
    (or a hang stopped by --on-hang abort);
    130 interrupted (Ctrl-C); 143 / 129 ended by SIGTERM / SIGHUP (the job is torn down as for Ctrl-C). A program without planaria's runtime (plain mpi4py): the lowest rank
    that ended badly decides, 128 + its signal or its exit code, as mpiexec without ULFM would.
    """
    from planaria.cli.runjob import start
    raise typer.Exit(start(ctx.params, list(ctx.args)))


app.command("run", context_settings=_SETTINGS)(run)
