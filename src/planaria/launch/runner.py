"""``planaria run``: job directory, controller, mpiexec, output streaming, teardown, summary.

With ``--restart N`` a job that ends by a node failure is launched again (at most N times) in the
same job directory on the hosts that are still reachable; see ``docs/launcher.md``.
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import socket
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from planaria.launch import onhang, rankfate, sessiondirs, shmfiles, slurm
from planaria.launch.crashsite import CrashSites
from planaria.launch.plaininject import PlainKills
from planaria.launch.controller import Controller
from planaria.launch.jobdir import JobDir, _jsonable
from planaria.launch.mpiexec import (
    BACKENDS,
    LaunchError,
    allocation_hosts,
    build_mpiexec_cmd,
    parse_hosts,
    resolve_backend,
)
from planaria.util.env import (
    PLANARIA_BACKEND,
    PLANARIA_CONTROL_URI,
    PLANARIA_DETECT,
    PLANARIA_DETECT_TIMEOUTS,
    PLANARIA_EVENTS_DEFAULT,
    PLANARIA_HOSTS_DIR,
    PLANARIA_INJECT,
    PLANARIA_JOB_DIR,
    PLANARIA_NODE_AGENTS,
    PLANARIA_NRANKS,
    PLANARIA_RESTART,
    PLANARIA_SECRET_FILE,
    PLANARIA_SPARES,
    PLANARIA_T0,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
KILL_GRACE = 3.0
PROBE_TIMEOUT = 8.0          # seconds for one host probe after a failed attempt
MIN_RESTART_TIME = 2.0       # no restart when less than this is left of --timeout
ATTEMPTS_LOG = "attempts.jsonl"

_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>: ?(.*)$", re.DOTALL)


@dataclass
class RunOptions:
    """Options of one ``planaria run``."""

    command: list[str]
    nprocs: int
    spares: int = 0
    backend: str = "auto"
    inject: list[str] = field(default_factory=list)
    timeout: float | None = 3600.0
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
    stdin: str = "none"         # the rank that reads the launcher's standard input, or none
    on_hang: str = "report"     # a detected hang: report (a line), diagnose (and run on) or abort (see onhang.py)
    node_agents: bool | None = None   # ranks reach the controller through one agent per host (launch/nodeagent.py);
                                      # None: when the job has hosts other than this one


def _err(msg: str, prog: str = "planaria run") -> None:
    try:
        print(f"{prog}: {msg}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass            # a closed terminal or pipe (``planaria run ... | head``) must not stop the teardown


#: mpiexec processes of attempts still running, with their controllers: an unexpected error in the
#: launcher ends them (``run_job``) instead of leaving the job running without its launcher
_LIVE: dict[int, tuple[subprocess.Popen[bytes], Controller]] = {}


def tag_line(line: str) -> tuple[int | None, str, str]:
    """Split an Open MPI ``--output tag`` line into (rank, stream, text); rank None if untagged."""
    m = _TAG.match(line)
    if not m:
        return None, "", line
    return int(m.group(2)), m.group(3), m.group(4)


# Open MPI (PRRTE) messages telling that a host's runtime daemon is gone; the job is then aborted.
_DAEMON_LOSS = ("lost communication with a remote daemon", "daemon failed to report back",
                # under Slurm (PRRTE's plm/slurm): a node's daemon step ended, e.g. its link went down
                "launching the per-node daemon", "srun returned non-zero exit status")
_DAEMON_HOST = (re.compile(r"^\s*Remote daemon:.*\bon node (\S+)"),
                re.compile(r"^\s*Remote host:\s+(\S+)"))
_RANK_SIGNALLED = re.compile(r"process rank \d+ with PID \d+ on node \S+ exited on signal")


class _RuntimeWatch:
    """Picks daemon-loss reports (and the hosts they name) out of mpiexec's untagged output."""

    def __init__(self) -> None:
        self.daemon_loss = False
        self.lost_hosts: list[str] = []
        self.rank_signalled = False
        self._armed = 0

    def feed(self, line: str) -> None:
        low = line.lower()
        if any(k in low for k in _DAEMON_LOSS):
            self.daemon_loss = True
            self._armed = 12      # the host names follow within a few lines
            return
        if _RANK_SIGNALLED.search(line):
            self.rank_signalled = True
        if self._armed:
            self._armed -= 1
            for rx in _DAEMON_HOST:
                m = rx.match(line)
                if m and m.group(1) not in self.lost_hosts:
                    self.lost_hosts.append(m.group(1))


class _Output:
    """Streams mpiexec's output to our terminal, re-tagged, and mirrors it to output.log."""

    def __init__(self, jobdir: JobDir, json_mode: bool, prog: str = "planaria run") -> None:
        self.prog = prog               # names the command in the launcher's own lines
        self._log = open(jobdir.output_path, "a", encoding="utf-8", errors="replace")
        self._lock = threading.Lock()
        self._json = json_mode
        self.watch = _RuntimeWatch()
        self.sink: Any = None          # the controller's io(rank, channel, text), for attached tools
        self.crashes = CrashSites()    # where a rank's Python crashed (faulthandler's trace)

    def pump(self, stream: Any, is_err: bool) -> None:
        """Copy every line of ``stream`` (until EOF)."""
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            rank, kind, text = tag_line(line)
            sink = self.sink
            if sink is not None and rank is not None:
                sink(rank, kind, text)
            if rank is None:
                with self._lock:
                    self.watch.feed(line)
                shown, dest = line, sys.stderr if (is_err or self._json) else sys.stdout
            elif kind == "stdout":
                shown, dest = f"[{rank}] {text}", sys.stderr if self._json else sys.stdout
            else:
                self.crashes.feed(rank, text)
                shown, dest = f"[{rank}!] {text}", sys.stderr
            self.write(shown, dest)
        stream.close()

    def write(self, line: str, dest: TextIO | None) -> None:
        """Print ``line`` to ``dest`` (if any) and append it to output.log."""
        with self._lock:
            if dest is not None:
                try:
                    dest.write(line + "\n")
                    dest.flush()
                except (OSError, ValueError):
                    pass
            self._log.write(line + "\n")
            self._log.flush()

    def close(self) -> None:
        """Close output.log."""
        with self._lock:
            self._log.close()


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


