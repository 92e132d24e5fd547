"""Recovery driver: working and spare processes around a user's step loop ([Bondarenko 2015]).

The world is split into N working ranks (logical ranks 0..N-1, the communicator the
application uses) and K spares that wait cheaply. On a failure every living process
(working or spare) revokes, shrinks the world, agrees on who is missing, gives each lost
logical rank to a spare (survivors keep theirs), rebuilds the working communicator with
the same logical order, agrees on the newest checkpoint version everyone can restore,
restores it and resumes. A failure during any of this starts the recovery again.

When the spares do not cover the lost ranks, ``on_exhausted="stop"`` raises
``SparesExhausted`` at every rank; a callable continues on fewer ranks: the store rebuilds
the lost ranks' data on the survivors and the callable redistributes it (see ``Resilient``).
"""
from __future__ import annotations

import os
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

import planaria as pl
from planaria.checkpoint.store import WARM, SaveFailed
from planaria.comm.base import Comm, own_calls
from planaria.comm.errors import FailureError, failure_raised
from planaria.errors import RecoveryCallbackFailed, RecoveryStopped, SparesExhausted, Unrecoverable
from planaria.runtime.bootstrap import prepare_wake, spare_waker, tell, wake_spares
from planaria.util.env import PLANARIA_RESTART, PLANARIA_SPARES

State = dict[str, np.ndarray]
SPARE_TAG = 31001
SPARE_POLL = 0.005       # s between a spare's tests of its receive when nothing can wake it
SPARE_BACKSTOP = 0.1     # ... when the working ranks wake it (``wake_spares``): a backstop only
HOT_POLL = 0.0002        # after a wake, until the news (a revoke, a release) has reached its MPI
# ... for at most this long: the window ends as soon as the news is in, so its length only counts
# when the news is slow, as a revoke is on a loaded machine (under the test suite's load one took
# more than 0.1 s to reach a spare, which then slept its whole backstop before joining)
HOT_WINDOW = 1.0
#: this process's wall-clock marks of its last recovery's steps, (name, time.time()), for
#: benchmarks to show where the time of a recovery goes: a spare's "woken" and "revoke seen",
#: then "recovering", "revoked", "spares woken" (the rank that woke them), "voted" (in the old
#: working communicator's agreement), "shrunk", "roles" (gathered), "split", "restored", "resuming"
MARKS: list[tuple[str, float]] = []


def _mark(name: str) -> None:
    MARKS.append((name, time.time()))


_STOPPED = {"SparesExhausted": SparesExhausted, "Unrecoverable": Unrecoverable,
            "RecoveryCallbackFailed": RecoveryCallbackFailed}
CHECKPOINT_REPORT_EVERY = 2.0   # s: a rank tells the controller its checkpoints at most this often
# s after its first resumed step ends that a rank tells the controller about a recovery: the
# ranks end that step a few ms apart on shared cores, and the messages (and the launcher's work
# on them, the event's fan-out to every process) would slow down those still in it
TELL_AFTER = 0.05


