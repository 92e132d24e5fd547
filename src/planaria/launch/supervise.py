"""The supervision of a running attempt: one loop over watchers, each minding one way the attempt
can end or one thing to do while it runs, until one of them says how it ended (an ``Outcome``).

The watchers, in the order the loop asks them (the order decides when two happen at once):
mpiexec's exit (the loop's tick: it waits up to 0.1 s for it), mpiexec outliving every rank, the
launcher's timed kills (``--launcher-kills``), a failed rank of a program without the runtime,
diagnosis requests (SIGUSR1), the ranks' incidents (``--on-hang``), Ctrl-C/SIGTERM/SIGHUP, an
abort by the default event handler, no rank started by ``--start-timeout``, and the ``--timeout``
deadline.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from planaria.util.record import record
from planaria.launch import onhang, rankfate
from planaria.launch.jobdir import JobDir
from planaria.launch.options import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TIMEOUT, EXIT_USAGE
from planaria.launch.output import Output
from planaria.launch.plaininject import PlainKills
from planaria.util.procstat import running, start_ticks

if TYPE_CHECKING:       # the controller (and ZeroMQ) loads once mpiexec runs (``attempt.py``)
    from planaria.launch.controller import Controller

KILL_GRACE = 3.0
TICK = 0.1                 # seconds the loop waits for mpiexec's exit between two rounds of the watchers

FINISHED, TIMEOUT, INTERRUPTED, ABORTED, HUNG = "finished", "timeout", "interrupted", "aborted", "hung"
NOT_STARTED = "not-started"


@record(frozen=True)
class Outcome:
    """How the supervision of an attempt ended: mpiexec exited (``finished``), or the launcher
    stops the job (``timeout``, ``interrupted``, ``aborted``, ``hung``)."""

    kind: str
    mpiexec_rc: int | None = None      # finished: mpiexec's exit status (None when unknown)
    why: str = ""                      # a stop: the reason the line "<why>: stopping the job" gives
    ender: str = ""                    # a stop: what ended the ranks still running (their ``ended_by``)
    status: int = EXIT_FAILED          # a stop: the attempt's exit status (finished: the ranks decide)
    plain_abort: tuple[int, dict[str, Any]] | None = None   # the rank of a program without the runtime
                                                            # whose end made the launcher abort the job

    @property
    def stopped(self) -> bool:
        """The launcher ends the job (it did not end by itself)."""
        return self.kind != FINISHED


class Watcher(Protocol):
    """One concern of the supervision loop: None to go on, else how the attempt ended."""

    def check(self) -> Outcome | None: ...


def supervise(watchers: Sequence[Watcher]) -> Outcome:
    """Ask the watchers in turn, round after round, until one says how the attempt ended."""
    while True:
        for watcher in watchers:
            outcome = watcher.check()
            if outcome is not None:
                return outcome


_SIGNUMS = {"SIGTERM": int(signal.SIGTERM), "SIGHUP": int(signal.SIGHUP)}


class Signals:
    """What the launcher's signals asked during a job: Ctrl-C, SIGTERM or SIGHUP end it (``by``
    names which), SIGUSR1 asks for a diagnosis now. Handlers are installed once per job, from the
    main thread only, and the previous ones restored after it."""

    def __init__(self) -> None:
        self.interrupted = threading.Event()
        self.by = "Ctrl-C"                  # which signal ended the job
        self.diagnosis = threading.Event()  # SIGUSR1 came since the last diagnosis it started
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        """Take SIGINT, SIGUSR1, SIGTERM and SIGHUP (when this is the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._old[signal.SIGINT] = signal.signal(signal.SIGINT, lambda *_: self.interrupted.set())
        self._old[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, lambda *_: self.diagnosis.set())
        # A batch system cancels a job (scancel, a time limit) or a closed terminal hangs up with
        # these: the job is torn down as for Ctrl-C, never left running without its launcher.
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._ended)

    def _ended(self, signum: int, _frame: FrameType | None) -> None:
        self.by = signal.Signals(signum).name
        self.interrupted.set()

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced."""
        for sig, handler in reversed(list(self._old.items())):
            signal.signal(sig, handler)
        self._old.clear()

    def status(self) -> int:
        """The exit status of a job these signals ended: 130 for Ctrl-C, else 128 + the signal."""
        return EXIT_INTERRUPTED if self.by == "Ctrl-C" else 128 + _SIGNUMS.get(self.by, 15)


def kill_all(proc: subprocess.Popen[bytes], controller: Controller | None) -> None:
    """End the job: SIGTERM to every rank still running on this machine and up to a grace period
    for them to end (``end_ranks``), SIGTERM to what they left in their process groups, then
    SIGTERM to the mpiexec process group, SIGKILL to it after a grace period, and SIGKILL to the
    ranks' groups and to the ranks the controller knows (none without a controller)."""
    pids = local_ranks(controller) if controller is not None else []
    groups = rank_groups(pids, exclude=proc.pid)
    end_ranks(pids)
    # the processes a rank started: mpiexec signals a rank's whole group, but it has nothing to
    # signal once the rank has ended (its recorder, if still writing, ends as its command did)
    signal_groups(groups, signal.SIGTERM)
    _stop_mpiexec(proc)
    signal_groups(groups, signal.SIGKILL)
    kill_ranks(controller.processes() if controller is not None else [])