def _stdin_pipe(opts: RunOptions, jobdir: JobDir, number: int, penv: dict[str, str]) -> Path | None:
    """The named pipe through which ``--stdin R`` gives rank R the launcher's standard input.

    mpiexec forwards stdin itself, but Open MPI 5.0's PRRTE loses it with ``--with-ft ulfm``; the
    rank recorder (``rankfate``) of rank R opens this pipe as the rank's fd 0 instead, when it runs
    on this host. A restarted attempt cannot read again what the first consumed: it gets none."""
    if opts.stdin == "none" or number != 1 or not opts.rank_fates:
        return None
    fifo = jobdir.path / "stdin.fifo"
    try:
        os.mkfifo(fifo, 0o600)
    except OSError as exc:
        _err(f"--stdin: cannot create {fifo}: {exc.strerror}; the ranks get no standard input", opts.prog)
        return None
    penv[rankfate.STDIN_ENV] = f"{opts.stdin}:{os.uname().nodename}:{fifo}"
    return fifo


def _pump_stdin(fifo: Path) -> None:
    """Copy the launcher's standard input into ``fifo`` until EOF (a daemon thread: it may wait
    forever for a rank that never opens the pipe or never reads)."""
    try:
        out = os.open(fifo, os.O_WRONLY)
    except OSError:
        return
    try:
        if os.isatty(0) and os.tcgetpgrp(0) != os.getpgrp():
            return                  # started in the background: reading the terminal would stop us
        while True:
            data = os.read(0, 1 << 16)
            if not data:
                break
            os.write(out, data)
    except OSError:
        pass                        # no stdin, or the rank closed its end
    finally:
        os.close(out)


class MpiexecOutlived:
    """Notices an mpiexec still running ``grace`` s after every rank's process ended (the rank
    recorders' records say so): Open MPI 5.0's prterun was seen to stay so until the job's
    timeout after ranks ended on a documented non-zero status. Reads the records at most once a second."""

    def __init__(self, total: int, grace: float = 5.0) -> None:
        self.total, self.grace = total, grace
        self._next = 0.0
        self._since: float | None = None

    def check(self, now: float, fates: Callable[[], dict[int, dict[str, Any]]]) -> bool:
        """True once every rank has ended and mpiexec has outlived them by ``grace`` seconds."""
        if now < self._next:
            return False
        self._next = now + 1.0
        recs = fates()
        if len(recs) < self.total or any("end" not in r for r in recs.values()):
            self._since = None
            return False
        if self._since is None:
            self._since = max(float(r["end"]) for r in recs.values())
        return now - self._since >= self.grace


_SIGNUMS = {"SIGTERM": int(signal.SIGTERM), "SIGHUP": int(signal.SIGHUP)}


def _ended_by_signal(interrupted: threading.Event, signum: int) -> None:
    """SIGTERM/SIGHUP to the launcher: end the job as Ctrl-C does, and say which signal it was."""
    interrupted.by = signal.Signals(signum).name     # type: ignore[attr-defined]
    interrupted.set()


def _kill_all(proc: subprocess.Popen[bytes], controller: Controller) -> None:
    """SIGTERM the mpiexec process group, SIGKILL it after a grace period, SIGKILL known ranks."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
            if sig == signal.SIGTERM:
                # the group leader left; make sure nothing of the group stays behind
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            break
        except subprocess.TimeoutExpired:
            continue
    for pid in controller.pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def exit_status(table: dict[int, dict[str, Any]], mpiexec_rc: int | None,
                fates: dict[int, dict[str, Any]] | None = None) -> int:
    """Job exit status from the rank table; when no rank reported, from how the ranks' processes
    ended (``rankfate.status_of``), else from mpiexec's status."""
    if not table:
        by_fates = rankfate.status_of(fates or {})
        if by_fates is not None:
            return by_fates
        if mpiexec_rc is None:
            return EXIT_FAILED
        return 128 - mpiexec_rc if mpiexec_rc < 0 else mpiexec_rc
    finished = [r for r in sorted(table) if table[r]["state"] == "finished"]
    if not finished:
        return EXIT_FAILED
    for r in finished:
        code = table[r].get("exit_code")
        if isinstance(code, int) and code != 0:
            return code
    return EXIT_OK


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
    return out


def _unfired(jobdir: JobDir, opts: RunOptions) -> list[str]:
    """The ``--inject`` faults that never acted (the job or the rank ended first), from the event log."""
    from planaria.inject.plan import Plan, PlanError

    fired = [(e["rank"], "hang" if e.get("type") == "hang" else str(e.get("kind")))
             for e in jobdir.events() if e.get("type") in ("inject", "hang") and isinstance(e.get("rank"), int)]
    try:
        return Plan.parse(list(opts.inject)).unfired(opts.nprocs + opts.spares, fired)
    except PlanError:
        return []


