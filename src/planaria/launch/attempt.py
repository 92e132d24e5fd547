"""One attempt of a job: one mpiexec run, in stages.

``prepare`` (the controller's address, the ranks' environment, the command line) → ``launch``
(mpiexec, then the controller, the manifest and the output pumps) → ``supervise`` (the watchers
of ``supervise.py``, until an ``Outcome``) → ``stop`` (a last diagnosis and the kill, when the
launcher ends the job) → ``teardown`` (how every rank ended, the final rank table, cleanup) →
``classify`` (the exit status).
A problem before mpiexec runs raises ``LaunchError``.

mpiexec starts before the controller: the ranks need only its address, and the agent channel's
listener is bound first (``planaria.launch.address``), so the ranks' hellos wait in its backlog
while the controller (and ZeroMQ's import) comes up alongside mpiexec's start. With a
``--control`` address, or without a channel, the controller starts first, as the ranks then need
the address it binds.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planaria.launch import progressbar, rankfate, sessiondirs, shmfiles, slurm
from planaria.launch.address import default_address, early_listener
from planaria.launch.crashsite import CrashSites
from planaria.launch.errors import LaunchError
from planaria.launch.fdlimit import raise_open_files
from planaria.launch.jobdir import JobDir
from planaria.launch.layout import Layout
from planaria.launch.mpiexec import build_mpiexec_cmd
from planaria.launch.options import EXIT_FAILED, EXIT_OK, RunOptions, say
from planaria.launch.output import Output, RuntimeWatch
from planaria.launch.plaininject import PlainKills
from planaria.launch.supervise import (
    ABORTED,
    FINISHED,
    HUNG,
    TIMEOUT,
    AbortRequest,
    Deadline,
    DiagnosisRequests,
    Incidents,
    Interrupted,
    LauncherKills,
    MpiexecExit,
    Outcome,
    OutlivedRanks,
    PlainFailure,
    StartBound,
    end_helpers,
    Signals,
    Watcher,
    diagnose_now,
    kill_all,
    supervise,
)
from planaria.util.env import (
    PLANARIA_BACKEND,
    PLANARIA_CONTROL_URI,
    PLANARIA_DETECT,
    PLANARIA_DETECT_TIMEOUTS,
    PLANARIA_EVENTS_DEFAULT,
    PLANARIA_INJECT,
    PLANARIA_JOB_DIR,
    PLANARIA_NODE_AGENTS,
    PLANARIA_NRANKS,
    PLANARIA_RESTART,
    PLANARIA_SECRET_FILE,
    PLANARIA_SPARES,
    PLANARIA_T0,
)
from planaria.util import procstat
from planaria.util.record import field, record

if TYPE_CHECKING:        # loaded once mpiexec runs (``Attempt.launch``): ZeroMQ and the event code
    import _socket

    from planaria.launch.controller import Controller
    from planaria.launch.progressbar import ProgressBar

#: mpiexec processes of attempts still running, with their controllers: an unexpected error in the
#: launcher ends them (``run_job``) instead of leaving the job running without its launcher
LIVE: dict[int, tuple[subprocess.Popen[bytes], Controller]] = {}


@record
class Job:
    """What every attempt of one job shares."""

    opts: RunOptions
    jobdir: JobDir
    out: Output
    t0: float
    deadline: float | None
    signals: Signals
    command: list[str]
    total: int              # working ranks + spares
    backend: str
    layout: Layout


@record
class AttemptResult:
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
    library_crashed: list[int] = field(default_factory=list)   # ranks Open MPI's known crash took (recovery.md)
    fates: dict[int, dict[str, Any]] = field(default_factory=dict)   # rankfate records by world rank
    unanswered: bool = False   # its last live diagnosis reached no rank (the job was being torn down)


def library_crashed(table: dict[int, dict[str, Any]], crashes: CrashSites) -> list[int]:
    """The ranks of ``table`` that died of Open MPI 5.0's known crash: a fatal signal inside the
    creation of a communicator (docs/recovery.md, "A limit of the MPI library")."""
    ended = {r: info for r, info in table.items() if info.get("state") in ("lost", "failed")}
    if not ended:               # the usual end: the diagnosis (and numpy with it) is not loaded
        return []
    from planaria.diagnose.postmortem import library_crash
    return sorted(r for r, info in ended.items() if library_crash(str(info.get("reason") or ""), crashes.mpi_call(r)))


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
        say(f"--stdin: cannot create {fifo}: {exc.strerror}; the ranks get no standard input", opts.prog)
        return None
    penv[rankfate.STDIN_ENV] = f"{opts.stdin}:{os.uname().nodename}:{fifo}"
    return fifo


#: seconds after mpiexec starts that the launcher looks for (or builds) the flight record's C note
BUILD_AFTER_S = 1.0


def _build_flight_note() -> None:
    """Build the flight record's C note unless it is built (``planaria.comm.flight.note_build``)."""
    from planaria.comm import flight
    flight.note_build()


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


