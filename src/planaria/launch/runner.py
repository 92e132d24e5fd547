"""``planaria run``: the checks of its options, the job directory, the attempts (``attempt.py``),
restarts after node failures, and the summary.

With ``--restart N`` a job that ends by a node failure is launched again (at most N times) in the
same job directory on the hosts that are still reachable; see ``docs/launcher.md``.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import sys
import time
from typing import Any

from planaria.util.record import record
from planaria.launch import onhang, rankfate, recoveries, slurm
from planaria.launch.attempt import Attempt, AttemptResult, Job, kill_live
from planaria.launch.errors import LaunchError
from planaria.launch.jobdir import JobDir, _jsonable
from planaria.launch.layout import Layout, initial_layout, load_netns_hosts, probe_host
from planaria.launch.mpiexec import BACKENDS, allocation_hosts, build_mpiexec_cmd, resolve_backend
from planaria.launch.options import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    RunOptions,
    say,
)
from planaria.launch.output import Output
from planaria.launch.supervise import Signals

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_TIMEOUT", "EXIT_USAGE", "LaunchError", "RunOptions",
           "build_summary", "control_problem", "fate_table", "node_failure", "print_summary", "run_job"]

MIN_RESTART_TIME = 2.0       # no restart when less than this is left of --timeout
ATTEMPTS_LOG = "attempts.jsonl"


def _parse_plan(opts: RunOptions, total: int) -> str:
    """Validate ``--inject`` specs; return the plan's spec string ('' when none)."""
    if not opts.inject:
        return ""
    from planaria.inject.plan import Plan  # imported lazily: optional at launch time

    plan = Plan.parse(list(opts.inject))
    plan.validate(total)
    return str(plan.to_spec())


def _python_fix(command: list[str]) -> list[str]:
    """Run a bare ``python``/``python3`` command with this interpreter (the one planaria runs in)."""
    if command and command[0] in ("python", "python3"):
        return [sys.executable] + command[1:]
    return command