def print_summary(summary: dict[str, Any]) -> None:
    """One-screen rich table of ranks on stderr."""
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True, highlight=False)
    bad = sum(1 for r in summary["ranks"] if r["state"] in ("failed", "lost"))
    console.print(f"planaria job {summary['job']}: {summary['outcome']}, exit {summary['status']}, "
                  f"{bad} rank(s) failed or lost")
    table = Table()
    for col in ("rank", "host", "state", "t+s", "how"):
        table.add_column(col, justify="right" if col in ("rank", "t+s") else "left")
    rows = summary["ranks"]
    shown = [r for r in rows if r["state"] != "finished" or r.get("exit_code") not in (0, None)]
    others = len(rows) - len(shown)
    for r in shown[:40]:
        style = {"failed": "red", "lost": "red", "finished": "yellow"}.get(r["state"], "")
        table.add_row(str(r["rank"]), str(r["host"] or "?"), r["state"],
                      "" if r["t"] is None else f"{r['t']:.2f}", r["how"] or "", style=style)
    console.print(table)
    if len(shown) > 40:
        console.print(f"... {len(shown) - 40} more not shown")
    if others:
        console.print(f"{others} other rank(s) finished normally")
    unfired = summary.get("unfired") or []
    if unfired:
        console.print(f"planned fault(s) that never fired (the job or the rank ended first): "
                      f"{'; '.join(unfired[:10])}{' ...' if len(unfired) > 10 else ''}", soft_wrap=True)
    console.print(f"job directory: {summary['jobdir']}")


# --------------------------------------------------------------------------- hosts and restarts


def hosts_state_root() -> Path:
    """Where ``planaria hosts up`` keeps its host sets (``$PLANARIA_HOSTS_DIR``)."""
    return Path(os.environ.get(PLANARIA_HOSTS_DIR, "/run/planaria-hosts"))


def load_netns_hosts(spec: str) -> Any:
    """The running host set named ``NAME1,NAME2`` (or just its first name), made by ``planaria hosts up``."""
    from planaria.launch import netns

    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names or len(names) > 2:
        raise LaunchError(f"bad --netns {spec!r} (expected NAME1,NAME2 of 'planaria hosts up')")
    try:
        hs = netns.load_hosts(hosts_state_root() / names[0])
    except (netns.HostSetError, ValueError, KeyError, OSError) as exc:
        raise LaunchError(f"no test hosts {spec!r}: {exc} (create them with "
                          f"'planaria hosts up --names NAME1,NAME2')") from None
    if len(names) == 2 and list(hs.names) != names:
        raise LaunchError(f"the host set of {names[0]} is {','.join(hs.names)}, not {spec}")
    if not hs.exists():
        raise LaunchError(f"test hosts {','.join(hs.names)} are down (run 'planaria hosts up')")
    return hs


def _netns_extra_args(hs: Any) -> list[str]:
    """The host set's mpiexec arguments without ``--host`` and the ssh agent (set per attempt)."""
    args = list(hs.mpiexec_args(1))
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--host":
            i += 2
        elif args[i] == "--prtemca" and i + 1 < len(args) and args[i + 1] == "plm_ssh_agent":
            i += 3
        else:
            out.append(args[i])
            i += 1
    return out


def _is_local(host: str) -> bool:
    if host in ("localhost", "127.0.0.1", "::1") or host.startswith("127."):
        return True
    try:
        mine = {socket.gethostname(), socket.getfqdn()}
    except OSError:
        mine = set()
    return host in mine or host.split(".")[0] in {m.split(".")[0] for m in mine}


