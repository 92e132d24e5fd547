"""The per-rank localization service ([Gao 2024] §2.2): timers, probes, responsible ranks, incidents.

A daemon thread beside the application thread. Every tick (``Thresholds.tick``: 1 s with the
default thresholds, shorter for short ones, at the same wall-clock instants in every rank;
``busy_tick``, 0.15 s, while its own probes or sends are outstanding and for ``probe`` seconds
after a message from another rank, so that the follow-ups of an exchange do not wait for idle
ticks) it
1. answers probes from other ranks on a *service communicator* (a duplicate of the world
   communicator, so probes travel the same network path as the data): ``ping`` -> ``pong``;
   ``status`` -> what this rank is blocked in, what it sent to / received from the asker;
   ``vote`` -> ping the target and report whether it answered;
2. checks the message timers: the operation the application thread is blocked in (the message
   log reads it from the thread's stack; a call is timed from the tick that first saw it, see
   ``comm/msglog.py``) against its threshold (``Thresholds``: kind of operation x distance);
3. on a timeout, probes the peer: ping (reachable?), then status (did it post the matching
   send? is it computing? is it waiting for me?); a collective asks every member for its
   status to find the ranks that have not arrived;
4. sends the resulting error record ⟨src, dst, time, type, status⟩ to the *responsible rank*
   of ``dst`` (topology-aware: on another host), and turns slow completed messages, I/O
   errors and failures the application saw into records the same way;
5. as a responsible rank, feeds records to the rule base, probes again when the rule base
   asks (ping, or a vote of the target's group), and reports each incident (one root cause
   with its evidence) to the controller, which writes it to the job directory.

Under ``planaria run`` every message on the service communicator is followed by a *knock*: a
short control-plane message, through the controller, that wakes the target's service at once
(``knocked``), so that an idle tick needs no MPI call. An ``Improbe`` at every idle tick from this
second thread slowed tightly coupled jobs (it contends with the application thread's progress
loop: docs/benchmarks.md, HALO); without a controller the idle tick still probes for messages.

Every payload is one msgpack map of at most ``MAX_PROBE_PAYLOAD`` bytes. The thread never
blocks in MPI: sends are non-blocking and abandoned after the probe timeout; receives use
matched probes. A rank that has failed (a simulated zombie) stops answering.
"""
from __future__ import annotations

import _socket          # the C module behind ``socket``: gethostname without socket's import (~2 ms of a rank's start)
import itertools
import threading
import time
from collections.abc import Callable

from planaria.comm import msglog
from planaria.localize import iowatch
from planaria.localize.thresholds import Thresholds

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any
    # the records (and their dataclasses, inspect and json) load with the first record made or
    # received, not at each rank's start
    from planaria.localize.records import ErrorRecord

PING, PONG, STATUS, STATUS_REPLY, VOTE, VOTE_REPLY, REPORT = range(30001, 30008)
HOST_BYTES = 64
_COLL_STATUS_MAX = 64
_RECEIVES = ("Recv", "recv", "Sendrecv", "sendrecv", "Wait(Irecv)", "Wait(irecv)")      # collectives on larger communicators are not status-probed member by member


def service_comm() -> tuple[Any, list[str]] | None:
    """The service communicator (a duplicate of COMM_WORLD) and every rank's host name; None if that fails.

    Collective over COMM_WORLD: called in ``world()`` before fault injection can fire, so no
    failure can interrupt it. Buffer forms only (mpi4py's pickle collectives can hang after a
    failure).
    """
    from mpi4py import MPI
    try:
        svc = MPI.COMM_WORLD.Dup()
        svc.Set_errhandler(MPI.ERRORS_RETURN)
        name = _socket.gethostname().encode("utf-8")[:HOST_BYTES]
        mine = bytearray(name.ljust(HOST_BYTES, b"\0"))       # plain bytes: no numpy at a rank's start
        every = bytearray(svc.Get_size() * HOST_BYTES)
        svc.Allgather([mine, MPI.BYTE], [every, MPI.BYTE])
    except MPI.Exception:
        return None
    hosts = [bytes(every[i:i + HOST_BYTES]).rstrip(b"\0").decode("utf-8", "replace")
             for i in range(0, len(every), HOST_BYTES)]
    return svc, hosts


