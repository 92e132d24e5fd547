"""The options of one ``planaria run``, the exit statuses it gives, and its one-line messages."""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from planaria.util.record import field, record

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130


@record
class RunOptions:
    """Options of one ``planaria run``."""

    command: list[str]
    nprocs: int
    spares: int = 0
    backend: str = "auto"
    inject: list[str] = field(default_factory=list)
    timeout: float | None = 3600.0
    start_timeout: float = 300.0  # end the job when no rank has started this long after the launch (0: never)
    hosts: str | None = None
    json: bool = False
    emit_summary: bool = True   # with json: print the summary (a caller embedding it in its own JSON says False)
    prog: str = "planaria run"  # the command named in error lines (planaria demo runs its job through here)
    mpiexec_args: list[str] = field(default_factory=list)
    launch_prefix: list[str] = field(default_factory=list)
    ssh_agent: str | None = None
    control: str | None = None
    job_root: str | None = None
    restart: int = 0            # relaunch at most this many times after a node failure
    reinject: bool = False      # pass the --inject plan to restarted attempts too
    netns: str | None = None    # NAME1,NAME2: run on the test hosts made by `planaria hosts up`
    detect: bool = True         # run-time error detection in every rank (message log, timers, probes)
    detect_timeouts: str | None = None   # thresholds, see planaria.localize.thresholds
    diagnose_on_timeout: bool = True   # collect and analyze the global state before a --timeout kill
    default_handler: str = "abort"     # what the ranks' default event handler does with a fault: abort | none
    rank_fates: bool = True     # run every rank under planaria.launch.rankfate (how it ended, no orphans)
    launcher_kills: bool = False   # the launcher sends the plan's timed kills (programs without the runtime)
    on_jobdir: Callable[[Path], None] | None = None   # told the job directory once it exists
    recovery_table: bool = True    # the end summary prints the recoveries (planaria demo prints its own)
    stdin: str = "none"         # the rank that reads the launcher's standard input, or none
    on_hang: str = "report"     # a detected hang: report (a line), diagnose (and run on) or abort (see onhang.py)
    node_agents: bool | None = None   # ranks reach the controller through one agent per host (launch/nodeagent.py);
                                      # None: when the job has hosts other than this one


def say(msg: str, prog: str = "planaria run") -> None:
    """``PROG: MSG`` on stderr: the launcher's one-line messages."""
    try:
        print(f"{prog}: {msg}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass            # a closed terminal or pipe (``planaria run ... | head``) must not stop the teardown