class Attempt:
    """Attempt ``number`` (1 first) of ``job``, with the fault plan ``inject`` ('' none)."""

    def __init__(self, job: Job, number: int, inject: str) -> None:
        self.job, self.opts, self.number, self.inject = job, job.opts, number, inject
        self.fates_dir = job.jobdir.path / "fates" / str(number)
        self._ctl: Controller | None = None   # started in ``prepare`` or ``launch``
        self._listener: _socket.socket | None = None   # the agent channel's, bound before the controller
        self._requested = ""                  # the controller's address (``prepare``)
        self._open_files = (0, 0)             # the open-file limit before and after it was raised
        self.env: dict[str, str] = {}
        self._uri = ""                        # the control URI (``prepare``)
        self._penv: dict[str, str] = {}       # the ranks' PLANARIA_* variables (``prepare``)
        self.fifo: Path | None = None
        self.mpiexec_rc: int | None = None
        self.running: set[int] = set()      # ranks still running when the launcher began to end the job
        self.t_stop = 0.0                   # when it began to
        self.t_launch = 0.0                 # when mpiexec was started
        self.kills: LauncherKills | None = None
        self.bar: ProgressBar | None = None   # on stderr when it is a terminal (docs/tools.md), not with --json

    @property
    def controller(self) -> Controller:
        """The attempt's controller (started by ``prepare``, or by ``launch`` once mpiexec runs)."""
        assert self._ctl is not None, "the controller starts in prepare() or launch()"
        return self._ctl

    def run(self) -> AttemptResult:
        """All the stages; raises ``LaunchError`` when mpiexec could not be started."""
        self.prepare()
        self.launch()
        try:
            outcome = supervise(self.watchers())
        finally:
            if self.bar is not None:
                self.bar.close()
        self.stop(outcome)
        self.teardown(outcome)
        return self.classify(outcome)

    # ---- prepare

    def _rank_env(self, uri: str) -> dict[str, str]:
        """The ``PLANARIA_*`` variables every rank of this attempt gets."""
        job, opts = self.job, self.opts
        return {
            PLANARIA_JOB_DIR: str(job.jobdir.path),
            PLANARIA_CONTROL_URI: uri,
            PLANARIA_SECRET_FILE: str(job.jobdir.secret_path),
            PLANARIA_BACKEND: job.backend,
            PLANARIA_INJECT: self.inject,
            PLANARIA_SPARES: str(opts.spares),
            PLANARIA_NRANKS: str(opts.nprocs),
            PLANARIA_T0: repr(job.t0),
            PLANARIA_RESTART: str(self.number - 1),
            PLANARIA_DETECT: "1" if opts.detect else "0",
            PLANARIA_DETECT_TIMEOUTS: opts.detect_timeouts or "",
            PLANARIA_EVENTS_DEFAULT: opts.default_handler,
            PLANARIA_NODE_AGENTS: "1" if job.layout.node_agents(opts) else "0",
        }

    def _give_up(self, msg: str) -> LaunchError:
        """Stop the controller (or close the listener made for it); the error to raise."""
        if self._ctl is not None:
            self._ctl.stop()
        elif self._listener is not None:
            self._listener.close()
            self._listener = None
        return LaunchError(msg)

    def _start_controller(self) -> str:
        """Make and start the controller (on the listener bound before, if any); its bound URI."""
        from planaria.launch.controller import Controller

        job = self.job
        ctl = self._ctl = Controller(job.jobdir, self._requested, t0=job.t0, listener=self._listener)
        self._listener = None
        if self.opts.rank_fates:
            ctl.fates_dir = self.fates_dir
        try:
            uri = ctl.start(open_files=self._open_files)
        except RuntimeError as exc:
            raise self._give_up(str(exc)) from None
        job.out.crashes.notify = ctl.note_crash     # a rank's traceback says where it failed
        return uri

    def prepare(self) -> None:
        """The controller's address (the controller itself first only when the ranks need the
        address it binds), the ranks' environment, the fates directory, the command line."""
        job, opts = self.job, self.opts
        job.out.crashes = CrashSites()          # this attempt's crashes only
        self._open_files = raise_open_files()   # first: mpiexec and the ranks inherit the limit
        self._requested = opts.control or default_address(job.jobdir)
        self._listener = early_listener(self._requested) if opts.control is None else None
        uri = self._requested if self._listener is not None else self._start_controller()
        penv = self._rank_env(uri)
        if "PYTHONFAULTHANDLER" not in os.environ:  # a crashing rank prints its stack (CrashSites reads it)
            penv["PYTHONFAULTHANDLER"] = "1"
        if opts.rank_fates:
            try:
                self.fates_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._give_up(f"cannot create {self.fates_dir}: {exc}") from None
            penv[rankfate.FATES_ENV] = str(self.fates_dir)
        self.fifo = _stdin_pipe(opts, job.jobdir, self.number, penv)
        layout = job.layout
        extra = layout.mpiexec_args(opts)
        try:
            argv, self.env = build_mpiexec_cmd(
                job.command, job.total, backend=job.backend, hosts=layout.hosts_arg(opts), planaria_env=penv,
                mpiexec_args=extra + slurm.restart_args(self.number, extra),
                launch_prefix=layout.launch_prefix(opts), ssh_agent=layout.ssh_agent(opts),
                rank_prefix=rankfate.recorder_argv(layout.this_machine(opts)) if opts.rank_fates else (),
                one_machine=layout.hostset is not None)
        except LaunchError as exc:
            raise self._give_up(str(exc)) from None
        if layout.hostset is not None:   # prted and friends for the remote side of the test hosts
            self.env["PATH"] = f"{layout.hostset.bindir}{os.pathsep}{self.env.get('PATH', '')}"
        self.result = AttemptResult(number=self.number, argv=argv, hosts=layout.names() if layout.hosts else None,
                                    inject=self.inject, t_start=time.time())
        self._uri, self._penv = uri, penv

    def _write_manifest(self, **state: Any) -> None:
        """The manifest of this attempt with ``state`` (its status, mpiexec's pid or the error):
        written once mpiexec runs or could not be started, so that its writes (each synced to disk)
        are not on the way to the ranks' start. Until then tools see no status, which they take
        as a job that may be running."""
        job, opts, layout, argv = self.job, self.opts, self.job.layout, self.result.argv
        shown_env = {k: v for k, v in self._penv.items() if k != PLANARIA_SECRET_FILE}
        if self.number > 1:
            job.jobdir.update_manifest(attempt=self.number, argv=argv, control_uri=self._uri,
                                       attempt_hosts=self.result.hosts, env=shown_env, **state)
            return
        job.jobdir.write_manifest({
            "job": job.jobdir.id, "t0": job.t0, "command": job.command, "argv": argv,
            "nranks": opts.nprocs, "spares": opts.spares, "backend": job.backend, "inject": self.inject,
            "timeout": opts.timeout, "hosts": opts.hosts, "control_uri": self._uri, "cwd": os.getcwd(),
            "launcher_pid": os.getpid(), "restart": opts.restart, "reinject": opts.reinject,
            "netns": list(layout.hostset.names) if layout.hostset is not None else None,
            "attempt": 1, "env": shown_env, **state,
        })

    # ---- launch

    def launch(self) -> None:
        """Start mpiexec, then the controller if it is not running yet, the manifest, and the
        threads that copy mpiexec's output (and the launcher's stdin)."""
        out, argv = self.job.out, self.result.argv
        out.watch = RuntimeWatch()
        # a killed mpiexec's session directory makes the next mpiexec with its pid fail at start
        sessiondirs.remove_stale(sessiondirs.base_dir(self.env))
        try:
            self.proc = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            self._give_up("")
            self._write_manifest(status="launch-error", error=str(exc))
            raise LaunchError(f"cannot start {argv[0]}: {exc}") from None
        if self._ctl is None:
            try:
                self._start_controller()
            except LaunchError as exc:
                kill_all(self.proc, None)
                self._write_manifest(status="launch-error", error=str(exc))
                raise
        self.t_launch = time.time()             # --start-timeout counts from here, attempt by attempt
        controller = self.controller
        LIVE[self.proc.pid] = (self.proc, controller)
        out.sink = controller.io
        self._write_manifest(status="running", mpiexec_pid=self.proc.pid)
        if self.fifo is not None:
            threading.Thread(target=_pump_stdin, args=(self.fifo,), daemon=True, name="planaria-stdin").start()
        self.pumps = [threading.Thread(target=out.pump, args=(self.proc.stdout, False), daemon=True),
                      threading.Thread(target=out.pump, args=(self.proc.stderr, True), daemon=True)]
        for th in self.pumps:
            th.start()
        # the flight record's note in C, built on this machine's first job (a rank looks for it with
        # its first note after numpy's import); looked for once the ranks have started, not among them
        build = threading.Timer(BUILD_AFTER_S, _build_flight_note)
        build.daemon = True
        build.start()
        if progressbar.wanted(self.opts.json):
            from planaria.launch.progressbar import ProgressBar
            self.bar = ProgressBar(controller, out)

    # ---- supervise

    def watchers(self) -> list[Watcher]:
        """The supervision loop's watchers, in the order it asks them."""
        job, opts, ctl, out = self.job, self.opts, self.controller, self.job.out
        found: list[Watcher] = [MpiexecExit(self.proc)]
        if opts.rank_fates:
            found.append(OutlivedRanks(job.total, self.fates_dir, self.proc, ctl, out))
        if opts.rank_fates and self.inject and opts.launcher_kills:
            # a program without planaria's runtime has no injector: the launcher sends the plan's timed kills
            kills = PlainKills(self.inject, job.total, self.fates_dir)
            if kills.unsupported:
                out.note(f"--launcher-kills sends only timed kills; these faults need planaria's runtime in the "
                         f"ranks: {'; '.join(kills.unsupported)}")
            self.kills = LauncherKills(kills, out, job.jobdir)
            found.append(self.kills)
        if opts.rank_fates and opts.default_handler == "abort":
            found.append(PlainFailure(self.fates_dir, ctl))
        found += [DiagnosisRequests(job.signals, ctl, out), Incidents(opts.on_hang, job.jobdir.id, ctl, out),
                  Interrupted(job.signals), AbortRequest(ctl)]
        if self.bar is not None:
            found.append(self.bar)
        if opts.rank_fates and opts.start_timeout:
            # a plain program's ranks never say hello: only with their recorders' records can the
            # launcher tell that none started
            found.append(StartBound(self.t_launch, opts.start_timeout, self.fates_dir, ctl))
        if job.deadline is not None and opts.timeout is not None:
            found.append(Deadline(job.deadline, opts.timeout))
        return found

    # ---- stop

    def stop(self, outcome: Outcome) -> None:
        """When the launcher ends the job: a last diagnosis (if asked for), the line saying why, the kill."""
        opts = self.opts
        self.mpiexec_rc = outcome.mpiexec_rc
        diagnose = outcome.kind == HUNG or outcome.kind in (TIMEOUT, ABORTED) and opts.diagnose_on_timeout
        if diagnose and outcome.plain_abort is None:
            # the survivors' state says where they were when the job had to end (a dead peer shows
            # up in the count check)
            answered = diagnose_now(self.controller, self.job.out,
                                    outcome.why if outcome.kind == HUNG else outcome.kind,
                                    ending=outcome.kind == ABORTED)
            self.result.unanswered = outcome.kind == ABORTED and not answered
        if not outcome.stopped:
            return
        say(f"{outcome.why}: stopping the job", opts.prog)
        self.running = ({r for r, rec in rankfate.read_fates(self.fates_dir).items() if "end" not in rec}
                        if opts.rank_fates else set())
        self.t_stop = time.time()
        # mpiexec's helpers outside its process group (a launch agent, ssh or srun, starting a
        # remote daemon; PRRTE starts it in a session of its own) are found now, while they are
        # still its descendants, and ended after it
        helpers = procstat.descendants(self.proc.pid)
        kill_all(self.proc, self.controller)
        end_helpers(helpers)
        self.mpiexec_rc = self.proc.poll()

    # ---- teardown

    def _settle_fates(self, outcome: Outcome) -> dict[int, dict[str, Any]]:
        """How each rank's process ended, read before anything still running is ended, with who ended it."""
        fates = rankfate.settle(self.fates_dir) if self.opts.rank_fates else {}
        left = rankfate.kill_leftovers(fates)
        if left:       # with ULFM, mpiexec can exit (after an MPI_Abort) while ranks still run
            self.job.out.note(f"rank(s) {', '.join(map(str, left))} still ran after mpiexec exited: killed")
            for r in left:
                fates[r]["left_running"] = True
        for r, why in (self.kills.injected if self.kills is not None else {}).items():
            if r in fates and fates[r].get("signal") == signal.SIGKILL:
                fates[r]["injected"] = why
        for r in self.controller.ctl_killed & set(fates):
            if fates[r].get("signal") == signal.SIGKILL:
                fates[r]["ended_by"] = "planaria ctl kill"
        if outcome.stopped:           # what was still running when the launcher ended the job
            for r in self.running & set(fates):
                fates[r]["ended_by"] = outcome.ender
                fates[r]["ended_at"] = self.t_stop        # when the launcher began to end the job
        return fates

    def teardown(self, outcome: Outcome) -> None:
        """The output pumps joined, every rank's end recorded, the final rank table, the controller
        stopped, and what a killed mpiexec leaves behind removed."""
        out, controller, att = self.job.out, self.controller, self.result
        for th in self.pumps:
            th.join(5.0)
        fates = att.fates = self._settle_fates(outcome)
        watch = out.watch
        att.daemon_loss, att.lost_hosts = watch.daemon_loss, list(watch.lost_hosts)
        att.rank_signalled = watch.rank_signalled or any("signal" in rec for rec in fates.values())
        # mpiexec may exit 0 after losing a daemon: then nothing was ok
        final_ok = outcome.kind == FINISHED and self.mpiexec_rc == 0 and not watch.daemon_loss
        if self.opts.restart > 0 and outcome.kind == FINISHED:
            # with ULFM mpiexec may exit 0 although ranks were killed: with --restart a rank whose
            # process is gone without a bye counts as lost, not as "exited without a bye"
            controller.sweep()
        controller.sweep(final=True, final_ok=final_ok, fates=fates)
        att.table = controller.table()
        att.library_crashed = library_crashed(att.table, out.crashes)
        if self.inject and not self.opts.launcher_kills and fates and not att.table:
            out.note("--inject had no effect: no rank used planaria's runtime (planaria.world()); with "
                     "--launcher-kills the launcher sends the plan's timed kills")
        request = controller.abort_request
        if outcome.kind == ABORTED and request is not None:
            for r, info in att.table.items():    # ranks the abort took down, not failures of their own
                # (a rank that left a fatal-error trace, SIGSEGV inside MPI, ended by itself first)
                if (info["state"] == "lost" and (info.get("fail_time") or 0) >= request["t"]
                        and not out.crashes.error(r)):
                    info["reason"] = "ended by the job abort (default event handler)"
        if outcome.kind == FINISHED and not final_ok:
            # nothing of this attempt may keep running (and writing checkpoints) into the next one
            kill_all(self.proc, controller)
        out.sink = None
        from planaria.events.codes import JOB_END   # the event codes load only at the end of an attempt
        controller.notify(JOB_END, {"outcome": outcome.kind, "mpiexec_rc": self.mpiexec_rc, "attempt": self.number})
        controller.stop()
        LIVE.pop(self.proc.pid, None)
        # a killed mpiexec leaves its ranks' shared-memory files in /dev/shm (delete those nothing maps
        # any more) and its session directory
        shmfiles.remove_orphaned()
        sessiondirs.remove_stale(sessiondirs.base_dir(self.env))

    # ---- classify

    def classify(self, outcome: Outcome) -> AttemptResult:
        """The attempt's exit status and final outcome (``failed`` when it finished badly)."""
        att = self.result
        kind, status = outcome.kind, outcome.status
        if kind == FINISHED:
            status = exit_status(att.table, self.mpiexec_rc, att.fates)
            finished = sum(1 for info in att.table.values() if info["state"] == "finished")
            if status == EXIT_OK and att.daemon_loss and finished < self.job.total:
                # the runtime aborted the job: ranks that still said bye had not completed it
                status = EXIT_FAILED
            if status != EXIT_OK:
                kind = "failed"
        att.outcome, att.status, att.mpiexec_rc = kind, status, self.mpiexec_rc
        att.t_end = time.time()
        return att


def kill_live() -> None:
    """End every attempt still running (an unexpected error in the launcher)."""
    for proc, ctl in list(LIVE.values()):
        kill_all(proc, ctl)
        ctl.stop()
    LIVE.clear()