def probe_host(host: str, *, hostset: Any = None, ssh_agent: str | None = None,
               timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether ``host`` still runs commands: ``true`` through the launch path, bounded by ``timeout``.

    Test hosts (network namespaces): the namespace exists and a command runs inside it.
    Other hosts: this machine always answers; inside a Slurm allocation Slurm is asked
    (``planaria.launch.slurm``: the node's state, then ``srun --overlap -w HOST true``); else a
    remote host must run ``true`` through the ssh agent (``--prtemca plm_ssh_agent``/
    ``PRTE_MCA_plm_ssh_agent``, default ``ssh`` in batch mode).
    """
    if hostset is not None:
        from planaria.launch import netns

        if host not in netns.list_namespaces():
            return False
        try:
            cp = hostset.run(host, ["true"], timeout=timeout, check=False)
        except (OSError, subprocess.SubprocessError, netns.HostSetError):
            return False
        return cp.returncode == 0
    if _is_local(host):
        return True
    jid = slurm.job_id()
    if jid is not None and not ssh_agent:
        return slurm.probe(host, jid, timeout)
    agent = ssh_agent or os.environ.get("PRTE_MCA_plm_ssh_agent") or "ssh"
    argv = shlex.split(agent.split(":")[0].strip() or "ssh")
    if os.path.basename(argv[0]) == "ssh":
        argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout))}"]
    argv += [host, "true"]
    try:
        cp2 = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, timeout=timeout + 2)
    except (OSError, subprocess.SubprocessError):
        return False
    return cp2.returncode == 0


@dataclass
class _Layout:
    """The hosts of the next attempt and how to reach them."""

    hosts: list[tuple[str, int]] | None      # None: mpiexec's default (this machine or the allocation)
    explicit: bool                           # pass them as --host (else the first attempt's way)
    hostset: Any = None                      # netns HostSet for --netns

    def names(self) -> list[str]:
        return [h for h, _ in self.hosts or []]

    def hosts_arg(self, opts: RunOptions) -> str | None:
        if self.hosts and self.explicit:
            return ",".join(f"{h}:{s}" for h, s in self.hosts)
        return opts.hosts

    def launch_prefix(self, opts: RunOptions) -> list[str]:
        if self.hostset is not None and self.hosts:
            return self.hostset.exec_prefix(self.hosts[0][0])
        return list(opts.launch_prefix)

    def ssh_agent(self, opts: RunOptions) -> str | None:
        return str(self.hostset.agent_path) if self.hostset is not None else opts.ssh_agent

    def mpiexec_args(self, opts: RunOptions) -> list[str]:
        extra = _netns_extra_args(self.hostset) if self.hostset is not None else []
        return extra + list(opts.mpiexec_args)

    def node_agents(self, opts: RunOptions) -> bool:
        """Whether the ranks go through node agents: as asked, else when a host is not this one
        (their pids are then looked at where they run, and the controller holds a connection per host)."""
        if opts.node_agents is not None:
            return opts.node_agents
        names = self.names()
        if not names and not opts.hosts:            # mpiexec's default: the batch allocation's hosts
            try:
                names = [h for h, _ in allocation_hosts(os.environ) or []]
            except LaunchError:
                names = []
        return any(not _is_local(h) for h in names)

    def drop(self, gone: set[str]) -> None:
        self.hosts = [(h, s) for h, s in self.hosts or [] if h not in gone]
        self.explicit = True


def _initial_layout(opts: RunOptions, total: int, hostset: Any) -> _Layout:
    if hostset is not None:
        per = math.ceil(total / len(hostset.names))
        return _Layout([(n, per) for n in hostset.names], True, hostset)
    if opts.hosts:
        return _Layout(parse_hosts(opts.hosts), False)
    if opts.restart > 0:
        alloc = allocation_hosts(os.environ)
        if alloc:
            return _Layout(alloc, False)
    return _Layout(None, False)


@dataclass
class _Attempt:
    """What one mpiexec run left behind."""

    number: int
    argv: list[str]
    hosts: list[str] | None
    inject: str
    t_start: float
    t_end: float = 0.0
    outcome: str = "finished"
    status: int = EXIT_FAILED
    mpiexec_rc: int | None = None
    table: dict[int, dict[str, Any]] = field(default_factory=dict)
    daemon_loss: bool = False
    lost_hosts: list[str] = field(default_factory=list)
    rank_signalled: bool = False
    fates: dict[int, dict[str, Any]] = field(default_factory=dict)   # rankfate records by world rank
    unanswered: bool = False   # its last live diagnosis reached no rank (the job was being torn down)


def node_failure(att: _Attempt) -> str | None:
    """Why ``att`` counts as ended by a node failure (so it may be restarted), or None.

    The rule: the attempt was not stopped by --timeout or Ctrl-C (an abort by the default event
    handler after a fault counts like a failure), its status is not 0, and
    either mpiexec reported a lost runtime daemon (the runtime then aborts the whole job, so its
    status is not 0 unless every rank had finished), or no rank finished (said bye, or exited
    cleanly) and there is evidence that processes were lost: a rank was lost or failed, or a
    rank or mpiexec itself was killed by a signal.
    """
    if att.outcome not in ("finished", "failed", "aborted") or att.status == EXIT_OK:
        return None             # "aborted": the default event handler ended it after a fault
    if att.daemon_loss:
        where = f" on {', '.join(att.lost_hosts)}" if att.lost_hosts else ""
        return f"the MPI runtime lost its daemon{where} and aborted the job"
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


def gone_hosts(att: _Attempt, layout: _Layout, opts: RunOptions) -> list[str]:
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
        gone.update(h for h, ok in zip(rest, alive) if not ok)
    return [h for h in names if h in gone]


def _misnamed(att: _Attempt, gone: list[str]) -> str:
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
    line = json.dumps(_jsonable(record), sort_keys=True, default=str) + "\n"
    with open(jobdir.file(ATTEMPTS_LOG), "a", encoding="utf-8") as fh:
        fh.write(line)


def _attempt_record(att: _Attempt, t0: float) -> dict[str, Any]:
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


def run_job(opts: RunOptions) -> int:
    """Run one job under the controller (restarting it after node failures); return the exit status."""
    # ---- checks before anything is created or launched
    if opts.nprocs < 1:
        _err(f"-n must be at least 1 (got {opts.nprocs})", opts.prog)
        return EXIT_USAGE
    if opts.spares < 0:
        _err(f"--spares must be >= 0 (got {opts.spares})", opts.prog)
        return EXIT_USAGE
    if opts.restart < 0:
        _err(f"--restart must be >= 0 (got {opts.restart})", opts.prog)
        return EXIT_USAGE
    if opts.timeout is not None and not (math.isfinite(opts.timeout) and opts.timeout > 0):
        # nan compares false with everything and inf never comes: either would leave the job unbounded
        _err(f"--timeout must be a positive, finite number of seconds (got {opts.timeout})", opts.prog)
        return EXIT_USAGE
    if opts.hosts is not None and not opts.hosts.strip():
        _err("--hosts is empty (expected h1,h2 or h1:2,h2:2; leave it out for the allocation or this machine)",
             opts.prog)
        return EXIT_USAGE
    if opts.netns is not None and not opts.netns.strip():
        _err("--netns is empty (expected NAME1,NAME2 of 'planaria hosts up')", opts.prog)
        return EXIT_USAGE
    if opts.control is not None:
        why = control_problem(opts.control)
        if why:
            _err(f"bad --control {opts.control!r}: {why}", opts.prog)
            return EXIT_USAGE
    if not opts.command:
        _err("no command given (usage: planaria run -n N -- python script.py)", opts.prog)
        return EXIT_USAGE
    if opts.on_hang not in onhang.MODES:
        _err(f"--on-hang must be one of {', '.join(onhang.MODES)} (got {opts.on_hang!r})", opts.prog)
        return EXIT_USAGE
    if opts.default_handler not in ("abort", "none"):
        _err(f"--default-handler must be abort or none (got {opts.default_handler!r})", opts.prog)
        return EXIT_USAGE
    if opts.backend not in BACKENDS:
        _err(f"unknown backend {opts.backend!r} (choose ulfm, sim or auto)", opts.prog)
        return EXIT_USAGE
    if opts.launcher_kills and not opts.rank_fates:
        _err("--launcher-kills needs the rank recorder (leave out --no-rank-fates)", opts.prog)
        return EXIT_USAGE
    if opts.netns and (opts.hosts or opts.launch_prefix or opts.ssh_agent):
        _err("--netns cannot be combined with --hosts (it sets the hosts and how to reach them)", opts.prog)
        return EXIT_USAGE
    backend = resolve_backend(opts.backend)
    total = opts.nprocs + opts.spares
    if opts.stdin != "none" and not (re.fullmatch(r"[0-9]+", opts.stdin) and int(opts.stdin) < total):
        _err(f"--stdin {opts.stdin!r}: expected a rank in 0..{total - 1} or 'none'", opts.prog)
        return EXIT_USAGE
    try:
        spec = _parse_plan(opts, total)
    except ImportError as exc:
        _err(f"fault injection is unavailable: {exc}", opts.prog)
        return EXIT_USAGE
    except ValueError as exc:  # PlanError is a ValueError
        _err(str(exc), opts.prog)
        return EXIT_USAGE
    if opts.detect_timeouts:
        from planaria.localize.thresholds import Thresholds
        try:
            Thresholds.parse(opts.detect_timeouts)
        except ValueError as exc:
            _err(str(exc), opts.prog)
            return EXIT_USAGE
    command = _python_fix(list(opts.command))
    try:  # catch command-line errors (hosts, mpiexec missing) before creating the job
        hostset = load_netns_hosts(opts.netns) if opts.netns else None
        layout = _initial_layout(opts, total, hostset)
        build_mpiexec_cmd(command, total, backend=backend, hosts=layout.hosts_arg(opts),
                          mpiexec_args=layout.mpiexec_args(opts))
        local = (hostset is None and not opts.hosts
                 and allocation_hosts(os.environ, use_scontrol=False) is None)
    except LaunchError as exc:
        _err(str(exc), opts.prog)
        return EXIT_USAGE
    if local and not opts.launch_prefix and shutil.which(command[0]) is None:
        _err(f"command not found: {command[0]}", opts.prog)
        return EXIT_USAGE

    # ---- job directory
    t0 = time.time()
    try:
        jobdir = JobDir.create(opts.job_root)
    except OSError as exc:
        _err(f"cannot create the job directory: {exc}", opts.prog)
        return EXIT_USAGE
    if opts.on_jobdir is not None:
        opts.on_jobdir(jobdir.path)
    deadline = None if opts.timeout is None else t0 + opts.timeout
    out = _Output(jobdir, opts.json, opts.prog)
    interrupted = threading.Event()
    interrupted.by = "Ctrl-C"       # type: ignore[attr-defined]  # which signal ended the job
    old_handler = old_usr1 = None
    old_ends: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
        old_usr1 = signal.signal(signal.SIGUSR1, lambda *_: _DIAG_REQUESTS.set())
        # A batch system cancels a job (scancel, a time limit) or a closed terminal hangs up with
        # these: the job is torn down as for Ctrl-C, never left running without its launcher.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            old_ends[sig] = signal.signal(sig, lambda signum, _f: _ended_by_signal(interrupted, signum))
    attempts: list[dict[str, Any]] = []
    att: _Attempt | None = None
    try:
        number = 1
        while True:
            inject = spec if (number == 1 or opts.reinject) else ""
            res = _run_attempt(opts, jobdir, out, number, t0, deadline, interrupted, command,
                               total, backend, inject, layout)
            if isinstance(res, int):          # launch error
                if att is None:
                    out.close()
                    return res
                _note(out, f"restart {number - 1} could not be launched; the job ends")
                break
            att = res
            record = _attempt_record(att, t0)
            attempts.append(record)
            why = node_failure(att)
            record["node_failure"] = why
            left = opts.restart - (number - 1)
            if why is None or left <= 0:
                if why is not None and opts.restart > 0:
                    _note(out, f"attempt {number} ended by a node failure ({why}); "
                               f"no restart left (--restart {opts.restart})")
                _append_attempt(jobdir, record)
                break
            if deadline is not None and deadline - time.time() < MIN_RESTART_TIME:
                _note(out, f"attempt {number} ended by a node failure ({why}); no time left to restart")
                _append_attempt(jobdir, record)
                break
            if interrupted.is_set():
                _append_attempt(jobdir, record)
                break
            gone = gone_hosts(att, layout, opts) if layout.hosts else []
            record["dropped_hosts"] = gone
            if layout.hosts and len(gone) >= len(layout.hosts):
                _note(out, f"attempt {number} ended by a node failure ({why}); "
                           f"no host left to restart on (gone: {', '.join(gone)})")
                _append_attempt(jobdir, record)
                break
            if gone:
                layout.drop(set(gone))
            why += _misnamed(att, gone)
            record["next"] = "restart"
            _append_attempt(jobdir, record)
            where = ", ".join(layout.names()) if layout.hosts else "this machine"
            dropped = f"; dropped {', '.join(gone)}" if gone else ""
            _note(out, f"attempt {number} ended by a node failure ({why}){dropped}; "
                       f"restart {number} of {opts.restart} on {where} with {opts.nprocs} rank(s)"
                       + (f" + {opts.spares} spare(s)" if opts.spares else ""))
            number += 1
    except BaseException:
        for proc, ctl in list(_LIVE.values()):      # never leave the job running without its launcher
            _kill_all(proc, ctl)
            ctl.stop()
        _LIVE.clear()
        raise
    finally:
        for sig, handler in old_ends.items():
            signal.signal(sig, handler)
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
        if old_usr1 is not None:
            signal.signal(signal.SIGUSR1, old_usr1)
    out.close()
    assert att is not None

    rows = att.table or fate_table(att.fates)   # a program without planaria's runtime: no rank talked
    for r, row in rows.items():                 # a crashed rank: where its Python was
        if row.get("state") in ("failed", "lost") and out.crashes.error(r) and not row.get("site"):
            row["site"] = out.crashes.site(r)
    summary = build_summary(jobdir, opts, rows, t0, att.status, att.outcome, att.mpiexec_rc,
                            attempts)
    jobdir.write_summary(summary)
    jobdir.update_manifest(status=att.outcome, exit_status=att.status, mpiexec_rc=att.mpiexec_rc,
                           attempts=len(attempts), end=time.time())
    if att.unanswered:                          # the abort ended every rank first: say what the job's record says
        from planaria.diagnose.postmortem import postmortem
        from planaria.comm.flight import read_dir
        report = postmortem(jobdir.events(), jobdir.id, summary=summary["ranks"], flight=read_dir(jobdir.path))
        for line in report["text"].rstrip().splitlines():
            _err(line, opts.prog)
    abnormal = att.status != EXIT_OK or any(
        r["state"] != "finished" or r.get("exit_code") not in (0, None) for r in summary["ranks"])
    if abnormal:
        if summary["ranks"]:
            print_summary(summary)
            if not att.unanswered:
                _root_causes(jobdir, summary, opts.prog)
        else:
            _err(f"job {jobdir.id} {att.outcome} (exit {att.status}); job directory: {jobdir.path}", opts.prog)
    elif len(attempts) > 1:
        _err(f"job {jobdir.id} finished after {len(attempts) - 1} restart(s); "
             f"job directory: {jobdir.path}", opts.prog)
    if not abnormal and summary.get("unfired"):
        _err(f"planned fault(s) that never fired (the job ended first): {'; '.join(summary['unfired'][:10])}"
             f"{' ...' if len(summary['unfired']) > 10 else ''}", opts.prog)
    if opts.json and opts.emit_summary:
        print(json.dumps(_jsonable(summary), indent=2, sort_keys=True), flush=True)
    return att.status


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
        _err(line, prog)
    if causes:
        _err(f"the whole report: planaria diagnose {jobdir.id}", prog)


_DIAG_REQUESTS = threading.Event()


def _diagnose_now(controller: Controller, out: _Output, why: str, ending: bool = False) -> bool:
    """Collect and analyze the job's global state now (SIGUSR1 to the launcher, or before a timeout
    kill); False when no rank answered. ``ending``: the job is being torn down already (an abort),
    so an empty collection says nothing about the ranks: one line instead of its report."""
    _note(out, f"{why}: collecting every rank's state for a diagnosis")
    try:
        res = controller.diagnose()
    except Exception as exc:  # noqa: BLE001 - a diagnosis must never take the launcher down
        _note(out, f"diagnosis failed: {type(exc).__name__}: {exc}")
        return False
    answered = bool(res["report"].get("answered"))
    if ending and not answered:
        _note(out, "no rank answered: the job was already ending; the post-mortem follows once it has")
        return False
    for line in res["report"]["text"].rstrip().splitlines():
        _note(out, line)
    _note(out, f"state file {res['state']}; report {res['json']}")
    return answered


def _note(out: _Output, msg: str) -> None:
    """A launcher line on stderr, also kept in output.log."""
    out.write(f"{out.prog}: {msg}", sys.stderr)


def _run_attempt(opts: RunOptions, jobdir: JobDir, out: _Output, number: int, t0: float,
                 deadline: float | None, interrupted: threading.Event, command: list[str],
                 total: int, backend: str, inject: str, layout: _Layout) -> _Attempt | int:
    """Launch mpiexec once (attempt ``number``, 1 first) and wait for it; an int is a launch error."""
    controller = Controller(jobdir, opts.control, t0=t0)
    try:
        uri = controller.start()
    except RuntimeError as exc:
        _err(str(exc), opts.prog)
        return EXIT_USAGE
    out.crashes.notify = controller.note_crash     # a rank's traceback says where it failed
    penv = {
        PLANARIA_JOB_DIR: str(jobdir.path),
        PLANARIA_CONTROL_URI: uri,
        PLANARIA_SECRET_FILE: str(jobdir.secret_path),
        PLANARIA_BACKEND: backend,
        PLANARIA_INJECT: inject,
        PLANARIA_SPARES: str(opts.spares),
        PLANARIA_NRANKS: str(opts.nprocs),
        PLANARIA_T0: repr(t0),
        PLANARIA_RESTART: str(number - 1),
        PLANARIA_DETECT: "1" if opts.detect else "0",
        PLANARIA_DETECT_TIMEOUTS: opts.detect_timeouts or "",
        PLANARIA_EVENTS_DEFAULT: opts.default_handler,
        PLANARIA_NODE_AGENTS: "1" if layout.node_agents(opts) else "0",
    }
    if "PYTHONFAULTHANDLER" not in os.environ:  # a crashing rank prints its stack (CrashSites reads it)
        penv["PYTHONFAULTHANDLER"] = "1"
    fates_dir = jobdir.path / "fates" / str(number)
    if opts.rank_fates:
        try:
            fates_dir.mkdir(parents=True, exist_ok=True)
            penv[rankfate.FATES_ENV] = str(fates_dir)
            controller.fates_dir = fates_dir
        except OSError as exc:
            _err(f"cannot create {fates_dir}: {exc}", opts.prog)
            controller.stop()
            return EXIT_USAGE
    fifo = _stdin_pipe(opts, jobdir, number, penv)
    extra = layout.mpiexec_args(opts)
    try:
        argv, env = build_mpiexec_cmd(command, total, backend=backend, hosts=layout.hosts_arg(opts),
                                      planaria_env=penv, mpiexec_args=extra + slurm.restart_args(number, extra),
                                      launch_prefix=layout.launch_prefix(opts),
                                      ssh_agent=layout.ssh_agent(opts),
                                      rank_prefix=rankfate.shim_argv() if opts.rank_fates else (),
                                      one_machine=layout.hostset is not None)
    except LaunchError as exc:
        _err(str(exc), opts.prog)
        controller.stop()
        return EXIT_USAGE
    if layout.hostset is not None:   # prted and friends for the remote side of the test hosts
        env["PATH"] = f"{layout.hostset.bindir}{os.pathsep}{env.get('PATH', '')}"
    att = _Attempt(number=number, argv=argv, hosts=layout.names() if layout.hosts else None,
                   inject=inject, t_start=time.time())
    if number == 1:
        manifest: dict[str, Any] = {
            "job": jobdir.id, "status": "starting", "t0": t0, "command": command, "argv": argv,
            "nranks": opts.nprocs, "spares": opts.spares, "backend": backend, "inject": inject,
            "timeout": opts.timeout, "hosts": opts.hosts, "control_uri": uri, "cwd": os.getcwd(),
            "launcher_pid": os.getpid(), "restart": opts.restart, "reinject": opts.reinject,
            "netns": list(layout.hostset.names) if layout.hostset is not None else None,
            "attempt": 1,
            "env": {k: v for k, v in penv.items() if k != PLANARIA_SECRET_FILE},
        }
        jobdir.write_manifest(manifest)
    else:
        jobdir.update_manifest(status="restarting", attempt=number, argv=argv, control_uri=uri,
                               attempt_hosts=att.hosts,
                               env={k: v for k, v in penv.items() if k != PLANARIA_SECRET_FILE})
    out.watch = _RuntimeWatch()
    out.sink = controller.io
    # a killed mpiexec's session directory makes the next mpiexec with its pid fail at start
    sessiondirs.remove_stale(sessiondirs.base_dir(env))
    try:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        _err(f"cannot start {argv[0]}: {exc}", opts.prog)
        controller.stop()
        jobdir.update_manifest(status="launch-error", error=str(exc))
        return EXIT_USAGE
    _LIVE[proc.pid] = (proc, controller)
    jobdir.update_manifest(status="running", mpiexec_pid=proc.pid)
    if fifo is not None:
        threading.Thread(target=_pump_stdin, args=(fifo,), daemon=True, name="planaria-stdin").start()
    pumps = [threading.Thread(target=out.pump, args=(proc.stdout, False), daemon=True),
             threading.Thread(target=out.pump, args=(proc.stderr, True), daemon=True)]
    for th in pumps:
        th.start()
    outcome = "finished"
    mpiexec_rc: int | None = None
    # a program without planaria's runtime has no default event handler: the launcher is it
    plain_watch = (rankfate.FailureWatch(fates_dir) if opts.rank_fates and opts.default_handler == "abort"
                   else None)
    plain_abort: tuple[int, dict[str, Any]] | None = None
    # nor an injector: on request the launcher sends the plan's timed kills itself
    plain_kills = PlainKills(inject, total, fates_dir) if opts.rank_fates and inject and opts.launcher_kills \
        else None
    if plain_kills is not None and plain_kills.unsupported:
        _note(out, f"--launcher-kills sends only timed kills; these faults need planaria's runtime in the "
                   f"ranks: {'; '.join(plain_kills.unsupported)}")
    injected: dict[int, str] = {}
    outlived = MpiexecOutlived(total) if opts.rank_fates else None
    incidents = onhang.IncidentWatch(opts.on_hang, jobdir.id)
    while True:
        try:
            mpiexec_rc = proc.wait(0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        if outlived is not None and outlived.check(time.time(), lambda: rankfate.read_fates(fates_dir)):
            _note(out, f"every rank's process had ended {outlived.grace:g} s before mpiexec: ending it")
            _kill_all(proc, controller)
            mpiexec_rc = proc.poll()
            break
        if plain_kills is not None:
            for r, why in plain_kills.check(time.time()):
                injected[r] = why
                _note(out, f"rank {r}: {why}")
                jobdir.append_events([{"type": "inject", "rank": r, "kind": "kill", "detail": why,
                                       "t": time.time(), "by": "launcher"}])
            for r, why in plain_kills.missed:
                _note(out, f"rank {r}: {why}")
            plain_kills.missed = []
        if plain_watch is not None:
            plain_abort = plain_watch.check(time.time(), lambda: bool(controller.pids()))
            if plain_abort is not None:
                outcome = "aborted"
                break
        if _DIAG_REQUESTS.is_set():
            _DIAG_REQUESTS.clear()
            threading.Thread(target=_diagnose_now, args=(controller, out, "SIGUSR1"), daemon=True,
                             name="planaria-diagnose-signal").start()
        lines, hang_action = incidents.take(controller.take_incidents(), controller.holds_up,
                                           controller.finished_note)
        for line in lines:
            _note(out, line)
        if hang_action == "diagnose":
            threading.Thread(target=_diagnose_now, args=(controller, out, "hang detected (--on-hang diagnose)"),
                             daemon=True, name="planaria-diagnose-hang").start()
        elif hang_action == "abort":
            outcome = "hung"
            break
        if interrupted.is_set():
            outcome = "interrupted"
            break
        if controller.abort_request is not None:
            outcome = "aborted"
            break
        if deadline is not None and time.time() > deadline:
            outcome = "timeout"
            break
    if (outcome == "hung" or outcome in ("timeout", "aborted") and opts.diagnose_on_timeout) and plain_abort is None:
        # the survivors' state says where they were when the job had to end (a dead peer shows
        # up in the count check)
        answered = _diagnose_now(controller, out, "hang detected (--on-hang abort)" if outcome == "hung" else outcome,
                                 ending=outcome == "aborted")
        att.unanswered = outcome == "aborted" and not answered
    if outcome != "finished":
        why = (f"interrupted ({interrupted.by})" if outcome == "interrupted"
               else f"aborted by rank {controller.abort_request.get('rank')}'s {controller.abort_request['reason']}"
               if outcome == "aborted" and controller.abort_request is not None
               else f"rank {plain_abort[0]} {rankfate.describe(plain_abort[1])} and no rank uses planaria's "
                    "runtime: the default handler ends the job, as mpiexec without ULFM would "
                    "(--default-handler none lets it run on, as plain ULFM)"
               if plain_abort is not None
               else "hang detected (--on-hang abort)" if outcome == "hung"
               else f"timeout after {opts.timeout:g} s")
        _err(f"{why}: stopping the job", opts.prog)
        running = {r for r, rec in rankfate.read_fates(fates_dir).items() if "end" not in rec} \
            if opts.rank_fates else set()
        t_end = time.time()
        _kill_all(proc, controller)
        mpiexec_rc = proc.poll()
    for th in pumps:
        th.join(5.0)
    # how each rank's process ended, read before anything still running is ended below
    fates = att.fates = rankfate.settle(fates_dir) if opts.rank_fates else {}
    left = rankfate.kill_leftovers(fates)
    if left:       # with ULFM, mpiexec can exit (after an MPI_Abort) while ranks still run
        _note(out, f"rank(s) {', '.join(map(str, left))} still ran after mpiexec exited: killed")
        for r in left:
            fates[r]["left_running"] = True
    for r, why in injected.items():
        if r in fates and fates[r].get("signal") == signal.SIGKILL:
            fates[r]["injected"] = why
    for r in controller.ctl_killed & set(fates):
        if fates[r].get("signal") == signal.SIGKILL:
            fates[r]["ended_by"] = "planaria ctl kill"
    if outcome != "finished":           # what was still running when the launcher ended the job
        ender = {"timeout": f"the launcher at the timeout ({opts.timeout:g} s)", "interrupted": interrupted.by,
                 "aborted": "the job abort (default handler)",
                 "hung": "the launcher after a detected hang (--on-hang abort)"}[outcome]
        for r in running & set(fates):
            fates[r]["ended_by"] = ender
            fates[r]["ended_at"] = t_end        # when the launcher began to end the job
    watch = out.watch
    att.daemon_loss, att.lost_hosts = watch.daemon_loss, list(watch.lost_hosts)
    att.rank_signalled = watch.rank_signalled or any("signal" in rec for rec in fates.values())
    # mpiexec may exit 0 after losing a daemon: then nothing was ok
    final_ok = outcome == "finished" and mpiexec_rc == 0 and not watch.daemon_loss
    if opts.restart > 0 and outcome == "finished":
        # with ULFM mpiexec may exit 0 although ranks were killed: with --restart a rank whose
        # process is gone without a bye counts as lost, not as "exited without a bye"
        controller.sweep()
    controller.sweep(final=True, final_ok=final_ok, fates=fates)
    table = controller.table()
    if inject and not opts.launcher_kills and fates and not table:
        _note(out, "--inject had no effect: no rank used planaria's runtime (planaria.world()); with "
                   "--launcher-kills the launcher sends the plan's timed kills")
    if outcome == "aborted" and controller.abort_request is not None:
        for info in table.values():      # ranks the abort took down, not failures of their own
            if info["state"] == "lost" and (info.get("fail_time") or 0) >= controller.abort_request["t"]:
                info["reason"] = "ended by the job abort (default event handler)"
    if outcome == "finished" and not final_ok:
        # nothing of this attempt may keep running (and writing checkpoints) into the next one
        _kill_all(proc, controller)
    out.sink = None
    from planaria.events.codes import JOB_END
    controller.notify(JOB_END, {"outcome": outcome, "mpiexec_rc": mpiexec_rc, "attempt": number})
    controller.stop()
    _LIVE.pop(proc.pid, None)
    # a killed mpiexec leaves its ranks' shared-memory files in /dev/shm (delete those nothing maps
    # any more) and its session directory
    shmfiles.remove_orphaned()
    sessiondirs.remove_stale(sessiondirs.base_dir(env))

    if outcome in ("timeout", "hung"):
        status = EXIT_TIMEOUT
    elif outcome == "interrupted":
        status = EXIT_INTERRUPTED if interrupted.by == "Ctrl-C" else 128 + _SIGNUMS.get(interrupted.by, 15)
    elif outcome == "aborted":
        # a program without the runtime: the status mpiexec without ULFM would give for its failure
        status = (rankfate.status_of({plain_abort[0]: plain_abort[1]}) or EXIT_FAILED
                  if plain_abort is not None else EXIT_FAILED)
    else:
        status = exit_status(table, mpiexec_rc, fates)
        finished = sum(1 for info in table.values() if info["state"] == "finished")
        if status == EXIT_OK and watch.daemon_loss and finished < total:
            # the runtime aborted the job: ranks that still said bye had not completed it
            status = EXIT_FAILED
        if status != EXIT_OK:
            outcome = "failed"
    att.outcome, att.status, att.mpiexec_rc, att.table = outcome, status, mpiexec_rc, table
    att.t_end = time.time()
    return att