def end_helpers(procs: Sequence[tuple[int, int]], grace: float = 1.0) -> None:
    """After mpiexec ended: SIGTERM to those of ``procs`` (pid, start ticks) still running, then
    SIGKILL after ``grace`` seconds to those left (an ``srun`` given SIGTERM cancels its step)."""
    left = [(pid, ticks) for pid, ticks in procs if running(pid, ticks)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in left:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + grace
        while left and time.monotonic() < end:
            time.sleep(0.05)
            left = [(pid, ticks) for pid, ticks in left if running(pid, ticks)]
        if not left:
            return


def _stop_mpiexec(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the mpiexec process group, SIGKILL it after a grace period or once mpiexec has gone."""
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


def rank_groups(pids: Sequence[int], exclude: int) -> list[tuple[int, int | None]]:
    """The process groups of ``pids`` (mpiexec starts each rank in a group of its own), but the
    launcher's and ``exclude`` (mpiexec's): (pgid, start time of its leader, None without one)."""
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except (ProcessLookupError, PermissionError):
            continue
    groups -= {os.getpgrp(), exclude, 0, 1}
    return [(g, start_ticks(g)) for g in sorted(groups)]


def signal_groups(groups: Sequence[tuple[int, int | None]], sig: int) -> None:
    """Send ``sig`` to each process group of ``groups`` (``rank_groups``) that still has a member,
    unless its number now belongs to another group: a process of the group's number that started
    at another time than the leader noted (the leader gone, its number reused by a new leader)."""
    for pgid, ticks in groups:
        now = start_ticks(pgid)
        if now is not None and now != ticks:
            continue
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def local_ranks(controller: Controller) -> list[int]:
    """Pids of the job's rank processes still running on this machine: those whose hello the
    controller has (same pid and start time) and the commands the rank recorders still run."""
    pids = {pid for pid, st in controller.processes() if start_ticks(pid) == st}
    if controller.fates_dir is not None:
        for rec in rankfate.read_fates(controller.fates_dir).values():
            pid = rankfate.command_pid(rec)
            if pid is not None:
                pids.add(pid)
    return sorted(pids)


def end_ranks(pids: Sequence[int], grace: float = KILL_GRACE) -> list[int]:
    """SIGTERM each of ``pids`` (and SIGCONT, for a stopped one) and wait up to ``grace`` s for them
    to end; the pids still running then.

    The launcher does this itself before it stops mpiexec: Open MPI's mpiexec (PRRTE) ends its
    ranks with SIGTERM and SIGKILLs them all 250 ms later, or as soon as the first of them has
    exited, so a rank that saves its state on SIGTERM (a fragmented program's trace) would lose
    it whenever another rank was quicker."""
    procs: list[tuple[int, int]] = []
    for pid in pids:
        st = start_ticks(pid)
        if st is None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            continue
        procs.append((pid, st))
    deadline = time.monotonic() + grace
    while True:
        procs = [(pid, st) for pid, st in procs if running(pid, st)]
        if not procs or time.monotonic() >= deadline:
            return [pid for pid, _ in procs]
        time.sleep(0.02)


def kill_ranks(processes: list[tuple[int, int]]) -> list[int]:
    """SIGKILL each (pid, start ticks) that is still that process on this machine; the pids signalled.

    A rank that ended long ago may have left its pid to another process of this user, and a rank
    of another host (or pid namespace) names a pid of its own: the start time tells them apart."""
    killed = []
    for pid, st in processes:
        if start_ticks(pid) != st:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def diagnose_now(controller: Controller, out: Output, why: str, ending: bool = False) -> bool:
    """Collect and analyze the job's global state now (SIGUSR1 to the launcher, or before a timeout
    kill); False when no rank answered. ``ending``: the job is being torn down already (an abort),
    so an empty collection says nothing about the ranks: one line instead of its report."""
    out.note(f"{why}: collecting every rank's state for a diagnosis")
    try:
        res = controller.diagnose()
    except Exception as exc:  # noqa: BLE001 - a diagnosis must never take the launcher down
        out.note(f"diagnosis failed: {type(exc).__name__}: {exc}")
        return False
    answered = bool(res["report"].get("answered"))
    if ending and not answered:
        out.note("no rank answered: the job was already ending; the post-mortem follows once it has")
        return False
    for line in res["report"]["text"].rstrip().splitlines():
        out.note(line)
    out.note(f"state file {res['state']}; report {res['json']}")
    return answered


def _diagnose_in_background(controller: Controller, out: Output, why: str, name: str) -> None:
    threading.Thread(target=diagnose_now, args=(controller, out, why), daemon=True, name=name).start()


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


# --------------------------------------------------------------------------- the watchers


class MpiexecExit:
    """mpiexec exited; waiting for it up to ``TICK`` s is what paces the loop."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def check(self) -> Outcome | None:
        try:
            return Outcome(FINISHED, mpiexec_rc=self.proc.wait(TICK))
        except subprocess.TimeoutExpired:
            return None


class OutlivedRanks:
    """mpiexec still runs well after every rank ended: the launcher ends it."""

    def __init__(self, total: int, fates_dir: Path, proc: subprocess.Popen[bytes], controller: Controller,
                 out: Output) -> None:
        self.outlived = MpiexecOutlived(total)
        self.fates_dir, self.proc, self.controller, self.out = fates_dir, proc, controller, out

    def check(self) -> Outcome | None:
        if not self.outlived.check(time.time(), lambda: rankfate.read_fates(self.fates_dir)):
            return None
        self.out.note(f"every rank's process had ended {self.outlived.grace:g} s before mpiexec: ending it")
        kill_all(self.proc, self.controller)
        return Outcome(FINISHED, mpiexec_rc=self.proc.poll())


class LauncherKills:
    """``--launcher-kills``: the plan's timed kills, sent by the launcher (a program without the
    runtime has no injector); ``injected`` keeps why each rank was killed."""

    def __init__(self, kills: PlainKills, out: Output, jobdir: JobDir) -> None:
        self.kills, self.out, self.jobdir = kills, out, jobdir
        self.injected: dict[int, str] = {}

    def check(self) -> Outcome | None:
        for r, why in self.kills.check(time.time()):
            self.injected[r] = why
            self.out.note(f"rank {r}: {why}")
            self.jobdir.append_events([{"type": "inject", "rank": r, "kind": "kill", "detail": why,
                                        "t": time.time(), "by": "launcher"}])
        for r, why in self.kills.missed:
            self.out.note(f"rank {r}: {why}")
        self.kills.missed = []
        return None


class PlainFailure:
    """A program without planaria's runtime has no default event handler: the launcher is it, and
    ends the job when a rank's process ended badly (``--default-handler abort``)."""

    def __init__(self, fates_dir: Path, controller: Controller) -> None:
        self.watch = rankfate.FailureWatch(fates_dir)
        self.controller = controller

    def check(self) -> Outcome | None:
        bad = self.watch.check(time.time(), lambda: bool(self.controller.pids()))
        if bad is None:
            return None
        request = self.controller.abort_request
        why = (_abort_why(request) if request is not None
               else f"rank {bad[0]} {rankfate.describe(bad[1])} and no rank uses planaria's "
                    "runtime: the default handler ends the job, as mpiexec without ULFM would "
                    "(--default-handler none lets it run on, as plain ULFM)")
        return Outcome(ABORTED, why=why, ender="the job abort (default handler)",
                       status=rankfate.status_of({bad[0]: bad[1]}) or EXIT_FAILED, plain_abort=bad)


class DiagnosisRequests:
    """SIGUSR1 to the launcher: a diagnosis now, in the background; the job runs on."""

    def __init__(self, signals: Signals, controller: Controller, out: Output) -> None:
        self.signals, self.controller, self.out = signals, controller, out

    def check(self) -> Outcome | None:
        if self.signals.diagnosis.is_set():
            self.signals.diagnosis.clear()
            _diagnose_in_background(self.controller, self.out, "SIGUSR1", "planaria-diagnose-signal")
        return None


class Incidents:
    """The ranks' incidents: one line each; a hang is diagnosed or stops the job (``--on-hang``)."""

    def __init__(self, mode: str, job: str, controller: Controller, out: Output) -> None:
        self.incidents = onhang.IncidentWatch(mode, job)
        self.controller, self.out = controller, out

    def check(self) -> Outcome | None:
        ctl = self.controller
        lines, action = self.incidents.take(ctl.take_incidents(), ctl.holds_up, ctl.finished_note)
        for line in lines:
            self.out.note(line)
        if action == "diagnose":
            _diagnose_in_background(ctl, self.out, "hang detected (--on-hang diagnose)", "planaria-diagnose-hang")
        elif action == "abort":
            return Outcome(HUNG, why="hang detected (--on-hang abort)",
                           ender="the launcher after a detected hang (--on-hang abort)", status=EXIT_TIMEOUT)
        return None


class Interrupted:
    """Ctrl-C, SIGTERM or SIGHUP to the launcher: the job is torn down."""

    def __init__(self, signals: Signals) -> None:
        self.signals = signals

    def check(self) -> Outcome | None:
        if not self.signals.interrupted.is_set():
            return None
        by = self.signals.by
        return Outcome(INTERRUPTED, why=f"interrupted ({by})", ender=by, status=self.signals.status())


def _abort_why(request: dict[str, Any]) -> str:
    return f"aborted by rank {request.get('rank')}'s {request['reason']}"


class AbortRequest:
    """A rank's default event handler asked the controller to abort the job."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def check(self) -> Outcome | None:
        request = self.controller.abort_request
        if request is None:
            return None
        return Outcome(ABORTED, why=_abort_why(request), ender="the job abort (default handler)")


class StartBound:
    """``--start-timeout``: no rank has started that long after the launch. A rank has started once
    its recorder wrote its record (``rankfate``) or it said hello to the controller; an MPI
    launcher that cannot start its daemons (a host that does not answer, a Slurm step that waits
    for resources) starts none and may wait for ever, so the job ends then, not at ``--timeout``."""

    def __init__(self, t0: float, bound: float, fates_dir: Path, controller: Controller,
                 interval: float = 0.5) -> None:
        self.t0, self.bound, self.fates_dir, self.controller = t0, bound, fates_dir, controller
        self.interval = interval
        self._next = 0.0
        self.started = False

    def check(self) -> Outcome | None:
        now = time.time()
        if self.started or now < self._next:
            return None
        self._next = now + self.interval
        if self.controller.pids() or rankfate.read_fates(self.fates_dir):
            self.started = True           # from now on the other watchers mind the job
            return None
        if now - self.t0 < self.bound:
            return None
        return Outcome(NOT_STARTED, why=f"no rank had started {self.bound:g} s after the launch (--start-timeout; "
                       "the MPI launcher could not start its daemons, or waits for resources: see the job's "
                       "output.log)",
                       ender=f"the launcher at the start timeout ({self.bound:g} s)", status=EXIT_USAGE)


class Deadline:
    """``--timeout``: the job's time is up."""

    def __init__(self, deadline: float, timeout: float) -> None:
        self.deadline, self.timeout = deadline, timeout

    def check(self) -> Outcome | None:
        if time.time() <= self.deadline:
            return None
        return Outcome(TIMEOUT, why=f"timeout after {self.timeout:g} s",
                       ender=f"the launcher at the timeout ({self.timeout:g} s)", status=EXIT_TIMEOUT)