def aligned_delay(now: float, tick: float) -> float:
    """Seconds from ``now`` (wall clock) to the next multiple of ``tick``: idle ticks fall on the same
    instants in every rank, so a tightly coupled job is interrupted once per tick, by all its
    service threads together, instead of once by each rank at its own moment (each of which
    stalls the ranks that wait on it). Never less than a tenth of a tick, so that a tick that ran
    late does not run again at once."""
    delay = tick - (now % tick)
    return delay + tick if delay < tick / 10 else delay


ROUTED_KEPT = 8       # records kept per responsible rank, to analyse here if that rank has ended
SYMPTOM = "timeout"   # the incident kind of a message timeout not yet explained by a cause


class Service:
    """Localization service of one rank (start with ``start``; one per process)."""

    def __init__(self, rank: int, size: int, thresholds: Thresholds, report: Callable[[dict[str, Any]], None],
                 svc: Any, hosts: list[str], is_dead: Callable[[], bool] = lambda: False, tick: float | None = None,
                 step: Callable[[], int | None] = lambda: None,
                 knock: Callable[[int], None] | None = None,
                 gone: Callable[[], set[int]] = set) -> None:
        from mpi4py import MPI

        from planaria.localize.topology import responsible
        self.MPI = MPI
        self.rank, self.size = rank, size
        self.th = thresholds
        self.tick = thresholds.tick() if tick is None else tick         # idle wake-up interval
        self.busy_tick = min(self.tick, thresholds.busy_tick())          # while answers or sends are due
        self._report_up = report
        self._knock = knock                    # rings a rank's agent (control plane) after a message to it
        self._is_dead = is_dead
        self._step = step
        self._gone = gone                      # ranks known to have ended (finished or failed): no analysis there
        self._left: set[int] = set()           # ranks the controller said have ended (``left``)
        self._left_new: list[int] = []
        self._routed: dict[int, list[ErrorRecord]] = {}   # responsible rank -> records last sent there
        self.log = msglog.log()
        if self.log is not None:
            self.log.resolution = self.tick     # a call first seen at a tick started at most a tick before
        self.svc = svc
        self.hosts = list(hosts)
        self.responsible = [responsible(r, self.hosts) for r in range(size)]
        self._rules: Any = None                # made on first use (``rules``)
        self._rules_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[float, Callable[[Any], None]]] = {}   # probe id -> (deadline, callback)
        self._sends: list[tuple[Any, bytes, float]] = []
        self._engaged_until = 0.0              # busy ticks until then: this rank is in a probe exchange
        self._analysed: set[tuple] = set()
        self._emitted: dict[tuple, tuple[int, Any]] = {}     # incident key -> (evidence count, status) reported
        self._unsettled = False                # an incident was last reported as probing
        self._recvd: dict[tuple[int, int], int] = {}
        self._watch: list | None = None        # [call, time last seen in it, op map once slower than slow_after]
        self._last_in_mpi = time.monotonic()
        self._cursor = {"slow": 0, "io": 0, "fail": 0}
        self._stop = threading.Event()
        self._running = threading.Event()      # cleared by pause(): the thread blocks until resumed or stopped
        self._running.set()
        self._nudge = threading.Event()        # ends the thread's sleep early (pause, stop)
        self._parked = threading.Event()       # set while the thread is blocked by a pause
        self._awake = threading.Event()        # set when the thread has left a pause
        self._thread = threading.Thread(target=self._run, name="planaria-localize", daemon=True)


    @property
    def rules(self) -> Any:
        """This rank's rule base, made when it first analyses a record (most ranks never do, and
        the rule module is the largest a rank would otherwise import at start)."""
        if self._rules is None:
            with self._rules_lock:
                if self._rules is None:
                    from planaria.localize.rules import RuleBase
                    # a suspect out of MPI for as long as the shortest wait that counts as a hang is
                    # computing (the rule base's 5 s otherwise: with short timeouts it would look
                    # healthy and never be named)
                    self._rules = RuleBase.default(hosts=self.hosts, rank=self.rank,
                                                   computing_after=min(5.0, self.th.p2p, self.th.coll))
        return self._rules

    def start(self) -> Service:
        self._thread.start()
        return self

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._running.set()
        self._nudge.set()
        self._thread.join(timeout)

    def pause(self, settle: float = 1.0) -> None:
        """Stop ticking (``set_detection(False)``): the thread blocks, making no MPI call, until resumed or stopped.

        Returns once the thread is blocked (at most ``settle`` s), so that no tick it had
        scheduled comes after the pause.
        """
        if not self._running.is_set():
            return                             # already paused
        self._running.clear()
        self._watch = None
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._nudge.set()
            self._parked.wait(settle)

    def resume(self, settle: float = 1.0) -> None:
        """Tick again. Returns once the thread has woken (at most ``settle`` s), so that waking it
        is not charged to what follows; its first tick then comes at the next aligned instant
        (``aligned_delay``), as at any moment of steady state."""
        if self._running.is_set():
            return                             # already running
        self._awake.clear()
        self._nudge.clear()
        self._running.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._awake.wait(settle)

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    # -- transport -----------------------------------------------------------
    def _send(self, dest: int, tag: int, obj: dict[str, Any]) -> None:
        if dest == self.rank:
            self._dispatch(self.rank, tag, obj)
            return
        import msgpack          # with the first probe: no rank's start pays for it
        buf = msgpack.packb(obj, use_bin_type=True, default=str)
        if len(buf) > _max_payload():
            obj = {k: v for k, v in obj.items() if k not in ("evidence", "sent", "recvd")}
            obj["trimmed"] = True
            buf = msgpack.packb(obj, use_bin_type=True, default=str)
        try:
            req = self.svc.Isend([buf, self.MPI.BYTE], dest, tag)
        except self.MPI.Exception:
            return
        self._sends.append((req, buf, time.monotonic() + self.th.probe * 4))
        if self._knock is not None:
            try:
                self._knock(dest)
            except Exception:  # noqa: BLE001 - the message still arrives; the target sees it when busy or paged
                pass

    def _poll_sends(self) -> None:
        keep = []
        now = time.monotonic()
        for req, buf, deadline in self._sends:
            try:
                done = req.Test()
            except self.MPI.Exception:
                done = True
            if not done and now < deadline:
                keep.append((req, buf, deadline))
        self._sends = keep  # undelivered sends past their deadline are dropped (their buffer stays alive in MPI's hands until freed)

    def _receive(self) -> None:
        MPI = self.MPI
        status = MPI.Status()
        for _ in range(64):
            try:
                msg = self.svc.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            except MPI.Exception:
                self._ack()
                return
            if msg is None:
                return
            buf = bytearray(status.Get_count(MPI.BYTE))
            import msgpack
            try:
                msg.Recv([buf, MPI.BYTE])
                obj = msgpack.unpackb(bytes(buf), raw=False, strict_map_key=False)
            except Exception:  # noqa: BLE001 - a broken probe is ignored
                continue
            if isinstance(obj, dict):
                # a rank asked or told something: answers to its follow-ups come at the busy tick
                self._engaged_until = time.monotonic() + self.th.probe
                self._dispatch(status.Get_source(), status.Get_tag(), obj)

    def _ack(self) -> None:
        try:
            self.svc.Ack_failed()
        except Exception:  # noqa: BLE001 - not ULFM
            pass

    # -- probes ----------------------------------------------------------------
    def _expect(self, callback: Callable[[Any], None], wait: float | None = None) -> int:
        pid = next(self._ids)
        self._waiting[pid] = (time.monotonic() + (wait or self.th.probe), callback)
        return pid

    def ping(self, target: int, callback: Callable[[bool], None]) -> None:
        """Response probe: ``callback(True)`` when ``target`` answers within the probe timeout."""
        pid = self._expect(lambda reply: callback(reply is not None))
        self._send(target, PING, {"id": pid})

    def status(self, target: int, callback: Callable[[dict[str, Any] | None], None],
               query: dict[str, Any] | None = None) -> None:
        """Status probe: ``callback(reply)`` with the target's state, or None; ``query`` names a send to check."""
        pid = self._expect(callback)
        self._send(target, STATUS, {"id": pid, "query": query or {}})

    def vote(self, target: int, voters: list[int], callback: Callable[[dict[int, bool]], None]) -> None:
        """Vote probe: every voter pings ``target``; ``callback({voter: reachable})`` (silent voters left out)."""
        votes: dict[int, bool] = {}
        left = {"n": len(voters)}
        if not voters:
            callback(votes)
            return

        def one(voter: int) -> Callable[[Any], None]:
            def cb(reply: Any) -> None:
                if reply is not None:
                    votes[voter] = bool(reply.get("alive"))
                left["n"] -= 1
                if left["n"] == 0:
                    callback(votes)
            return cb
        for v in voters:
            pid = self._expect(one(v), wait=self.th.probe * 2.5)
            self._send(v, VOTE, {"id": pid, "target": target})

    def _resolve(self, obj: dict[str, Any]) -> None:
        ent = self._waiting.pop(int(obj.get("id", -1)), None)
        if ent is not None:
            ent[1](obj)

    def _expire(self) -> None:
        now = time.monotonic()
        for pid, (deadline, cb) in list(self._waiting.items()):
            if now >= deadline and self._waiting.pop(pid, None) is not None:
                cb(None)

    # -- answering ---------------------------------------------------------------
    def _dispatch(self, src: int, tag: int, obj: dict[str, Any]) -> None:
        if tag == PING:
            self._send(src, PONG, {"id": obj.get("id")})
        elif tag == STATUS:
            self._send(src, STATUS_REPLY, self._my_status(src, obj.get("id"), obj.get("query") or {}))
        elif tag == VOTE:
            target, vid = int(obj.get("target", -1)), obj.get("id")
            self.ping(target, lambda ok: self._send(src, VOTE_REPLY, {"id": vid, "alive": ok}))
        elif tag in (PONG, STATUS_REPLY, VOTE_REPLY):
            self._resolve(obj)
        elif tag == REPORT:
            from planaria.localize.records import ErrorRecord
            try:
                rec = ErrorRecord.from_dict(obj)
            except (KeyError, TypeError, ValueError):
                return
            self._as_responsible(rec)

    def _my_status(self, asker: int, pid: Any, query: dict[str, Any]) -> dict[str, Any]:
        """The ``reply_status`` payload: what this rank is blocked in, where it computes, recent I/O errors,
        collective counters, and whether it posted the send ``query`` asks about (more sends to
        ``query["src"]`` on ``query["comm"]`` than that rank has received; ``for``: that rank)."""
        lg = self.log
        out: dict[str, Any] = {"id": pid, "rank": self.rank, "step": self._step(),
                               "host": self.hosts[self.rank]}
        if lg is None:
            return out
        if lg.injected_hang:
            out["injected"] = lg.injected_hang
        op = lg.current()
        if op is not None:
            op["site"] = _short(lg.site())
        else:
            out["where"] = _short(lg.site())
            out["idle"] = round(time.monotonic() - self._last_in_mpi, 3)
        out["op"] = op
        colls = lg.colls()
        out["colls"] = dict(list(colls.items())[:8])
        if query.get("comm") in colls:            # the communicator the asker waits on, always
            out["colls"][query["comm"]] = colls[query["comm"]]
        out["ioerrors"] = len(lg.ioerrors)
        src, recvd = query.get("src"), query.get("recvd")
        if isinstance(src, int) and isinstance(recvd, int):
            sent = sum(x["count"] for x in lg.sent_to(src) if query.get("comm") in (None, x["comm"]))
            out["sent"] = sent > recvd
            out["sent_count"] = sent
            out["for"] = src            # the waiting rank this answers (several may wait for this one)
        return out

    # -- the loop -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            if self._is_dead():
                return
            if not self._running.is_set():
                self._parked.set()
                self._running.wait()           # blocked: no wake-up, no MPI call while paused
                self._parked.clear()
                self._awake.set()
                self._sleep(aligned_delay(time.time(), self.tick))
                continue
            try:
                if self._knock is None or self._busy():   # with knocks, an idle tick makes no MPI call
                    self._receive()
                    self._poll_sends()
                self._reroute()
                self._expire()
                if self._unsettled:                # its probes may have ended without a new record
                    self._emit()
                self._check_timers()
                self._check_logs()
                iowatch.install()
            except Exception as exc:  # noqa: BLE001 - the service must never take the rank down
                self._report_up({"error": f"{type(exc).__name__}: {exc}"})
            self._sleep(self.busy_tick if self._busy() else aligned_delay(time.time(), self.tick))

    def _busy(self) -> bool:
        """Probes or sends of its own outstanding, or another rank's message (or knock) lately."""
        return bool(self._waiting or self._sends) or time.monotonic() < self._engaged_until

    def knocked(self) -> None:
        """Another rank has just sent this one a message on the service communicator (called from
        the agent thread): receive at busy ticks for ``probe`` seconds, starting now."""
        self._engaged_until = time.monotonic() + self.th.probe
        self._nudge.set()

    def _sleep(self, seconds: float) -> None:
        """Sleep until the next tick, or until pause or stop nudges the thread."""
        self._nudge.wait(seconds)
        self._nudge.clear()

    # -- detection (as the rank that waits) ------------------------------------------
    def _track(self, lg: msglog.MsgLog) -> msglog.Call | None:
        """Follow the application's current call from tick to tick: when it was last in MPI, and
        receives that lasted longer than ``slow_after`` (message-performance anomalies, found here
        rather than on the hot path). A call is timed from half-way between the tick that first saw
        it and the one before; it ended half-way between the last tick that saw it and this one."""
        call = lg.look()
        now = time.monotonic()
        w = self._watch
        if w is not None and w[0] is not call:
            op = w[2]
            if op is not None and op["name"] in _RECEIVES and op["peer"] is not None:
                end = now - min(now - w[1], self.tick) / 2
                lg.push("slow", (op["name"], op["comm"], op["peer"], op["tag"], end - w[0].start, time.time(),
                                 op["site"]))
            self._watch = w = None
        if call is not None:
            self._last_in_mpi = now
            if w is None:
                self._watch = w = [call, now, None]
            w[1] = now
            if w[2] is None and now - call.start > lg.slow_after:
                op = msglog.describe(call)
                op["site"] = lg.site()
                w[2] = op
        return call

    def _check_timers(self) -> None:
        lg = self.log
        if lg is None:
            return
        call = self._track(lg)
        if call is None or time.monotonic() - call.start < min(self.th.p2p, self.th.coll):
            return                          # the common case, decided without building the op map
        op = msglog.describe(call)
        key = (op["name"], op["comm"], op["seq"], round(time.monotonic() - op["since"], 1))
        same_host = op["peer"] is None or self.hosts[op["peer"]] == self.hosts[self.rank]
        members = lg.members_of(op["comm"])
        if op["kind"] == "coll" and members:
            same_host = len({self.hosts[m] for m in members if m < len(self.hosts)}) <= 1
        limit = self.th.limit(op["kind"], same_host, len(members) or 2)
        if op["since"] < limit or key in self._analysed:
            return
        self._analysed.add(key)
        op["site"] = _short(lg.site())
        if op["kind"] == "p2p" and op["peer"] is not None:
            self._probe_peer(op)
        elif op["kind"] == "coll" and members and len(members) <= _COLL_STATUS_MAX:
            self._probe_members(op, [m for m in members if m != self.rank])
        else:
            self._record(None, "coll-timeout" if op["kind"] == "coll" else "msg-timeout", "detected", op, {})

    def _probe_peer(self, op: dict[str, Any]) -> None:
        """Response probe of the peer, then a ``msg-timeout`` record to its responsible rank (paper: step 1)."""
        peer = op["peer"]
        received = _received(op)
        ev: dict[str, Any] = {"received": received, "waited": round(op["since"], 2)}
        other = self.log.unmatched() if self.log is not None and op["name"] in _RECEIVES else None
        if other is not None:     # a message is here that the receive does not match: tell the status probe
            ev["unmatched"] = other
        self.ping(peer, lambda ok: self._record(peer, "msg-timeout", "detected", op, {"ping": ok, **ev}))

    def _probe_members(self, op: dict[str, Any], others: list[int]) -> None:
        """A collective timed out: ask every member for its status to find the ranks that have not arrived."""
        replies: dict[int, Any] = {}

        def one(member: int) -> Callable[[Any], None]:
            def cb(st: Any) -> None:
                replies[member] = st
                if len(replies) == len(others):
                    done()
            return cb

        def done() -> None:
            seq = int(op["seq"] or 0)
            silent = sorted(m for m, st in replies.items() if st is None)
            late = sorted(m for m, st in replies.items()
                          if st is not None and int((st.get("colls") or {}).get(op["comm"], 0)) < seq)
            for m in silent:
                self._record(m, "coll-timeout", "detected", op, {"ping": False, "collective": seq})
            for m in late:
                self._record(m, "coll-timeout", "detected", op, {"ping": True, "collective": seq,
                                                                  "arrived": (replies[m].get("colls") or {}).get(op["comm"])})
            if not silent and not late:
                self._record(None, "coll-timeout", "detected", op, {"collective": seq, "note": "every member has arrived"})
        for m in others:
            self.status(m, one(m), query={"comm": op["comm"]})

    def _check_logs(self) -> None:
        lg = self.log
        if lg is None:
            return
        slow, self._cursor["slow"] = lg.since("slow", self._cursor["slow"])
        ios, self._cursor["io"] = lg.since("io", self._cursor["io"])
        fails, self._cursor["fail"] = lg.since("fail", self._cursor["fail"])
        for name, cid, peer, tag, dt, t, site in slow:
            if name not in _RECEIVES or peer is None:
                continue          # only a wait for a named peer's message blames that peer
            op = {"name": name, "comm": cid, "peer": peer, "tag": tag, "since": dt, "site": _short(site)}
            self._record(peer, "slow-message", "detected", op, {"seconds": round(dt, 3)}, t=t)
        for t, what, site in ios:
            self._record(None, "io-error", "confirmed", {"site": _short(site)}, {"what": what[:160]}, t=t)
        for t, name, cid, ranks, site in fails:
            op = {"name": name, "comm": cid, "peer": None, "site": _short(site)}
            for r in ranks[:8] or [None]:
                self._record(r, "proc-failed", "confirmed", op, {"failed": ranks[:16]}, t=t)

    def _record(self, dst: int | None, etype: str, status: str, op: dict[str, Any] | None,
                evidence: dict[str, Any], t: float | None = None) -> None:
        """Send an error record to the rank responsible for ``dst`` (for this rank when dst is unknown)."""
        from planaria.localize.records import ErrorRecord
        op = op or {}
        tag = op.get("tag")
        rec = ErrorRecord(src=self.rank, dst=dst, time=t or time.time(), type=etype, status=status,
                          evidence=evidence, comm=op.get("comm"), op=op.get("name"), site=op.get("site"),
                          tag=tag if isinstance(tag, int) and tag >= 0 else None,
                          host=self.hosts[dst] if dst is not None and dst < len(self.hosts) else self.hosts[self.rank])
        where = self.responsible[dst if dst is not None else self.rank]
        if where != self.rank:
            try:
                if where in self._left or where in self._gone():      # the responsible rank has ended: analyse here
                    where = self.rank
            except RuntimeError:               # its set changed while read: send as planned
                pass
        if where != self.rank:                 # kept in case it turns out to have ended (``left``)
            self._routed.setdefault(where, []).append(rec)
            del self._routed[where][:-ROUTED_KEPT]
        self._send(where, REPORT, rec.to_dict())

    def left(self, ranks: list[int]) -> None:
        """Ranks this one wrote to that have ended (the controller's answer to the knock, called
        from the agent thread): the records sent there for analysis are analysed here instead."""
        self._left_new.extend(ranks)
        self._nudge.set()

    def _reroute(self) -> None:
        """Analyse here the records last sent to ranks found to have ended."""
        while self._left_new:
            r = self._left_new.pop()
            if r in self._left:
                continue
            self._left.add(r)
            for rec in self._routed.pop(r, []):
                self._as_responsible(rec)

    # -- analysis (as the responsible rank) -----------------------------------------------
    def _as_responsible(self, rec: ErrorRecord) -> None:
        if rec.dst is not None and isinstance(rec.evidence.get("received"), int):
            self._recvd[(rec.src, rec.dst)] = rec.evidence["received"]
        decision = self.rules.submit(rec, now=time.time())
        if decision.probe is not None:
            self._run_probe(decision.probe)
        self._emit()

    def _run_probe(self, probe: Any) -> None:
        """Run a probe the rule base asked for; its outcome goes back to the rule base (which may ask for more)."""
        target = probe.target
        if probe.kind == "ping":
            self.ping(target, lambda ok: self._fed(target, "ping", {"ok": ok}))
        elif probe.kind == "status":
            query = dict(probe.query or {})
            if "src" in query:
                query["recvd"] = self._recvd.get((query["src"], target))
            self.status(target, lambda st: self._fed(target, "status", st if st is not None else {"ok": False}),
                        query=query)
        elif target in self._left:             # the controller said it has ended: no vote can reach it
            self._fed(target, "vote", {"reachable": 0, "unreachable": 1})
        else:
            voters = [v for v in (probe.voters or _group(self.hosts, target))
                      if v not in (target, self.rank) and v not in self._left][:8]
            self.vote(target, voters, lambda votes: self._fed(target, "vote", {"votes": votes}))

    def _fed(self, target: int, kind: str, outcome: dict[str, Any]) -> None:
        for follow in self.rules.probe_result(target, kind, outcome, now=time.time()):
            self._run_probe(follow)
        self._emit()

    def _emit(self) -> None:
        """Report incidents that are new, whose evidence has doubled, or, for a named cause,
        whose status changed (a ``probing`` one settles when its probes end: re-checked every
        tick until then). A bare message timeout is a symptom: its settling alone is not news,
        the cause found from it is."""
        unsettled = False
        if self._rules is None:                # nothing analysed here yet: no incidents
            self._unsettled = False
            return
        for inc in self.rules.incidents(now=time.time()):
            rc = inc.root_cause(max_evidence=4)
            key = (rc.get("kind"), rc.get("verdict"), tuple(rc.get("ranks") or ()))
            count = int(rc.get("count", 1))
            status = rc.get("status")
            symptom = rc.get("kind") == SYMPTOM
            unsettled = unsettled or (status == "probing" and not symptom)
            seen = self._emitted.get(key)
            if seen is not None and count < 2 * seen[0] and (status == seen[1] or symptom):
                continue
            self._emitted[key] = (count, status)
            rc["responsible"] = self.rank
            self._report_up(rc)
        self._unsettled = unsettled


def _max_payload() -> int:
    """``records.MAX_PROBE_PAYLOAD``, imported when a message is first sent (see the imports)."""
    from planaria.localize.records import MAX_PROBE_PAYLOAD
    return MAX_PROBE_PAYLOAD


def _received(op: dict[str, Any]) -> int:
    from planaria.comm import msglog
    lg = msglog.log()
    if lg is None or op.get("peer") is None:
        return 0
    return sum(x["count"] for x in lg.received_from(op["peer"]) if x["comm"] == op["comm"])


def _short(site: str | None, limit: int = 160) -> str | None:
    if site is None or len(site) <= limit:
        return site
    return "…" + site[-(limit - 1):]


def _group(hosts: list[str], rank: int) -> list[int]:
    from planaria.localize.topology import group_of
    return list(group_of(rank, hosts))