def fate_table(fates: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Rank-table rows built from ``rankfate`` records, for ranks that never talked to the controller."""
    rows: dict[int, dict[str, Any]] = {}
    for r, rec in fates.items():
        row: dict[str, Any] = {"rank": r, "host": rec.get("host"), "pid": rec.get("pid"),
                               "reason": rankfate.describe(rec), "ended_by": rec.get("ended_by")}
        if "exit_code" in rec:
            row.update(state="finished", exit_code=rec["exit_code"], end_time=rec.get("end"))
        else:
            row.update(state="lost", fail_time=rec.get("end") or rec.get("ended_at"))
        rows[r] = row
    return rows


def _how(info: dict[str, Any]) -> str:
    if info["state"] == "finished":
        code = info.get("exit_code")
        return info.get("reason") or f"exit {code}"
    return str(info.get("reason") or "")


def build_summary(jobdir: JobDir, opts: RunOptions, table: dict[int, dict[str, Any]], t0: float,
                  status: int, outcome: str, mpiexec_rc: int | None,
                  attempts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The summary.json content."""
    ranks = []
    for r in sorted(table):
        info = table[r]
        when = info.get("fail_time") or info.get("end_time")
        ranks.append({
            "rank": r, "host": info.get("host"), "pid": info.get("pid"), "role": info.get("role"),
            "state": info["state"], "step": info.get("step"), "exit_code": info.get("exit_code"),
            "t": round(when - t0, 3) if when else None, "how": _how(info),
            "injected": info.get("injected"), "ended_by": info.get("ended_by"),
            **({"logical": info["logical"]} if info.get("logical") is not None else {}),
            **({"site": info["site"]} if info.get("site") else {}),
            **({"in_call": info["in_call"]} if info.get("in_call") else {}),
        })
    out = {
        "job": jobdir.id, "jobdir": str(jobdir.path), "status": status, "outcome": outcome,
        "mpiexec_rc": mpiexec_rc, "nranks": opts.nprocs, "spares": opts.spares,
        "elapsed": round(time.time() - t0, 3), "ranks": ranks,
    }
    if attempts is not None:
        out["attempts"] = attempts
        out["restarts"] = max(0, len(attempts) - 1)
    if opts.inject:
        out["unfired"] = _unfired(jobdir, opts)
    _add_recoveries(out, jobdir, table, t0)
    return out


def _add_recoveries(out: dict[str, Any], jobdir: JobDir, table: dict[int, dict[str, Any]], t0: float) -> None:
    """The recoveries and checkpoints a ``Resilient`` program's ranks told the controller (merged,
    ``planaria.launch.recoveries``), and where the job's records are."""
    events = [e for e in jobdir.events() if e.get("type") in ("recovery", "checkpoints")]
    out["recoveries"] = recoveries.merge(events, t0, recoveries.kill_times(table.values()))
    out["checkpoints"] = recoveries.checkpoints(events)
    out["records"] = {"summary": str(jobdir.file("summary.json")), "events": str(jobdir.events_path),
                      "output": str(jobdir.output_path), "attempts": str(jobdir.file(ATTEMPTS_LOG))}


def _unfired(jobdir: JobDir, opts: RunOptions) -> list[str]:
    """The ``--inject`` faults that never acted (the job or the rank ended first), from the event log."""
    from planaria.inject.plan import Plan, PlanError

    fired = [(e["rank"], "hang" if e.get("type") == "hang" else str(e.get("kind")))
             for e in jobdir.events() if e.get("type") in ("inject", "hang") and isinstance(e.get("rank"), int)]
    try:
        return Plan.parse(list(opts.inject)).unfired(opts.nprocs + opts.spares, fired)
    except PlanError:
        return []


def print_summary(summary: dict[str, Any], recovery_table: bool = True) -> None:
    """One-screen rich table of ranks on stderr (then the recoveries, with ``recovery_table``)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True, highlight=False)
    bad = sum(1 for r in summary["ranks"] if r["state"] in ("failed", "lost"))
    console.print(f"planaria job {summary['job']}: {summary['outcome']}, exit {summary['status']}, "
                  f"{bad} rank(s) failed or lost")
    rows = summary["ranks"]
    # the ranks that ended badly, and the spares that took over a logical rank
    shown = [r for r in rows if r["state"] != "finished" or r.get("exit_code") not in (0, None)
             or r.get("role") == "recovered"]
    others = len(rows) - len(shown)
    labels = [recoveries.role_label(r.get("role"), r.get("logical"), r["rank"]) for r in shown]
    roles = any("→" in x for x in labels)      # a role column only when a process took another's place
    table = Table()
    for col in ("rank", "host", *(("role",) if roles else ()), "state", "t+s", "how"):
        table.add_column(col, justify="right" if col in ("rank", "t+s") else "left")
    for r, label in list(zip(shown, labels, strict=True))[:40]:
        style = {"failed": "red", "lost": "red"}.get(r["state"], "yellow" if r.get("exit_code") else "")
        table.add_row(str(r["rank"]), str(r["host"] or "?"), *((label,) if roles else ()), r["state"],
                      "" if r["t"] is None else f"{r['t']:.2f}", r["how"] or "", style=style)
    console.print(table)
    if len(shown) > 40:
        console.print(f"... {len(shown) - 40} more not shown")
    if others:
        console.print(f"{others} other rank(s) finished normally")
    if recovery_table:
        print_recovery_table(summary, console)
    if summary.get("restarts"):
        console.print(f"{summary['restarts']} restart(s); attempts recorded in "
                      f"{(summary.get('records') or {}).get('attempts')}", soft_wrap=True)
    unfired = summary.get("unfired") or []
    if unfired:
        console.print(f"planned fault(s) that never fired (the job or the rank ended first): "
                      f"{'; '.join(unfired[:10])}{' ...' if len(unfired) > 10 else ''}", soft_wrap=True)
    console.print(f"job directory: {summary['jobdir']}")


def print_recovery_table(summary: dict[str, Any], console: Any = None) -> None:
    """The per-recovery table of a ``Resilient`` program (the one ``planaria demo`` prints), with
    the checkpoints' times and where the recoveries are recorded; nothing without recoveries."""
    rows = summary.get("recoveries") or []
    if not rows:
        return
    if console is None:
        from rich.console import Console
        console = Console(stderr=True, highlight=False)
    title = f"{len(rows)} recover{'y' if len(rows) == 1 else 'ies'} of job {summary['job']}"
    recoveries.print_recoveries(console, rows, title,
                                recoveries.checkpoint_line(summary.get("checkpoints") or {}))
    where = (summary.get("records") or {}).get("summary") or f"{summary['jobdir']}/summary.json"
    console.print(f"recoveries recorded in {where} (\"recoveries\"), from the ranks' records in events.jsonl",
                  soft_wrap=True)


# --------------------------------------------------------------------------- hosts and restarts
def node_failure(att: AttemptResult) -> str | None:
    """Why ``att`` counts as ended by a node failure (so it may be restarted), or None.

    The rule: the attempt was not stopped by --timeout or Ctrl-C (an abort by the default event
    handler after a fault counts like a failure), its status is not 0, and
    either mpiexec reported a lost runtime daemon (the runtime then aborts the whole job, so its
    status is not 0 unless every rank had finished), or ranks died of Open MPI 5.0's known crash
    inside a communicator's creation (``AttemptResult.library_crashed``: their processes and node
    are fine, the library's state is not), or no rank finished (said bye, or exited cleanly) and
    there is evidence that processes were lost: a rank was lost or failed, or a rank or mpiexec
    itself was killed by a signal.
    """
    if att.outcome not in ("finished", "failed", "aborted") or att.status == EXIT_OK:
        return None             # "aborted": the default event handler ended it after a fault
    if att.daemon_loss:
        where = f" on {', '.join(att.lost_hosts)}" if att.lost_hosts else ""
        return f"the MPI runtime lost its daemon{where} and aborted the job"
    if att.library_crashed:     # ranks that outlived a failure but not the library: a new mpiexec
        from planaria.diagnose.hangfilter import rank_ranges
        return (f"rank(s) {rank_ranges(att.library_crashed)} crashed inside the MPI library while creating "
                f"a communicator, see docs/recovery.md")
    if any(info["state"] == "finished" for info in att.table.values()):
        return None
    if not att.table and any(rec.get("exit_code") == 0 for rec in att.fates.values()):
        return None             # a program without planaria's runtime: a rank exited cleanly
    bad = sorted(r for r, info in att.table.items() if info["state"] in ("lost", "failed"))
    if bad:
        return f"{len(bad)} rank(s) lost or failed and no rank finished"
    if att.rank_signalled:
        return "a rank was killed by a signal and no rank finished"
    if att.mpiexec_rc is not None and att.mpiexec_rc < 0:
        return f"mpiexec was killed by signal {-att.mpiexec_rc}"
    return None


def gone_hosts(att: AttemptResult, layout: Layout, opts: RunOptions) -> list[str]:
    """Hosts of ``layout`` to drop after ``att``: named in a daemon-loss report, or failing a probe.

    With test hosts the first host also runs mpiexec: if mpiexec was killed by a signal we did not
    send, that host is taken as gone. Inside a Slurm allocation every host is probed through Slurm,
    named or not, and the probes decide: Open MPI starts every node's daemon in one ``srun`` step,
    and when a node's link goes down it may name a healthy node as the one it lost.
    """
    names = layout.names()
    by_slurm = layout.hostset is None and slurm.job_id() is not None and not layout.ssh_agent(opts)
    gone = set() if by_slurm else {h for h in att.lost_hosts if h in names}
    if layout.hostset is not None and names and att.mpiexec_rc is not None and att.mpiexec_rc < 0:
        gone.add(names[0])
    rest = [h for h in names if h not in gone]
    if rest:
        agent = layout.ssh_agent(opts)
        from concurrent.futures import ThreadPoolExecutor    # only after a node loss
        with ThreadPoolExecutor(max_workers=min(16, len(rest))) as pool:
            alive = list(pool.map(lambda h: probe_host(h, hostset=layout.hostset, ssh_agent=agent), rest))
        gone.update(h for h, ok in zip(rest, alive, strict=True) if not ok)
    return [h for h in names if h in gone]


def _misnamed(att: AttemptResult, gone: list[str]) -> str:
    """What to add when the probes found other hosts gone than the runtime named (inside Slurm,
    Open MPI may name a healthy node as the one it lost: its daemons share one ``srun`` step)."""
    named = set(att.lost_hosts)
    if not gone or not named or set(gone) == named:
        return ""
    healthy = sorted(named - set(gone))
    if not healthy:
        return f"; the probes find {', '.join(h for h in gone if h not in named)} gone too"
    return f"; the probes find {', '.join(gone)} gone and {', '.join(healthy)} answering"


def _append_attempt(jobdir: JobDir, record: dict[str, Any]) -> None:
    import json     # after mpiexec has started: not on its way

    line = json.dumps(_jsonable(record), sort_keys=True, default=str) + "\n"
    with open(jobdir.file(ATTEMPTS_LOG), "a", encoding="utf-8") as fh:
        fh.write(line)


def _attempt_record(att: AttemptResult, t0: float) -> dict[str, Any]:
    states: dict[str, int] = {}
    for info in att.table.values():
        states[info["state"]] = states.get(info["state"], 0) + 1
    return {
        "attempt": att.number, "restart": att.number - 1, "hosts": att.hosts, "argv": att.argv,
        "inject": att.inject, "t_start": round(att.t_start - t0, 3), "t_end": round(att.t_end - t0, 3),
        "outcome": att.outcome, "status": att.status, "mpiexec_rc": att.mpiexec_rc,
        "ranks": states, "daemon_loss": att.daemon_loss, "daemon_lost_hosts": att.lost_hosts,
        "node_failure": None, "dropped_hosts": [], "next": "stop",
    }


def control_problem(address: str) -> str | None:
    """Why ``address`` cannot be the controller's address (None if it can).

    Ranks connect to it from other processes, so only ``tcp://HOST:PORT`` (PORT 1-65535, or ``*``
    for any free port) and ``ipc://PATH``. ZeroMQ itself takes a port beyond 65535 modulo 2**16
    and port 0 as any port, so those are refused here rather than bound somewhere unasked for.
    """
    form = "expected tcp://HOST:PORT (PORT 1-65535 or *) or ipc://PATH"
    scheme, sep, rest = address.partition("://")
    if not sep or not rest or any(c.isspace() for c in address):
        return form
    if scheme == "ipc":
        return None
    if scheme != "tcp":
        return f"transport {scheme!r} is not supported ({form})"
    host, colon, port = rest.rpartition(":")
    if not colon or not host or host in ("[", "[]"):
        return f"no HOST:PORT ({form})"
    if port == "*":
        return None
    if not (port.isascii() and port.isdigit()):
        return f"port {port!r} is not a number ({form})"
    if not 1 <= int(port) <= 65535:
        return f"port {port} is out of range 1-65535 (or * for any free port)"
    return None


# --------------------------------------------------------------------------- the job


def _check_numbers(opts: RunOptions) -> None:
    """The numeric options, before anything is created or launched."""
    if opts.nprocs < 1:
        raise LaunchError(f"-n must be at least 1 (got {opts.nprocs})")
    if opts.spares < 0:
        raise LaunchError(f"--spares must be >= 0 (got {opts.spares})")
    if opts.restart < 0:
        raise LaunchError(f"--restart must be >= 0 (got {opts.restart})")
    if opts.timeout is not None and not (math.isfinite(opts.timeout) and opts.timeout > 0):
        # nan compares false with everything and inf never comes: either would leave the job unbounded
        raise LaunchError(f"--timeout must be a positive, finite number of seconds (got {opts.timeout})")
    if not (math.isfinite(opts.start_timeout) and opts.start_timeout >= 0):
        raise LaunchError(f"--start-timeout must be a finite number of seconds >= 0 (got {opts.start_timeout})")


def _check_words(opts: RunOptions) -> None:
    """The options that name hosts, addresses, the command and modes."""
    if opts.hosts is not None and not opts.hosts.strip():
        raise LaunchError("--hosts is empty (expected h1,h2 or h1:2,h2:2; leave it out for the allocation or "
                          "this machine)")
    if opts.netns is not None and not opts.netns.strip():
        raise LaunchError("--netns is empty (expected NAME1,NAME2 of 'planaria hosts up')")
    if opts.control is not None:
        why = control_problem(opts.control)
        if why:
            raise LaunchError(f"bad --control {opts.control!r}: {why}")
    if not opts.command:
        raise LaunchError("no command given (usage: planaria run -n N -- python script.py)")
    if opts.on_hang not in onhang.MODES:
        raise LaunchError(f"--on-hang must be one of {', '.join(onhang.MODES)} (got {opts.on_hang!r})")
    if opts.default_handler not in ("abort", "none"):
        raise LaunchError(f"--default-handler must be abort or none (got {opts.default_handler!r})")
    if opts.backend not in BACKENDS:
        raise LaunchError(f"unknown backend {opts.backend!r} (choose ulfm, sim or auto)")
    if opts.launcher_kills and not opts.rank_fates:
        raise LaunchError("--launcher-kills needs the rank recorder (leave out --no-rank-fates)")
    if opts.netns and (opts.hosts or opts.launch_prefix or opts.ssh_agent):
        raise LaunchError("--netns cannot be combined with --hosts (it sets the hosts and how to reach them)")


@record
class _Plan:
    """What the checks found: how every attempt is launched."""

    backend: str
    total: int
    spec: str                 # the fault plan ('' none)
    command: list[str]
    layout: Layout


def _check(opts: RunOptions) -> _Plan:
    """Every check before anything is created or launched; a problem raises ``LaunchError``."""
    _check_numbers(opts)
    _check_words(opts)
    backend = resolve_backend(opts.backend)
    total = opts.nprocs + opts.spares
    if opts.stdin != "none" and not (re.fullmatch(r"[0-9]+", opts.stdin) and int(opts.stdin) < total):
        raise LaunchError(f"--stdin {opts.stdin!r}: expected a rank in 0..{total - 1} or 'none'")
    try:
        spec = _parse_plan(opts, total)
    except ImportError as exc:
        raise LaunchError(f"fault injection is unavailable: {exc}") from None
    except ValueError as exc:  # PlanError is a ValueError
        raise LaunchError(str(exc)) from None
    if opts.detect_timeouts:
        from planaria.localize.thresholds import Thresholds
        try:
            Thresholds.parse(opts.detect_timeouts)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
    command = _python_fix(list(opts.command))
    # command-line errors (hosts, mpiexec missing) before creating the job
    hostset = load_netns_hosts(opts.netns) if opts.netns else None
    layout = initial_layout(opts, total, hostset)
    build_mpiexec_cmd(command, total, backend=backend, hosts=layout.hosts_arg(opts),
                      mpiexec_args=layout.mpiexec_args(opts))
    local = hostset is None and not opts.hosts and allocation_hosts(os.environ, use_scontrol=False) is None
    if local and not opts.launch_prefix and shutil.which(command[0]) is None:
        raise LaunchError(f"command not found: {command[0]}")
    return _Plan(backend, total, spec, command, layout)


def _create_job(opts: RunOptions, plan: _Plan) -> Job:
    """The job directory and what every attempt shares."""
    t0 = time.time()
    try:
        jobdir = JobDir.create(opts.job_root)
    except OSError as exc:
        raise LaunchError(f"cannot create the job directory: {exc}") from None
    if opts.on_jobdir is not None:
        opts.on_jobdir(jobdir.path)
    deadline = None if opts.timeout is None else t0 + opts.timeout
    return Job(opts=opts, jobdir=jobdir, out=Output(jobdir, opts.json, opts.prog), t0=t0, deadline=deadline,
               signals=Signals(), command=plan.command, total=plan.total, backend=plan.backend, layout=plan.layout)


def run_job(opts: RunOptions) -> int:
    """Run one job under the controller (restarting it after node failures); return the exit status.

    Raises ``LaunchError`` (exit status 2) for wrong options or when the first attempt cannot be launched."""
    plan = _check(opts)
    job = _create_job(opts, plan)
    job.signals.install()
    try:
        att, attempts = _run_attempts(job, plan.spec)
    except LaunchError:
        job.out.close()
        raise
    except BaseException:
        kill_live()                 # never leave the job running without its launcher
        raise
    finally:
        job.signals.restore()
    job.out.close()
    return _finish(job, att, attempts)


def _run_attempts(job: Job, spec: str) -> tuple[AttemptResult, list[dict[str, Any]]]:
    """The attempts, one after the other while node failures end them and restarts are left."""
    attempts: list[dict[str, Any]] = []
    att: AttemptResult | None = None
    number = 1
    while True:
        inject = spec if (number == 1 or job.opts.reinject) else ""
        try:
            att = Attempt(job, number, inject).run()
        except LaunchError as exc:
            if att is None:
                raise
            say(str(exc), job.opts.prog)
            job.out.note(f"restart {number - 1} could not be launched; the job ends")
            return att, attempts
        record = _attempt_record(att, job.t0)
        attempts.append(record)
        note = _restart(job, att, record)
        _append_attempt(job.jobdir, record)
        if note is None:
            return att, attempts
        job.out.note(note)
        number += 1


def _restart(job: Job, att: AttemptResult, record: dict[str, Any]) -> str | None:
    """Whether to launch the job again after ``att``: the line that says so, or None (a line on why
    not when it ended by a node failure or a crash inside the MPI library). Drops the hosts that are gone from the layout; ``record``
    takes the decision."""
    opts, out, layout, number = job.opts, job.out, job.layout, att.number
    why = node_failure(att)
    record["node_failure"] = why
    ended = "Open MPI's known crash" if att.library_crashed and not att.daemon_loss else "a node failure"
    if why is None or opts.restart - (number - 1) <= 0:
        if why is not None and opts.restart > 0:
            out.note(f"attempt {number} ended by {ended} ({why}); no restart left (--restart {opts.restart})")
        return None
    if job.deadline is not None and job.deadline - time.time() < MIN_RESTART_TIME:
        out.note(f"attempt {number} ended by {ended} ({why}); no time left to restart")
        return None
    if job.signals.interrupted.is_set():
        return None
    gone = gone_hosts(att, layout, opts) if layout.hosts else []
    record["dropped_hosts"] = gone
    if layout.hosts and len(gone) >= len(layout.hosts):
        out.note(f"attempt {number} ended by {ended} ({why}); "
                 f"no host left to restart on (gone: {', '.join(gone)})")
        return None
    if gone:
        layout.drop(set(gone))
    why += _misnamed(att, gone)
    record["next"] = "restart"
    where = ", ".join(layout.names()) if layout.hosts else "this machine"
    dropped = f"; dropped {', '.join(gone)}" if gone else ""
    return (f"attempt {number} ended by {ended} ({why}){dropped}; "
            f"restart {number} of {opts.restart} on {where} with {opts.nprocs} rank(s)"
            + (f" + {opts.spares} spare(s)" if opts.spares else ""))


def _finish(job: Job, att: AttemptResult, attempts: list[dict[str, Any]]) -> int:
    """Summary and manifest written, the end told on the console; the job's exit status."""
    import json     # after mpiexec has started: not on its way

    jobdir, opts = job.jobdir, job.opts
    rows = att.table or fate_table(att.fates)   # a program without planaria's runtime: no rank talked
    for r, row in rows.items():                 # a crashed rank: where its Python was
        if row.get("state") in ("failed", "lost") and job.out.crashes.error(r):
            if not row.get("site"):
                row["site"] = job.out.crashes.site(r)
            call = job.out.crashes.mpi_call(r)
            if call:                            # it died inside the MPI library, in this call
                row["in_call"] = call
    summary = build_summary(jobdir, opts, rows, job.t0, att.status, att.outcome, att.mpiexec_rc, attempts)
    jobdir.write_summary(summary)
    jobdir.update_manifest(status=att.outcome, exit_status=att.status, mpiexec_rc=att.mpiexec_rc,
                           attempts=len(attempts), end=time.time())
    if att.unanswered:                          # the abort ended every rank first: say what the job's record says
        from planaria.comm.flight import read_dir
        from planaria.diagnose.postmortem import postmortem
        report = postmortem(jobdir.events(), jobdir.id, summary=summary["ranks"], flight=read_dir(jobdir.path))
        for line in report["text"].rstrip().splitlines():
            say(line, opts.prog)
    _tell_end(jobdir, opts, att, summary, len(attempts))
    if opts.json and opts.emit_summary:
        print(json.dumps(_jsonable(summary), indent=2, sort_keys=True), flush=True)
    return att.status


def _tell_end(jobdir: JobDir, opts: RunOptions, att: AttemptResult, summary: dict[str, Any], attempts: int) -> None:
    """The console's account of a job that did not end well, or of restarts and unfired faults."""
    abnormal = att.status != EXIT_OK or any(
        r["state"] != "finished" or r.get("exit_code") not in (0, None) for r in summary["ranks"])
    if abnormal:
        if summary["ranks"]:
            print_summary(summary, opts.recovery_table)
            if not att.unanswered:
                _root_causes(jobdir, summary, opts.prog)
        else:
            say(f"job {jobdir.id} {att.outcome} (exit {att.status}); job directory: {jobdir.path}", opts.prog)
    else:
        if opts.recovery_table:
            print_recovery_table(summary)
        if attempts > 1:
            say(f"job {jobdir.id} finished after {attempts - 1} restart(s), attempts recorded in "
                f"{jobdir.file(ATTEMPTS_LOG)}; job directory: {jobdir.path}", opts.prog)
    if not abnormal and summary.get("unfired"):
        say(f"planned fault(s) that never fired (the job ended first): {'; '.join(summary['unfired'][:10])}"
            f"{' ...' if len(summary['unfired']) > 10 else ''}", opts.prog)


def _root_causes(jobdir: JobDir, summary: dict[str, Any], prog: str) -> None:
    """After the table of a job whose ranks failed: the post-mortem's root-cause lines (at most
    three) and the command for the whole report, so the console names the cause, not only the
    ranks that ended."""
    if not any(r.get("state") in ("failed", "lost") for r in summary["ranks"]):
        return
    from planaria.comm.flight import read_dir
    from planaria.diagnose.postmortem import postmortem
    try:
        report = postmortem(jobdir.events(), jobdir.id, summary=summary["ranks"], flight=read_dir(jobdir.path))
    except Exception:  # noqa: BLE001 - the summary above stands on its own
        return
    causes = [ln for ln in str(report.get("text") or "").splitlines() if ln.startswith("root cause:")]
    for line in causes[:3]:
        say(line, prog)
    if report.get("library_crash"):            # the ranks a failure took down inside Open MPI
        say(str(report["library_crash"]), prog)
    if causes:
        say(f"the whole report: planaria diagnose {jobdir.id}", prog)