@dataclass(frozen=True)
class Recovery:
    """What one completed recovery did, as seen by this rank (wall-clock times in seconds since the
    epoch, durations in seconds). A record of the past: frozen.

    ``res.recoveries`` holds one per recovery this rank took part in as a working rank;
    ``Resilient(on_recovery=fn)`` hands each to ``fn`` as it completes, and under ``planaria run``
    every working rank reports it to the job's controller (``summary.json``'s ``recoveries``).
    """

    detected_at: int                 # step at which this rank saw the failure (-1: it was a spare)
    error: str                       # the error that started it (ProcFailedError, RevokedError...)
    t_detect: float                  # wall clock when this rank saw the failure
    lost: list[int]                  # logical ranks that lost their process
    replaced_by_spare: bool          # some lost rank was taken over by a spare
    version: int                     # checkpoint version (= step) resumed from
    revoke_shrink_s: float = 0.0     # revoke the communicators and shrink the world (last attempt)
    substitution_s: float = 0.0      # spares take the lost logical ranks, working communicator rebuilt
    restore_s: float = 0.0           # agree on the version and restore it
    attempts: int = 1                # 1 + recoveries restarted by a failure during this one
    ranks: int = 0                   # working ranks after recovery
    continued: bool = False          # spares ran out: continued on fewer working ranks
    warm_bytes: int = 0              # warm buffer bytes this rank held when its restore began
    number: int = 0                  # the job's recovery number, the same on every rank (1 first)
    replaced_by: dict[int, int] = field(default_factory=dict)   # lost logical rank -> world rank of its spare
    logical: int = -1                # this rank's logical rank after the recovery
    world_rank: int = -1             # this process's rank in the driver's world (the job's rank)
    t_done: float = 0.0              # wall clock when this rank resumed

    @property
    def total_s(self) -> float:
        """Revoke + shrink, substitution and restore of the attempt that succeeded."""
        return self.revoke_shrink_s + self.substitution_s + self.restore_s

    @property
    def elapsed_s(self) -> float:
        """From this rank's detection to its resumption, failed attempts included."""
        return max(0.0, self.t_done - self.t_detect) if self.t_done else self.total_s

    def to_dict(self) -> dict[str, Any]:
        """The record as plain data (JSON, msgpack): the fields plus ``total_s`` and ``elapsed_s``;
        ``replaced_by`` as ``[[lost logical rank, spare world rank], ...]``."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["replaced_by"] = [[int(k), int(v)] for k, v in sorted(self.replaced_by.items())]
        out["lost"] = list(self.lost)
        out.update(total_s=self.total_s, elapsed_s=self.elapsed_s)
        return out


@dataclass
class _Layout:
    world: Comm
    logical: int | None              # None: this process is a spare
    nwork: int


class Resilient:
    """Run ``step`` over a resilient working communicator, with spares and checkpoints.

    ``spares``: how many of the world's processes are spares (default: ``$PLANARIA_SPARES``,
    set by ``planaria run --spares``). ``checkpoint``: a store from ``planaria.checkpoint``
    (``save``/``restorable``/``restore``). ``every``: checkpoint interval in steps; the version
    of a checkpoint is its step number, and the store is told the spacing (``set_spacing``), so
    that a ``MultiLevel`` level ``(store, k)`` holds every k-th checkpoint, not every k-th step.
    ``resume``: at start, continue from the newest complete version the store holds (a job
    restarted by ``planaria run --restart`` finds its file checkpoints in the job directory).
    ``on_exhausted``: what to do when more working ranks are lost at once than there are
    spares. ``"stop"`` raises ``SparesExhausted`` at every living process. A callable continues
    on fewer ranks: every living process becomes a working rank of a new, smaller
    communicator ``comm`` -- the survivors first, in their old logical order, then the spares
    that were left (they take no lost logical rank: with ``S`` spares and ``L > S`` lost ranks
    the job goes on with ``old_size - L + S`` working ranks). The driver agrees on the newest
    version the store can rebuild without the lost ranks (``store.recoverable_lost``), rebuilds
    it (``store.recover_lost``) and calls, on every rank of ``comm``,

        ``fn(comm, version, mine, found, lost, old_size) -> state``

    ``mine``: this rank's own state at ``version`` (None on a spare that joined); ``found``:
    ``{lost logical rank: state}`` for the lost ranks whose data this rank rebuilt (each lost
    rank's state appears on exactly one rank); ``lost``: the old logical ranks that are gone
    for good; ``old_size``: the number of working ranks before. The old logical rank of
    ``comm`` rank ``i`` is ``[l for l in range(old_size) if l not in lost][i]`` for the
    survivors. ``fn`` redistributes the data (collectively over ``comm``) and returns this
    rank's new state; the driver checkpoints it at ``version`` on the smaller communicator
    and resumes there (logical rank = ``comm.rank``).

    A save that every working rank gives up alike (``SaveFailed``: a file store's rank could not
    write its file) is not fatal: the version is left out (``failed_saves``), rank 0 says so on
    stderr, and the steps go on; a recovery resumes from the newest version saved before it. When
    that was the last step's save, a failure during ``finish`` resumes from that older version
    and runs the steps after it again.

    ``warm_spares``: after a checkpoint whose buffer sizes changed, every working rank tells
    the spares what a restore in its place would allocate (``store.footprint()``) and each
    spare faults that much memory in while it waits (``planaria.checkpoint.store.WARM``), so
    that taking over a rank does not pay first-touch page faults during the recovery. A spare
    then holds about 3x the largest rank's state for partner-memory checkpoints; ``False``
    turns it off. A spare sleeps between two tests of its receive. Under ``planaria run`` the
    working ranks wake it through the job's controller when a recovery starts or the run ends, so
    it joins a recovery (whose shrink needs every living process) as soon as the news arrives;
    ``spare_poll`` is then only a backstop (default 0.1 s). Without ``planaria run``'s runtime the
    working ranks wake the spares on their host directly (``planaria.runtime.sparewake``): with
    every rank on one host ``spare_poll`` is again a backstop, else (default 5 ms) it bounds how
    late a spare on another host joins.

    ``on_recovery``: called as ``fn(record)`` on every working rank after each completed recovery,
    before the first step it resumes with, with that recovery's ``Recovery`` record (lost logical
    ranks, the spare that replaced each, the version restored, the step it was seen at, the
    attempts, each phase's time). An exception it raises does not pass silently and does not break
    the protocol: the driver catches it, finishes the recovery, and then every working rank learns
    (one ``allgather``) whether the callback raised anywhere; if so, every living process, spares
    included, raises ``RecoveryCallbackFailed`` (a ``RecoveryStopped``: exit status 3), and the rank
    where it was raised prints its traceback first. When no process has a callback, that
    ``allgather`` is skipped (every process learns it during the recovery). ``res.comm`` is the repaired working
    communicator by then; a ``FailureError`` out of the callback's own communication on it starts
    the next recovery, like one in a step.
    """

    def __init__(self, checkpoint: Any, *, every: int = 10, spares: int | None = None,
                 world: Comm | None = None, on_exhausted: str | Callable[..., State] = "stop",
                 resume: bool = True, warm_spares: bool = True, spare_poll: float | None = None,
                 on_recovery: Callable[[Recovery], Any] | None = None) -> None:
        self.failure_events: list[Any] = []       # process-failure events the resilient handler completed
        _claim_failure_events(self)               # before pl.world(): a failure may strike at once
        self.world = world if world is not None else pl.world()
        self.spares = int(os.environ.get(PLANARIA_SPARES, "0") or 0) if spares is None else spares
        if not 0 <= self.spares < self.world.size:
            raise ValueError(f"spares must be in [0, {self.world.size - 1}], got {self.spares}")
        self.store = checkpoint
        self.every = every
        spacing = getattr(checkpoint, "set_spacing", None)
        if spacing is not None:       # versions are steps: a MultiLevel's intervals count checkpoints
            spacing(every)
        self.resume = resume
        self.resumed_from: int | None = None
        self.on_exhausted = on_exhausted
        self.warm_spares = bool(warm_spares)
        nwork = self.world.size - self.spares
        logical = self.world.rank if self.world.rank < nwork else None
        self._waker = spare_waker(self.world.world_ranks()[self.world.rank]) if logical is None else None
        if logical is not None and self.spares:
            prepare_wake()
        if spare_poll is None:
            spare_poll = SPARE_BACKSTOP if self._waker is not None and self._waker.reaches_all else SPARE_POLL
        if not 0 < spare_poll <= 1:
            raise ValueError(f"spare_poll must be in (0, 1] seconds, got {spare_poll}")
        self.spare_poll = float(spare_poll)
        self.spare_wakes = 0           # on a spare: how often the working ranks woke it
        self._fp_sent: list[int] | None = None        # footprint this rank last told the spares
        self._footprints: dict[int, list[int]] = {}   # on a spare: logical rank -> its footprint
        self._lay = _Layout(self.world, logical, nwork)
        self.role = "initial" if logical is not None else "spare"
        if logical is None:
            _tell_role("spare", None)      # the controller wakes the ranks it knows as spares
        self.comm: Comm | None = None
        self.recoveries: list[Recovery] = []
        self._has_state = logical is not None     # False on a spare until it has restored a state
        self.checkpoint_times: list[float] = []
        self.failed_saves: list[int] = []        # versions every rank gave up (``SaveFailed``)
        self._newest_saved = -1                   # newest version this process saved (-1: none)
        if on_recovery is not None and not callable(on_recovery):
            raise TypeError(f"on_recovery must be callable, got {type(on_recovery).__name__}")
        self.on_recovery = on_recovery
        self._world_rank = self.world.rank        # the job's rank of this process (ranks change on shrink)
        self._done = 0                            # the job's number of the last recovery this process completed
        self._announced = 0                       # recoveries handed to on_recovery
        self._untold: list[Recovery] = []         # ... and not yet told to the controller
        self._tell_at: float | None = None        # ... told at the first step end from then on
        self._callback_error: BaseException | None = None    # what on_recovery raised here, not yet told
        self._callbacks = on_recovery is not None  # some process has on_recovery (learnt in each recovery)
        self._ck_pending: list[list[float]] = []  # checkpoints not yet told to the controller
        self._ck_told = time.monotonic()
        self._after_resume: list[Callable[[], None]] = []   # run after the first step resumed after a recovery
        if logical is not None and self.spares:
            self._name_spares()

    # -- public ------------------------------------------------------------------------
    @property
    def logical_rank(self) -> int | None:
        return self._lay.logical

    def run(self, init: Callable[[Comm], State], step: Callable[[Comm, State, int], None],
            steps: int, finish: Callable[[Comm, State], Any] | None = None) -> Any:
        """Run ``steps`` steps; returns this rank's final state (None on a spare never used).

        ``finish(comm, state) -> result`` is an epilogue (gathering the result, writing a report)
        run under the same protection as the steps: a failure inside it, or before every rank
        has come out of it, is recovered from the final checkpoint and ``finish`` runs again on
        the repaired communicator. When given, ``run`` returns its result instead of the state.
        The steps end (and ``finish`` starts) only once the checkpoint of the last step is held in
        full by every working rank, so a failure from then on resumes from it: no step runs twice.
        Spares are released only once ``finish`` has succeeded everywhere. When the job cannot
        go on (``SparesExhausted``, ``Unrecoverable``), every living process raises the same
        error, spares that were still waiting included.
        """
        try:
            return self._run(init, step, steps, finish)
        except RecoveryStopped as err:
            self._stop_spares(err)
            self._tell_untold(agreed=False)
            raise

    def _run(self, init: Callable[[Comm], State], step: Callable[[Comm, State, int], None],
             steps: int, finish: Callable[[Comm, State], Any] | None) -> Any:
        lay = self._lay
        self._init = init
        try:                                  # a failure may strike from the very first call
            # Ranks reach this point up to hundreds of ms apart at start-up. Wait for them in an
            # agreement (a failure there raises at every rank), not inside the split: Open MPI
            # 5.0 can crash a process that learns of a failure while it waits inside a
            # communicator's creation (docs/recovery.md, "A limit of the MPI library").
            _agree(lay.world, True)
            self.comm = _split(lay.world, 0 if lay.logical is not None else None, lay.logical or 0)
            if lay.logical is None:
                resumed = self._spare_wait()
            else:
                resumed = self._resume_from_store() if self.resume else None
                if resumed is None:
                    resumed = self._start(self._working())
        except FailureError as err:
            resumed = self._recover(err, 0)
        if resumed is None:                   # a spare released without being needed
            return None
        i, state = resumed
        while True:
            try:
                comm = self._working()      # a recovery (below) makes a new one
                if len(self.recoveries) > self._announced:
                    self._announce(comm)
                while i < steps:
                    pl.step(i)
                    step(comm, state, i)
                    i += 1
                    if self._untold:
                        self._tell_when_due()
                    if i % self.every == 0 or i == steps:
                        self._save(i, state)
                    if lay.world.is_revoked():
                        raise failure_raised(pl.RevokedError("world revoked (a spare failed or recovery started elsewhere)"))
                self._last_complete()
                result = state
                if finish is not None:
                    result = self._finish(finish, state)
                break
            except FailureError as err:
                resumed = self._recover(err, i, state)
                if resumed is None:
                    return None
                i, state = resumed
        self._release_spares()
        self._tell_untold()
        return result

    def _announce(self, comm: Comm) -> None:
        """After a recovery, before the next step: call ``on_recovery`` and learn whether it raised at
        any working rank (the controller is told after the first resumed step, ``_tell_when_due``).

        Every working rank comes here at the same point, and one ``allgather`` on the working
        communicator keeps them on one path: all resume, or all raise ``RecoveryCallbackFailed``
        (the spares too, through ``run``). It is skipped when no process has a callback: every
        rank learnt that from the recovery's own allgather, so all skip it alike. A failure during the exchange is recovered from like a
        failure in a step; what a callback raised is told after that recovery then.
        """
        new = self.recoveries[self._announced:]
        self._announced = len(self.recoveries)
        self._untold += new
        self._tell_at = None              # the wait starts again at the end of this first resumed step
        if self.on_recovery is not None and self._callback_error is None:
            for rec in new:
                try:
                    self.on_recovery(rec)
                except FailureError:
                    raise                 # a failure in its own communication: recovered from like any
                except Exception as exc:  # noqa: BLE001 - told to every rank below, then raised
                    self._callback_error = exc
                    break
        err = self._callback_error
        if not self._callbacks:
            return                        # no process has a callback (the recovery's allgather said)
        said = comm.allgather(None if err is None else f"{type(err).__name__}: {err}".splitlines()[0][:200])
        bad = [(lg, what) for lg, what in enumerate(said) if what is not None]
        if not bad:
            return                        # the records go out after the first resumed step (_tell_when_due)
        self._tell_untold(agreed=False)
        if err is not None:
            import traceback
            traceback.print_exception(type(err), err, err.__traceback__)
        where = ", ".join(str(lg) for lg, _ in bad)
        raise RecoveryCallbackFailed(f"on_recovery raised on logical rank(s) {where} after recovery "
                                     f"{new[-1].number if new else self._done}: {bad[0][1]}") from err

    def _tell_when_due(self) -> None:
        """At a step's end after a recovery: ``_tell_untold`` once ``TELL_AFTER`` s have passed
        since the first resumed step ended (that step's end starts the wait)."""
        now = time.monotonic()
        if self._tell_at is None:
            self._tell_at = now + TELL_AFTER
        elif now >= self._tell_at:
            self._tell_untold()

    def _tell_untold(self, agreed: bool = True) -> None:
        """The recoveries not told yet, to the controller; from logical rank 0 also as
        ``PLANARIA_EVENT_RECOVERED`` once every working rank ``agreed`` to resume. Called
        ``TELL_AFTER`` s after the first resumed step (``_tell_when_due``), or when the run ends:
        the messages and the event's fan-out to every process would otherwise delay that step on
        a host whose cores the ranks share. What a recovery left for after that step
        (``_after_resume``) runs first."""
        after, self._after_resume = self._after_resume, []
        for fn in after:
            fn()
        untold, self._untold = self._untold, []
        self._tell_at = None
        for rec in untold:
            tell("recovery", restart=_restart(), **rec.to_dict())
        self._flush_checkpoints(force=True)
        if agreed and self._lay.logical == 0:
            for rec in untold:
                _tell_recovered(rec)

    def _flush_checkpoints(self, force: bool = False) -> None:
        """Tell the controller the checkpoints taken since the last time (at most every
        ``CHECKPOINT_REPORT_EVERY`` s, unless ``force``): ``[wall-clock start, seconds, version]``."""
        if not self._ck_pending or not (force or time.monotonic() - self._ck_told >= CHECKPOINT_REPORT_EVERY):
            return
        pending, self._ck_pending = self._ck_pending, []
        self._ck_told = time.monotonic()
        tell("checkpoints", times=pending, logical=self._lay.logical, restart=_restart())

    # -- internals ---------------------------------------------------------------------------
    def _working(self) -> Comm:
        """The working communicator (a working rank always has one; a spare has none)."""
        assert self.comm is not None
        return self.comm

    def _last_complete(self) -> None:
        """Return once the checkpoint of the last step is held in full by every working rank.

        A memory store's save returns before its partners hold their copies: a rank that went on
        into ``finish`` and failed there could otherwise leave a checkpoint before the last one
        as the newest complete, and the steps after it would be run again."""
        wait = getattr(self.store, "wait_complete", None)
        if wait is not None:
            pl.phase("complete")
            wait(self._working())

    def _finish(self, finish: Callable[[Comm, State], Any], state: State) -> Any:
        """Run the epilogue and leave it uniformly: every working rank ends in the same agreement.

        A rank whose ``finish`` raised revokes the working communicator (ranks still inside
        ``finish`` waiting on it wake up) and still takes part in the agreement, voting no; a
        rank that went straight to the recovery instead would wait in the world's shrink while
        the others wait in the agreement for it (agreements are not interrupted by a revoke).
        """
        pl.phase("finish")
        comm = self._working()
        failed: FailureError | None = None
        result = None
        try:
            result = finish(comm, state)
        except FailureError as err:
            failed = err
            try:
                comm.revoke()
            except FailureError:
                pass
        if not _agree(comm, failed is None):
            raise failure_raised(failed or pl.RevokedError("the epilogue failed at another rank"))
        return result

    def _resume_from_store(self) -> tuple[int, State] | None:
        """A restarted job: resume from the newest complete version the store still has (file levels)."""
        comm = self._working()
        everyone = set(range(comm.size))
        version = self.store.restorable(comm, everyone)
        if version is None:
            return None
        state = self.store.restore(self.comm, version, everyone)
        self.resumed_from = version
        return version, state

    def _start(self, comm: Comm) -> tuple[int, State]:
        """Fresh start: the application's initial state, checkpointed as version 0."""
        state = self._init(comm)
        self._save(0, state)
        return 0, state

    def _save(self, version: int, state: State) -> None:
        pl.phase("checkpoint")
        wall, t = time.time(), time.perf_counter()
        try:
            self.store.save(self.comm, version, state)
        except SaveFailed as err:
            # every working rank gave this save up alike (a rank could not write): the versions
            # saved before stay complete, so the run goes on and a recovery resumes from them
            self.failed_saves.append(version)
            if self._lay.logical == 0:
                since = (f"resume from version {self._newest_saved}" if self._newest_saved >= 0
                         else "start again from the initial state")
                print(f"planaria: {err}; going on, a recovery would {since}", file=sys.stderr, flush=True)
            return
        took = time.perf_counter() - t
        self.checkpoint_times.append(took)
        self._ck_pending.append([round(wall, 6), round(took, 6), version])
        self._flush_checkpoints()
        self._newest_saved = max(self._newest_saved, version)
        self._tell_spares()

    def _tell_spares(self) -> None:
        """Send the spares this rank's restore footprint when it changed (see ``warm_spares``)."""
        lay = self._lay
        if not self.warm_spares or lay.logical is None:
            return
        fp = list(self.store.footprint()) if hasattr(self.store, "footprint") else []
        if fp == self._fp_sent:
            return
        self._fp_sent = fp
        for r in self._spare_world_ranks:
            try:
                lay.world.send(("warm", lay.logical, fp), dest=r, tag=SPARE_TAG)
            except FailureError:
                pass      # a dead spare, or a recovery under way: the step loop checks the world
        if self._spare_world_ranks:
            wake_spares(self._spare_job_ranks(), warm=True)   # a sleeping spare warms up now, not at its next backstop test (or never)

    def _warm_up(self, logical: int, fp: list[int]) -> None:
        """On a spare: keep warm the buffers of the largest rank it might replace."""
        self._footprints[int(logical)] = [int(n) for n in fp]
        WARM.reserve(max(self._footprints.values(), key=sum))

    def _spare_wait(self) -> tuple[int, State] | None:
        """Wait without spinning until released (None) or needed (returns where to resume)."""
        world = self._lay.world
        MARKS.clear()
        req = world.irecv_matched(tag=SPARE_TAG)
        hot_until = 0.0            # after a wake: test every HOT_POLL s until the news is in
        news = False               # ... and the wake was not only for footprints: news is on its way
        while True:
            try:
                with own_calls():
                    done, msg = req.test()
            except pl.RevokedError as err:      # the working ranks started a recovery: join it
                _mark("revoke seen")
                return self._recover(err, -1)
            except pl.ProcFailedError:
                # Some process failed. Only the working ranks decide whether that needs a recovery
                # (they revoke the world if so); a spare that started one on its own could find
                # the working ranks already gone. Acknowledge and keep waiting, unless no working
                # rank is left to decide: then nobody would ever wake this spare.
                spares = self._spare_world_ranks
                if (world.ack_failed() >= world.size - len(spares)
                        and not set(range(world.size)) - world.get_failed() - set(spares)):
                    raise Unrecoverable("every working rank failed: none is left to run a recovery") from None
                continue
            if done:
                if isinstance(msg, tuple) and len(msg) == 3 and msg[0] == "warm":
                    self._warm_up(msg[1], msg[2])
                    req = world.irecv_matched(tag=SPARE_TAG)
                    if not news:            # what woke it is read: back to sleeping
                        hot_until = 0.0
                    continue
                if isinstance(msg, tuple) and len(msg) == 3 and msg[0] == "stop" and msg[1] in _STOPPED:
                    raise _STOPPED[msg[1]](msg[2])
                return None
            if time.monotonic() < hot_until:
                time.sleep(HOT_POLL)
            elif woke := self._sleep():
                # a recovery's wake read together with a footprint's: after reading the footprint
                # it still tests until the revoke arrives, not at its next backstop test
                _mark("woken")
                news = woke == "news"
                hot_until = time.monotonic() + HOT_WINDOW

    def _sleep(self) -> str:
        """Sleep until woken ("warm" or "news", see ``sparewake.Waker.wait``) or for ``spare_poll`` seconds ("")."""
        if self._waker is None:
            time.sleep(self.spare_poll)
            return ""
        woke = self._waker.wait(self.spare_poll)
        if woke:
            self.spare_wakes += 1
        return woke

    def _release_spares(self, msg: Any = "done") -> None:
        """Every working rank tells every spare it is done: one message is enough for a spare,
        so a working rank that dies on its way out cannot leave the spares waiting."""
        lay = self._lay
        if lay.logical is None:
            return
        for r in self._spare_world_ranks:
            try:
                lay.world.send(msg, dest=r, tag=SPARE_TAG)
            except FailureError:
                pass
        if self._spare_world_ranks:
            wake_spares(self._spare_job_ranks())

    def _stop_spares(self, err: RecoveryStopped) -> None:
        """The job stops: the spares still waiting raise the same error as the working ranks."""
        self._release_spares(("stop", type(err).__name__, str(err)))

    @property
    def _spare_world_ranks(self) -> list[int]:
        return getattr(self, "_spare_ranks", list(range(self._lay.nwork, self._lay.world.size)))

    def _name_spares(self) -> None:
        """Look the spares' job ranks up now (``_spare_job_ranks``), while nothing waits for them."""
        self._spare_job_ranks()

    def _spare_job_ranks(self) -> list[int]:
        """The spares' ranks in the job, which name them for ``wake_spares`` without ``planaria run``:
        looked up once per world and set of spares (a working rank does so when it learns them, off
        the recovery's path)."""
        world, spares = self._lay.world, self._spare_world_ranks
        cached = getattr(self, "_job_ranks_of", None)
        if cached is None or cached[0] is not world or cached[1] != spares:
            table = world.world_ranks()
            cached = self._job_ranks_of = (world, spares, [table[r] for r in spares])
        return cached[2]

    def _recover(self, err: BaseException, at_step: int,
                 current: State | None = None) -> tuple[int, State] | None:
        """Revoke, shrink, substitute spares, agree on a version, restore. Repeats on new failures.

        ``current``: this rank's state when the failure struck; a survivor's restore overwrites
        it in place (memory it already uses) instead of allocating new arrays."""
        t_detect = time.time()
        if self._lay.logical is not None:
            MARKS.clear()           # a spare keeps the marks of its wait
        attempts = 0
        with own_calls():
            while True:
                attempts += 1
                made: list[Comm] = []           # this attempt's communicators (shrunk world, working comm)
                try:
                    return self._recover_once(err, at_step, current, t_detect, attempts, made)
                except FailureError as again:
                    err = again
                    self._abandon(made)

    def _abandon(self, made: list[Comm]) -> None:
        """After a failure during an attempt: revoke the communicators it made and leave its world."""
        lay = self._lay
        # This attempt's communicators are not yet the driver's: revoke them here, or a
        # process still inside a collective on them (waiting for one that left it for the
        # next attempt) would never return.
        for c in reversed(made):
            if c is not lay.world and c is not self.comm:
                try:
                    c.revoke()
                except FailureError:
                    pass
        world = made[0] if made else None
        if world is not None and world is not lay.world:
            _leave(world)   # others may already wait in the agreement on it (_split)

    def _shrink(self, attempts: int) -> Comm:
        """Revoke the working and world communicators, wake the spares, shrink the world."""
        lay = self._lay
        _mark("recovering")
        if self.comm is not None:
            self.comm.revoke()
        # The world first: the spares learn of the recovery from its revoke, and the shrink waits
        # for them; the agreement on the working communicator (``_leave``) waits for the last
        # survivor to notice the failure, and would hold the news back from them until then.
        first = not lay.world.is_revoked()
        lay.world.revoke()
        _mark("revoked")
        if first and attempts == 1 and lay.logical is not None and self._spare_world_ranks:
            wake_spares(self._spare_job_ranks())   # the spares sleep: the revoke alone would wait for their next test
            _mark("spares woken")
        if self.comm is not None:
            _leave(self.comm)
            _mark("voted")
        w = lay.world.shrink()
        _mark("shrunk")
        return w

    def _recover_once(self, err: BaseException, at_step: int, current: State | None, t_detect: float,
                      attempts: int, made: list[Comm]) -> tuple[int, State] | None:
        """One attempt of ``_recover``; a ``FailureError`` means another one is needed."""
        lay = self._lay
        t0 = time.perf_counter()
        world = self._shrink(attempts)
        made.append(world)
        t1 = time.perf_counter()
        pl.phase("recover")     # a failure may strike in the middle of recovery
        # (logical rank, holds its state?, job rank, last recovery completed): a spare that took a
        # rank but was interrupted before its restore finished still holds nothing, and must be
        # restored as fresh; the newest recovery anyone completed numbers this one
        # ... whether it has an on_recovery callback (none anywhere: no agreement on its outcome), and
        # what checkpoints it holds, when the store can agree on a version from that without messages
        pairs = world.allgather((lay.logical, self._has_state, self._world_rank, self._done,
                                 self.on_recovery is not None, self._offer()))
        _mark("roles")
        info = [p[0] for p in pairs]
        number = max(p[3] for p in pairs) + 1
        self._callbacks = any(p[4] for p in pairs)
        lost = sorted(set(range(lay.nwork)) - {lg for lg in info if lg is not None})
        empty = {p[0] for p in pairs if p[0] is not None and not p[1]}
        spare_ranks = [r for r, lg in enumerate(info) if lg is None]
        if len(spare_ranks) < len(lost):
            return self._exhausted(world, info, lost, at_step, err, (t_detect, t0, t1), attempts, number)
        replaced = {lost[k]: int(pairs[r][2]) for k, r in enumerate(spare_ranks[:len(lost)])}
        mine = lay.logical
        was_spare = mine is None
        if was_spare and world.rank in spare_ranks[:len(lost)]:
            mine = lost[spare_ranks.index(world.rank)]
        comm = _split(world, 0 if mine is not None else None, mine or 0)
        if comm is not None:
            made.append(comm)
        t2 = time.perf_counter()
        _mark("split")
        self._spare_ranks = spare_ranks[len(lost):]
        self._fp_sent = None          # the spares left learn footprints again on the new world
        lay.world, lay.logical, self.comm = world, mine, comm
        if mine is None:            # still a spare: back to waiting
            self._done = number
            return self._spare_wait()
        assert comm is not None     # a working rank's split gives one
        if was_spare:
            self._has_state = False
            self._after_resume.append(self._no_longer_spare)
        if self._spare_ranks:       # the spares left, named for the next wake (off this recovery's path)
            self._after_resume.append(self._name_spares)
        warm = WARM.held()
        offers = {p[0]: p[5] for p in pairs if p[0] is not None and p[1]}
        version, state = self._restore(comm, lost, set(lost) | empty, mine, current, offers)
        t3 = time.perf_counter()
        _mark("restored")
        if was_spare:
            self.role = "recovered"
        elif self.role == "initial":
            self.role = "survivor"
        _tell_role(self.role, mine)
        self._done = number
        self.recoveries.append(Recovery(at_step, type(err).__name__, t_detect, lost, bool(lost), version,
                                        t1 - t0, t2 - t1, t3 - t2, attempts, comm.size, warm_bytes=warm,
                                        number=number, replaced_by=replaced, logical=mine,
                                        world_rank=self._world_rank, t_done=time.time()))
        _mark("resuming")
        return version, state

    def _no_longer_spare(self) -> None:
        """A spare that took over a rank, after its first resumed step (off the recovery's critical
        path): no longer woken as a spare, and the warm memory its restore did not take given back."""
        if self._waker is not None:
            self._waker.close()
        WARM.reserve([])

    def _offer(self) -> Any:
        """What this working rank holds, for the store to agree on a version without messages
        (``store.offer``); None on a spare, without a state, or when the store cannot."""
        offer = getattr(self.store, "offer", None)
        if offer is None or self._lay.logical is None or not self._has_state:
            return None
        return offer(self._lay.logical)

    def _restore(self, comm: Comm, lost: list[int], fresh: set[int], mine: int,
                 current: State | None, offers: dict[int, Any]) -> tuple[int, State]:
        """Agree on the version to restore and restore it (from the start when nothing was ever saved).

        ``offers``: logical rank -> what it holds (``store.offer``), from the recovery's allgather;
        when every rank that is not fresh gave one, the version is agreed on from them, and the
        store's restore is told so (it need not ask every rank again), else with
        ``store.restorable``. Every rank sees the same offers, so all take the same path."""
        others = [lg for lg in range(comm.size) if lg not in fresh]
        known: list[Any] | None = None
        if others and all(offers.get(lg) is not None for lg in others):
            known = [offers.get(lg) for lg in range(comm.size)]
            version = self.store.restorable_among(known, fresh)
        else:
            version = self.store.restorable(comm, fresh)
        newest = max(self._newest_saved, -1 if self.resumed_from is None else self.resumed_from)
        if version is None and comm.allreduce(newest, op=max) <= 0:
            # Nothing past the initial state was ever saved or resumed from (version 0
            # is init's output), so starting again from the beginning loses nothing.
            version, state = self._start(comm)
        elif version is None:
            raise Unrecoverable(f"no checkpoint version can be restored after losing logical rank(s) {lost}")
        else:
            keep = current if self._has_state and mine not in fresh else None
            state = (self.store.restore(comm, version, fresh, into=keep, offers=known) if known is not None
                     else self.store.restore(comm, version, fresh, into=keep))
        self._has_state = True
        return version, state

    def _exhausted(self, world: Comm, info: list[int | None], lost: list[int], at_step: int, err: BaseException,
                   times: tuple[float, float, float], attempts: int, number: int) -> tuple[int, State] | None:
        """Fewer spares than lost ranks: stop, or continue on the survivors plus the spares left."""
        lay = self._lay
        t_detect, t0, t1 = times
        if self.on_exhausted == "stop" or not callable(self.on_exhausted):
            raise SparesExhausted(f"{len(lost)} working rank(s) lost ({lost}) and only "
                                  f"{sum(1 for lg in info if lg is None)} spare(s) left; stopping as asked")
        # Every living process works from now on: the survivors in their old logical order, then
        # the spares left (they hold no data; the application gives them a share of the work).
        old_size = lay.nwork
        key = lay.logical if lay.logical is not None else old_size + world.rank
        comm = _split(world, 0, key)
        assert comm is not None     # every living process takes part
        try:
            logical = comm.allgather(lay.logical)
            t2 = time.perf_counter()
            version = self.store.recoverable_lost(comm, logical, old_size)
            if version is None:
                raise Unrecoverable(f"no checkpoint version can rebuild the lost logical rank(s) {lost} "
                                    f"on {comm.size} rank(s)")
            mine, found = self.store.recover_lost(comm, version, logical, old_size)
            state = self.on_exhausted(comm, version, mine, found, list(lost), old_size)
            # Checkpoint the redistributed state at once: the versions of the old layout cannot be
            # restored on the new one, so the next failure would otherwise find nothing.
            self.store.save(comm, version, state)
        except FailureError:
            for c in (comm, world):        # wake the others still inside this attempt
                try:
                    c.revoke()
                except Exception:
                    pass
            raise
        joined = lay.logical is None
        lay.world, lay.logical, lay.nwork, self.comm = world, comm.rank, comm.size, comm
        self._spare_ranks = []
        self._has_state = True
        self.role = "recovered" if joined else ("survivor" if self.role == "initial" else self.role)
        _tell_role(self.role, comm.rank)
        self._done = number
        self.recoveries.append(Recovery(at_step, type(err).__name__, t_detect, lost,
                                        any(lg is None for lg in logical), version, t1 - t0, t2 - t1,
                                        time.perf_counter() - t2, attempts, comm.size, continued=True,
                                        number=number, logical=comm.rank, world_rank=self._world_rank,
                                        t_done=time.time()))
        return version, state


RESILIENT_HANDLER = "planaria-resilient"


_EARLY_EVENTS: list[Any] = []        # failure events completed before any Resilient existed


def _claim_failure_events(driver: Resilient | None) -> None:
    """Register the resilient event handler (PMIx-style, ahead of the default abort): a process
    failure is this driver's to recover from, so the chain stops before the default handler.
    A newer driver in the same process takes the handler over, with the events seen so far."""
    from planaria import events

    if driver is None:
        events.handle_failures(RESILIENT_HANDLER, _EARLY_EVENTS.append, action="ulfm-recovery")
        return
    driver.failure_events.extend(_EARLY_EVENTS)
    _EARLY_EVENTS.clear()
    events.handle_failures(RESILIENT_HANDLER, driver.failure_events.append, action="ulfm-recovery")


# A program that imports the driver recovers from failures: claim them from the import on, before
# pl.world() connects this process to the controller, so a rank killed while the others are still
# starting up (before any Resilient exists) cannot reach the default handler's abort.
_claim_failure_events(None)


def _restart() -> int:
    """The restart number of this attempt of the job (``planaria run --restart``; 0 first)."""
    try:
        return int(os.environ.get(PLANARIA_RESTART, "0") or 0)
    except ValueError:
        return 0


def _tell_recovered(rec: Recovery) -> None:
    """Raise ``PLANARIA_EVENT_RECOVERED`` for a recovery completed on every working rank (job range:
    the ranks' handlers, and tools that subscribe; only this process's handlers without ``planaria run``)."""
    from planaria import events

    info = {k: v for k, v in rec.to_dict().items()
            if k in ("number", "lost", "replaced_by", "version", "detected_at", "attempts", "total_s")}
    try:
        events.notify(events.RECOVERED, range="job", info=info, affected=sorted(rec.replaced_by.values()))
    except Exception:  # noqa: BLE001 - telling is best effort: the recovery itself is done
        pass


def _tell_role(role: str, logical: int | None) -> None:
    """Let the controller know (``planaria ps``, the job summary): a spare that took over shows
    ``recovered`` and the logical rank it works as."""
    from planaria.runtime.bootstrap import set_role
    set_role(role, logical)


def _split(world: Comm, color: int | None, key: int) -> Comm | None:
    """``world.split`` made uniform: it either succeeds everywhere or raises everywhere.

    Under ULFM a communicator-creating call can succeed at some ranks and fail at others; those
    that got the new communicator would carry on while the others recover. The agreement on
    the outcome (which itself raises at every rank while a failure is unacknowledged) keeps
    every process on the same path.
    """
    comm, ok = None, True
    try:
        comm = world.split(color, key)
    except FailureError:
        ok = False
    if not _agree(world, ok):
        raise failure_raised(pl.RevokedError("creating the working communicator failed at some rank"))
    return comm


# Agreements are not interrupted by a revoke, and ULFM matches them by their order on a
# communicator. So a process that abandons a communicator for the next recovery attempt (the
# working one, or an attempt's shrunk world) first takes part in one agreement on it, voting no,
# unless it already took part in one: the others may wait in theirs (the epilogue's, or _split's)
# for it, and would otherwise wait forever while it waits for them in the next shrink. Each code
# path calls at most one agreement per communicator, so these always pair up.
_AGREED: weakref.WeakSet[Comm] = weakref.WeakSet()


def _agree(comm: Comm, flag: bool) -> bool:
    """``comm.agree(flag)``, remembered as this process's agreement on ``comm``."""
    try:
        return bool(comm.agree(flag))
    finally:
        _AGREED.add(comm)


def _leave(comm: Comm) -> None:
    """Vote no in the one agreement on ``comm`` this process takes part in, if it has not yet."""
    if comm in _AGREED:
        return
    try:
        _agree(comm, False)
    except FailureError:
        pass                     # raised at every member alike: the agreement is over
