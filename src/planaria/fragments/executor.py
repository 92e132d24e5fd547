"""Run a fragmented program on this process's rank: CFs run where placed once their inputs exist.

One thread per rank (the loop) owns all MPI traffic and the CF tables; a pool of ``threads``
worker threads runs CF bodies. DF values live at a *home* rank (hash of the DF id): writers
send ``put``, readers send ``get`` (answered once the value exists) and cache the value.
A token ring (``termination.py``) ends the run and tells "finished" from "hung"; with a
balancer (``balancer.py``) the last rank runs the load model instead of CFs. Between turns the
loop sleeps until a peer or a pool thread rings its doorbell (``doorbell.py``).
"""
from __future__ import annotations

import heapq
import itertools
import os
import pickle
import queue
import sys
import threading
import time
import traceback
import zlib
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from planaria.fragments import interrupt
from planaria.fragments.balancer import BalancerConfig, LoadModel
from planaria.fragments.doorbell import Doorbell
from planaria.fragments.model import (CFSpec, Code, DFRef, FragmentError, Out, SubContext, resolve,
                                      type_ok)
from planaria.fragments.termination import RingMember, Token
from planaria.trace.writer import DEFAULT_FLUSH_BYTES, TraceWriter
from planaria.errors import PlanariaError
from planaria.util.paths import shown

TAG = 7301
PING_TAG = 7302
_WORK = frozenset({"put", "get", "val", "cf", "cfs", "del"})
_PING_SIZES = (8, 1 << 16)     # latency, then bandwidth; a worker answers each with one byte
_RUNG_TRIES = 3        # probes after a ring: the ringing message is usually matched by the second


@dataclass
class RunResult:
    """How the run ended, seen from this rank (status agreed by all ranks)."""

    status: str                        # "finished" | "hung" | "failed" | "timeout" | "error"
    rank: int
    workers: int
    elapsed: float
    cfs_done: int                      # on all ranks
    unfinished: int                    # on all ranks
    errors: int                        # on all ranks
    balancer_moves: int = 0
    trace_dir: str | None = None
    local: dict[str, Any] = field(default_factory=dict)   # this rank's counters
    message: str | None = None         # status "error": the program error that stopped the run

    @property
    def ok(self) -> bool:
        return self.status == "finished"


@dataclass
class _CF:
    spec: CFSpec
    missing: set[str]
    state: str = "waiting"            # waiting | ready | running | done
    started: float | None = None      # when it started running (time.time())


def _sizeof(v: Any) -> int:
    nb = getattr(v, "nbytes", None)
    if isinstance(nb, int):
        return nb
    if isinstance(v, (int, float, bool)) or v is None:
        return 8
    try:
        return len(pickle.dumps(v, pickle.HIGHEST_PROTOCOL))
    except Exception:
        return 64


def _tname(v: Any) -> str:
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


class _Failure(PlanariaError):
    def __init__(self, rec: dict[str, Any]) -> None:
        super().__init__(rec.get("message", ""))
        self.rec = rec


class Executor:
    """The per-rank runtime. ``comm`` may be None (one process, no MPI)."""

    def __init__(self, comm: Any = None, *, threads: int = 2, trace_dir: str | None = None,
                 trace: bool = True, flush_bytes: int = DEFAULT_FLUSH_BYTES,
                 balancer: BalancerConfig | bool | None = None, timeout: float | None = None,
                 idle_hold: float = 0.0005, termination: str = "safra") -> None:
        self.comm = comm
        self.rank = comm.rank if comm is not None else 0
        self.size = comm.size if comm is not None else 1
        if balancer is True:
            balancer = BalancerConfig.from_env()
        self.bconf: BalancerConfig | None = balancer if isinstance(balancer, BalancerConfig) and self.size >= 3 else None
        self.nworkers = self.size - 1 if self.bconf else self.size
        self.brank = self.size - 1 if self.bconf else None
        self.is_balancer = self.bconf is not None and self.rank == self.brank
        self.threads = max(1, int(threads))
        self.timeout, self.idle_hold = timeout, idle_hold
        self.trace_dir = trace_dir
        self.tw = TraceWriter(trace_dir, self.rank, flush_bytes) if (trace and trace_dir) else None
        self._ids = itertools.count()
        self.cfs: dict[str, _CF] = {}
        self.ready: list[tuple[float, int, str]] = []     # heap: (-priority, arrival, CF id)
        self._arrivals = itertools.count()
        self.values: dict[str, Any] = {}
        self.home_pending: dict[str, set[int]] = {}
        self.waiters: dict[str, list[str]] = {}
        self.requested: set[str] = set()
        self.completions: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.running = 0
        self.sent = self.recvd = 0
        self.done = self.errors = 0
        self.outbox: list[tuple[Any, int]] = []        # sends not complete yet, with their destination
        self.msgs_to = [0] * self.size                 # runtime messages sent to each rank, and received:
        self.msgs_in = 0                               # the closing drain waits for exactly what was sent
        self.ready_notes: list[tuple[str, str, int, float]] = []   # (CF, group, input bytes, priority) for the balancer
        self.wants: list[tuple[int, str]] = []         # (home, DF) requests not sent yet
        # size 1: no bell; a communicator's world ranks name its doorbells (unique in the job)
        self.bell = Doorbell(self.rank, self.size, ids=comm.world_ranks() if self.size > 1 else None)
        self.ring = RingMember(self.rank, self.nworkers, rule=termination)
        self.token: Token | None = Token.start(self.nworkers) if self.rank == 0 else None
        self.verdict: str | None = None
        self.stop_message: str | None = None           # why the run was stopped with verdict "error"
        self.writers: dict[str, str] = {}              # at a DF's home: who assigned it, "expr at file:line"
        self.moves = 0
        self.busy = 0.0                                # seconds the pool spent in CFs that have ended
        self.active: dict[str, float] = {}             # running CF -> when it started (time.time())
        self.pings_left = len(_PING_SIZES) if self.bconf is not None and not self.is_balancer else 0
        self.signals = interrupt.Catcher()
        self.t0 = time.time()

    # -- ids, placement, tracing ------------------------------------------------------------
    def new_id(self) -> str:
        return f"{self.rank}.{next(self._ids)}"

    def home(self, df_id: str) -> int:
        return zlib.crc32(df_id.encode()) % self.nworkers

    def rec(self, rec: dict[str, Any]) -> None:
        if self.tw is not None:
            rec["rank"] = self.rank
            self.tw.write(rec)

    # -- messages ------------------------------------------------------------------------------
    def send(self, dest: int, msg: tuple[Any, ...]) -> None:
        if msg[0] in _WORK:
            self.sent += 1
        if dest == self.rank:
            self.handle(msg)
            return
        self.send_tag(msg, dest)

    def send_tag(self, msg: tuple[Any, ...], dest: int) -> None:
        """Every runtime message to another rank goes through here, so the closing drain knows its count."""
        self.msgs_to[dest] += 1
        self.post(self.comm.isend(msg, dest, TAG), dest)

    def post(self, req: Any, dest: int) -> None:
        """After an ``isend`` to ``dest``: ring its doorbell; keep the request if it is not complete."""
        self.bell.ring(dest)
        if not req.Test():
            self.outbox.append((req, dest))

    def reap(self) -> None:
        """Drop completed sends; ring again for each that completed late (it may have reached the
        receiver only now, after the first ring)."""
        if not self.outbox:
            return
        keep = []
        for req, dest in self.outbox:
            if req.Test():
                self.bell.ring(dest)
            else:
                keep.append((req, dest))
        self.outbox = keep

    def incoming(self, tries: int = 1) -> Iterator[tuple[Any, ...]]:
        """Every runtime message pending now. ``tries``: probes that may come back empty before giving
        up; after a ring the message is often matched only by the second probe (the first one's
        progress call pulls it in)."""
        while True:
            done, msg = self.comm.irecv_matched(tag=TAG).test()
            if done:
                self.msgs_in += 1
                yield msg
                continue
            tries -= 1
            if tries <= 0:
                return

    def poll(self, tries: int = 1) -> bool:
        """Receive and handle every pending message; reap finished sends. True if anything came."""
        if self.comm is None or self.size == 1:
            return False
        got = False
        for msg in self.incoming(tries):
            got = True
            self.handle(msg)
        self.echo_pings()
        self.reap()
        return got

    def balancer_rank(self) -> int:
        """The balancer's rank; asked only by a worker of a run with a balancer."""
        assert self.brank is not None, "this run has no balancer"
        return self.brank

    def echo_pings(self) -> None:
        """Answer the balancer's link probe (``_LinkProbe``) at once, from the loop."""
        while self.pings_left:
            brank = self.balancer_rank()
            done, _payload = self.comm.irecv_matched(brank, PING_TAG).test()
            if not done:
                return
            self.post(self.comm.isend(b"k", brank, PING_TAG), brank)
            self.pings_left -= 1

    def finish_probe(self, probe: _LinkProbe | None = None) -> None:
        """Before the closing collective: the link probe's messages must all be matched (bounded wait)."""
        t_end = time.time() + 30.0
        while (self.pings_left or (probe is not None and not probe.step())) and time.time() < t_end:
            self.echo_pings()
            time.sleep(0.0002)

    def handle(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind in _WORK:
            self.recvd += 1
            self.ring.touch()
        if kind == "put":
            _, d, v, writer, label, who = msg
            if d in self.values:
                self.assigned_again(d, label, writer, who)
            else:
                self.writers[d] = who
                self.store(d, v)
        elif kind == "get":
            _, ds, who = msg
            for d in ds:
                if d in self.values:
                    self.send(who, ("val", d, self.values[d]))
                else:
                    self.home_pending.setdefault(d, set()).add(who)
        elif kind == "val":
            _, d, v = msg
            self.arrive(d, v)
        elif kind == "cf":          # a CF placed here by its spawner (``.at``)
            self.add(msg[1])
        elif kind == "cfs":         # CFs the balancer moved here, with their input values
            for spec, vals in msg[1]:
                self.values.update(vals)
                self.add(spec, moved=True)
        elif kind == "del":
            self.values.pop(msg[1], None)
        elif kind == "tok":
            self.token = msg[1]
        elif kind == "stop":
            self.verdict = msg[1]
            self.stop_message = msg[2]
        elif kind == "move":
            self.move_out(msg[1])
        else:  # pragma: no cover - protocol error
            raise FragmentError(f"unknown fragments message {kind!r}")

    # -- DFs ---------------------------------------------------------------------------------
    def store(self, d: str, v: Any) -> None:
        """At the home rank: keep the first value; answer pending requests."""
        self.values[d] = v
        for who in sorted(self.home_pending.pop(d, ())):
            self.send(who, ("val", d, v))
        self.arrive(d, v)

    def arrive(self, d: str, v: Any) -> None:
        self.values[d] = v
        for cf in self.waiters.pop(d, ()):
            st = self.cfs.get(cf)
            if st is None or st.state != "waiting":
                continue
            st.missing.discard(d)
            if not st.missing:
                self.make_ready(st)

    def set_df(self, ref: DFRef, v: Any, writer: str, who: str = "?") -> None:
        """``writer`` (a CF id, ``who``: its expression and file:line) assigns DF ``ref``."""
        d = ref.id
        self.rec({"k": "set", "df": d, "base": ref.base, "name": ref.decl, "cf": writer, "type": _tname(v),
                  "t": time.time()})
        label = f"{ref.decl}{d[len(ref.base):]}"
        h = self.home(d)
        if h == self.rank:
            if d in self.values:
                self.assigned_again(d, label, writer, who)
                return
            self.writers[d] = who
            self.store(d, v)
        else:
            self.arrive(d, v)
            self.send(h, ("put", d, v, writer, label, who))

    def assigned_again(self, d: str, label: str, writer: str, who: str) -> None:
        """At a DF's home: a second assignment is the program's error (LuNA aborts on it): the run stops."""
        message = f"DF {label} assigned twice: by {self.writers.get(d, '?')}, then by {who}"
        self.rec({"k": "error", "kind": "multiple_init", "df": d, "cf": writer, "message": message})
        self.errors += 1
        if self.verdict is None:
            self.stop_all("error", message)

    # -- CFs -----------------------------------------------------------------------------------
    def add(self, spec: CFSpec, moved: bool = False) -> None:
        """A CF arrives at the rank where it runs: request its inputs, or make it ready."""
        missing = {r.id for r in spec.input_refs() if r.id not in self.values}
        st = _CF(spec, missing)
        self.cfs[spec.id] = st
        if moved:
            self.rec({"k": "arrive", "cf": spec.id, "t": time.time()})
        for d in missing:
            self.waiters.setdefault(d, []).append(spec.id)
            h = self.home(d)
            if h != self.rank and d not in self.requested:
                self.requested.add(d)
                self.wants.append((h, d))
        if not missing:
            self.make_ready(st)

    def make_ready(self, st: _CF) -> None:
        st.state = "ready"
        heapq.heappush(self.ready, (-st.spec.prio, next(self._arrivals), st.spec.id))
        self.ring.touch()
        if self.brank is not None:
            size = sum(_sizeof(self.values.get(r.id)) for r in st.spec.input_refs())
            self.ready_notes.append((st.spec.id, st.spec.group, size, st.spec.prio))

    def flush_ready(self) -> None:
        """Tell the balancer, in one message, every CF that became ready since the last flush: it then
        chooses among all of them by weight and priority instead of moving the first one it hears of."""
        if self.ready_notes:
            notes, self.ready_notes = self.ready_notes, []
            self.send(self.balancer_rank(), ("ready", self.rank, notes))

    def flush_wants(self) -> None:
        """Send the DF requests of this loop turn, one message per home, after the ready notes and the CF
        starts: a structured CF that spawns a graph asks for many later inputs (85 DFs homed on 7 other
        ranks for the benchmark's graph), and those must not delay the first moves nor wake every home
        once per DF."""
        if self.wants:
            by_home: dict[int, list[str]] = {}
            for h, d in self.wants:
                by_home.setdefault(h, []).append(d)
            self.wants = []
            for h, ds in by_home.items():
                self.send(h, ("get", ds, self.rank))

    def move_out(self, orders: list[tuple[int, list[str], int]]) -> None:
        """Balancer orders of one plan, ``(dest, ids, count)`` each: ship ``count`` of the ids, the first
        ones still ready here, with their input values to ``dest``, in one message per ``dest``; the
        ids past the first ``count`` are alternates for planned CFs this rank has started meanwhile.
        One answer for all the orders."""
        answers, shipped = [], set()
        for dest, ids, count in orders:
            planned = ids[:count]
            moved: list[str] = []
            stuck: list[str] = []
            batch: list[tuple[CFSpec, dict[str, Any]]] = []
            for cf in ids:
                if len(moved) == count:
                    break
                if cf in shipped:           # an alternate an earlier order of this plan took
                    continue
                st = self.cfs.get(cf)
                if st is None or st.state != "ready":
                    stuck.append(cf)
                    continue
                st.state = "moved"
                del self.cfs[cf]
                self.rec({"k": "move", "cf": cf, "to": dest, "t": time.time()})
                batch.append((st.spec, {r.id: self.values[r.id] for r in st.spec.input_refs()}))
                moved.append(cf)
            if batch:
                self.send(dest, ("cfs", batch))
            shipped.update(moved)
            answers.append((dest, moved, stuck, planned))
        if shipped:
            self.ready = [e for e in self.ready if e[2] in self.cfs]
            heapq.heapify(self.ready)
            self.moves += len(shipped)
        self.send(self.balancer_rank(), ("moved", self.rank, answers))

    def spawn(self, spec: CFSpec) -> None:
        if self.tw is not None:         # the record costs ~7 µs per CF to build: only when traced
            self.rec(spec.record())
        dest = spec.place % self.nworkers if spec.place is not None else self.rank
        if dest == self.rank:
            self.add(spec)
        else:
            self.send(dest, ("cf", spec))

    def start(self, st: _CF) -> None:
        spec = st.spec
        ins = [r.id for r in spec.input_refs()]
        gone = {d for d in ins if d not in self.values}
        if gone:   # an input was deleted (a delete recommendation) after this CF became ready: it waits again
            st.state, st.missing = "waiting", gone
            for d in gone:
                self.waiters.setdefault(d, []).append(spec.id)
            return
        st.state, st.started = "running", time.time()
        self.running += 1
        self.active[spec.id] = st.started
        self.rec({"k": "start", "cf": spec.id, "t": time.time()})     # inputs are in the CF's record
        values = self.values
        self.pool.put((spec, {d: values[d] for d in ins}))

    def _pool_thread(self) -> None:
        """A daemon worker thread (a CF that never returns cannot keep the process alive)."""
        while True:
            item = self.pool.get()
            if item is None:
                return
            self._run_body(*item)

    def _run_body(self, spec: CFSpec, vals: dict[str, Any]) -> None:
        """In a pool thread: run the CF's code; report (outputs, spawned, declared) or the failure."""
        t0 = time.time()
        try:
            code = spec.code
            args: dict[str, Any] = {}
            outs: dict[str, tuple[DFRef, Any]] = {}
            for p, a in spec.args.items():
                if p in code.names:
                    if not isinstance(a, DFRef):
                        raise FragmentError(f"{spec.expr}: parameter {p} is a Name and needs a DF, got {a!r}")
                    args[p] = Out(a, outs) if code.kind == "atomic" else a.named(p)
                    continue
                v = resolve(a, lambda r: vals[r.id])
                ann = code.annotations.get(p)
                if ann is not None and not type_ok(v, ann):
                    refs = _refs(a)
                    raise _Failure({"k": "error", "kind": "type_mismatch", "cf": spec.id, "param": p,
                                    "expected": ann.__name__, "got": _tname(v), "value": repr(v)[:80],
                                    "df": [r.info() for r in refs],
                                    "message": f"parameter {p} expects {ann.__name__}, got {_tname(v)} {repr(v)[:40]}"})
                args[p] = v
            if code.kind == "atomic":
                code.fn(**args)
                result: Any = ("atomic", outs)
            else:
                ctx = SubContext(spec, self.new_id, self.nworkers, self.rank)
                with ctx:
                    code.fn(**args)
                result = ("sub", ctx.spawned, ctx.declared)
            self._completed(spec.id, (result, t0, time.time()))
        except _Failure as f:
            self._completed(spec.id, (("error", f.rec), t0, time.time()))
        except BaseException as e:  # the user's code failed: record where, keep the runtime going
            tb = traceback.extract_tb(e.__traceback__)
            where = tb[-1] if tb else None
            self._completed(spec.id, (("error", {
                "k": "error", "kind": "exception", "cf": spec.id, "exc": type(e).__name__, "message": str(e),
                "file": shown(where.filename) if where else None, "line": where.lineno if where else None,
                "traceback": "".join(traceback.format_exception(e))[-2000:]}), t0, time.time()))

    def _completed(self, cf_id: str, payload: Any) -> None:
        """In a pool thread: hand the finished CF to the loop and wake it."""
        self.completions.put((cf_id, payload))
        self.bell.ring_self()

    def finish(self, cf_id: str, payload: Any) -> None:
        (result, t0, t1) = payload
        st = self.cfs.get(cf_id)
        self.running -= 1
        self.busy += t1 - t0
        self.active.pop(cf_id, None)
        self.ring.touch()
        if st is None:
            return
        st.state = "done"
        spec = st.spec
        kind = result[0]
        if kind == "error":
            self.errors += 1
            self.rec(result[1])
            self.rec({"k": "end", "cf": cf_id, "t0": t0, "t": t1, "ok": False})
        else:
            if kind == "atomic":
                outs = spec.output_refs()
                own = spec.stack[-1] if spec.stack else {}
                who = f"{spec.expr} at {own.get('file', spec.code.file)}:{own.get('line', spec.code.line)}"
                for _d, (ref, v) in result[1].items():
                    if not any(o.base == ref.base and ref.index[:len(o.index)] == o.index for o in outs):
                        self.rec({"k": "error", "kind": "not_an_output", "cf": cf_id, "df": ref.id,
                                  "message": f"{spec.expr} set {ref!r}, which it was not given as an output"})
                    self.set_df(ref, v, cf_id, who)
                self.rec({"k": "end", "cf": cf_id, "t0": t0, "t": t1, "ok": True,
                          "out": [ref.id for ref, _v in result[1].values()]})
            else:
                for d in result[2]:
                    self.rec(d)
                self.rec({"k": "end", "cf": cf_id, "t0": t0, "t": t1, "ok": True, "spawned": len(result[1])})
                for child in result[1]:
                    self.spawn(child)
        self.done += 1
        del self.cfs[cf_id]
        for d in spec.deletes:
            self.rec({"k": "delete", "df": d, "cf": cf_id, "t": t1})
            self.values.pop(d, None)
            h = self.home(d)
            if h != self.rank:
                self.send(h, ("del", d))
        if self.brank is not None:
            self.send(self.brank, ("done", self.rank, cf_id, spec.group, t1 - t0))

    # -- the loop -------------------------------------------------------------------------------
    def run(self, main: Code, args: tuple[Any, ...], kwargs: dict[str, Any],
            site: tuple[str, int] | None = None) -> RunResult:
        """Run ``main`` (spawned on worker 0) to the end; ``site`` is the caller's file:line for the call history."""
        self.site = site or (main.file, main.line)
        self.rec({"k": "run", "t": self.t0, "rank": self.rank, "size": self.size, "workers": self.nworkers,
                  "balancer": self.brank, "threads": self.threads, "termination": self.ring.rule,
                  "wakeups": "doorbell" if self.bell.armed else "poll",
                  "pid": os.getpid(), "argv": sys.argv})
        if self.tw is not None:
            # on disk at once: a rank SIGKILLed before its first flush still shows up in the
            # analysis as one that ran and has no exit record, not as no rank at all
            self.tw.flush()
        self.signals.install()
        self.bell.wake_on_signals()
        from planaria.runtime import snapshot, state
        snapshot.provide("cfs", self.running_cfs)      # a global diagnosis names the CFs running here
        if not self.is_balancer:                        # the heartbeat carries this rank's CF counters
            state.provide_work(self.work_counters)
        try:
            try:
                if self.is_balancer:
                    status = self.balance()
                else:
                    status = self.work(main, args, kwargs)
            except Exception as e:
                # a peer died (ProcFailedError) or the runtime broke: leave a complete trace, then let it propagate
                from planaria.comm.errors import FailureError
                self.abort({"error": type(e).__name__, "message": str(e),
                            "failed_ranks": sorted(getattr(e, "ranks", ()) or ()) if isinstance(e, FailureError) else []},
                           "aborted")
                raise
            return self.conclude(status)
        except interrupt.Interrupted as sig:
            # killed from outside (Ctrl-C, kill, a batch system, planaria run's timeout): say what was pending
            self.signals.restore()
            self.abort({"error": "signal", "signal": sig.name, "message": f"terminated by {sig.name}"}, "killed",
                       signal=sig.name)
            self.signals.redeliver(sig.signum)
            raise
        finally:
            snapshot.provide("cfs", None)
            if not self.is_balancer:                    # the last counters stay, nothing busy any more
                last = self.work_counters()
                state.provide_work(lambda: last)
            self.signals.close()
            self.bell.close()

    def work_counters(self) -> tuple[int, int, int, float, int]:
        """This rank's CFs done, held and not running (waiting for inputs or a thread), moved away by the
        balancer, the pool's busy seconds so far and its threads: what the agent's heartbeat reports
        (``planaria top``). Read from the agent thread: copies, no lock (the loop thread changes them)."""
        now = time.time()
        running = sum(now - t for t in list(self.active.values()))
        return self.done, max(len(self.cfs) - self.running, 0), self.moves, self.busy + running, self.threads

    def running_cfs(self, limit: int = 8) -> list[dict[str, Any]]:
        """The CFs running on this rank, longest first: expression, file:line, seconds so far."""
        now = time.time()
        out: list[dict[str, Any]] = []
        for st in list(self.cfs.values()):
            if st.state != "running" or st.started is None:
                continue
            own = st.spec.stack[-1] if st.spec.stack else {}
            out.append({"cf": st.spec.id, "expr": st.spec.expr, "running_s": round(now - st.started, 3),
                        "site": f"{own.get('file', st.spec.code.file)}:{own.get('line', st.spec.code.line)}"})
        return sorted(out, key=lambda c: -c["running_s"])[:limit]

    def abort(self, why: dict[str, Any], status: str, **extra: Any) -> None:
        """The run ends early: an ``abort`` record, the unfinished CFs, an ``exit`` record; the trace is closed."""
        self.rec({"k": "abort", "t": time.time(), **why})
        self.dump_unfinished()
        self.rec({"k": "exit", "status": status, "t": time.time(), "done": self.done, "errors": self.errors, **extra})
        if self.tw is not None:
            self.tw.close()

    def dump_unfinished(self) -> list[_CF]:
        """Write every CF of this rank that has not finished, with the DFs it awaits."""
        unfinished = [s for s in self.cfs.values() if s.state != "done"]
        for st in unfinished:
            self.rec({"k": "unfinished", "cf": st.spec.id, "state": st.state,
                      "awaits": sorted(st.missing), "t": time.time()})
        return unfinished

    def work(self, main: Code, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        self.pool: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for i in range(self.threads):
            threading.Thread(target=self._pool_thread, name=f"cf-r{self.rank}-{i}", daemon=True).start()
        try:
            if self.rank == 0:
                from planaria.fragments.model import source_line
                root = CFSpec(self.new_id(), main, main.bind(args, kwargs), [], None, f"{main.qualname}@root")
                root.stack = [{"expr": source_line(*self.site) or f"{main.qualname}(...)", "file": self.site[0],
                               "line": self.site[1], "sig": main.signature, "def_file": main.file,
                               "def_line": main.line}]
                self.spawn(root)
            deadline = self.t0 + self.timeout if self.timeout else None
            idle_since: float | None = None
            rung = False
            while self.verdict is None:
                self.signals.check()
                busy = self.poll(_RUNG_TRIES if rung else 1)
                rung = False
                while True:
                    try:
                        cf, payload = self.completions.get_nowait()
                    except queue.Empty:
                        break
                    self.finish(cf, payload)
                    busy = True
                while self.ready and self.running < self.threads:
                    cf = heapq.heappop(self.ready)[2]
                    st = self.cfs.get(cf)
                    if st is not None and st.state == "ready":
                        self.start(st)
                        busy = True
                self.flush_ready()
                self.flush_wants()
                if deadline is not None and time.time() > deadline:
                    self.stop_all("timeout")
                    break
                idle = not self.ready and self.running == 0 and self.completions.empty()
                # the token waits until this rank has been idle for idle_hold, counted from when it
                # became idle, not from the token's arrival: a rank idle for long passes it on at once,
                # and so does one that holds no CF (nothing here can start before a message comes)
                if not idle:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.time()
                if idle and self.token is not None:
                    assert idle_since is not None
                    if self.cfs and time.time() - idle_since < self.idle_hold and self.nworkers > 1:
                        time.sleep(self.idle_hold / 4)
                    else:
                        tok, self.token = self.token, None
                        unfinished = sum(1 for s in self.cfs.values() if s.state != "done")
                        verdict = self.ring.visit(tok, self.sent, self.recvd, unfinished)
                        if verdict is not None:
                            self.stop_all(verdict)
                            break
                        if self.nworkers == 1:
                            self.token = tok
                        else:
                            self.send(self.ring.next(), ("tok", tok))
                    continue
                if not busy:
                    if self.bell.armed:     # until a message, a finished CF, or the fallback poll
                        rung = self.bell.wait(self.bell.short if self.outbox else None)
                        continue
                    try:
                        cf, payload = self.completions.get(timeout=0.0005 if self.size > 1 else 0.05)
                        self.finish(cf, payload)
                    except queue.Empty:
                        pass
        finally:
            for _ in range(self.threads):
                self.pool.put(None)
        self.finish_probe()
        return self.verdict or "finished"

    def stop_all(self, verdict: str, message: str | None = None) -> None:
        self.verdict, self.stop_message = verdict, message
        for r in range(self.size):
            if r != self.rank:
                self.send(r, ("stop", verdict, message))

    # -- balancer rank -----------------------------------------------------------------------
    def start_link_probe(self) -> _LinkProbe | None:
        """Balancer: ping every worker while the run goes on; the answers come from the workers' loops."""
        return _LinkProbe(self.comm, self.nworkers, self.bell.ring) if self.is_balancer else None

    def balance(self) -> str:
        assert self.bconf is not None, "only the balancer rank balances"
        model = LoadModel(self.nworkers, self.bconf, slots=self.threads)   # free transfers until the links are measured
        deadline = self.t0 + self.timeout if self.timeout else None
        self._model = model
        probe = self.start_link_probe()
        rung = False
        while self.verdict is None:
            self.signals.check()
            got = news = False
            for msg in self.incoming(_RUNG_TRIES if rung else 1):   # every message, then one plan
                got = True
                kind = msg[0]
                if kind == "ready":
                    for cf, group, size, prio in msg[2]:
                        model.ready(msg[1], cf, group, size, prio)
                elif kind == "done":
                    model.done(msg[1], msg[2], msg[3], msg[4])
                elif kind == "moved":
                    for dst, moved, stuck, planned in msg[2]:
                        model.shipped(msg[1], dst, planned, moved, stuck)
                        # as planned: the model already holds it; else the plan may change
                        news = news or moved != planned
                elif kind == "stop":
                    self.verdict, self.stop_message = msg[1], msg[2]
                news = news or kind in ("ready", "done")
            if news:
                orders: dict[int, list[tuple[int, list[str], int]]] = {}
                for src, dst, ids in model.plan():
                    alt = model.alternates(src, ids)
                    self.rec({"k": "plan", "src": src, "dst": dst, "cfs": ids, "alternates": alt,
                              "t": time.time()})
                    orders.setdefault(src, []).append((dst, ids + alt, len(ids)))
                for src, batch in orders.items():       # one message per donor
                    self.send_tag(("move", batch), src)
            if probe is not None and probe.step():
                self.links_measured(model, probe)
                probe = None
            self.reap()
            if deadline is not None and time.time() > deadline + 5:
                self.verdict = "timeout"
            if not got:
                if self.bell.armed and probe is None and not self.outbox:
                    rung = self.bell.wait()
                else:       # the probe's replies ring too; a short timeout in case its sends need progress
                    rung = self.bell.wait(self.bell.short)
        if probe is not None:          # the run ended before the probe did
            self.finish_probe(probe)
            self.links_measured(model, probe)
        self.planned = model.moves
        return self.verdict

    def links_measured(self, model: LoadModel, probe: _LinkProbe) -> None:
        model.latency, model.bandwidth = probe.result()
        self.rec({"k": "links", "latency": model.latency, "bandwidth": model.bandwidth, "t": time.time()})

    # -- the end ------------------------------------------------------------------------------
    def drain(self, expected: int, bound: float = 1.0) -> bool:
        """After the run: take and drop runtime messages until ``expected`` have come in all, and let this
        rank's own sends complete. Bounded: an injected message loss leaves some never to arrive."""
        t_end = time.time() + bound
        while True:
            for _msg in self.incoming():
                pass
            self.reap()
            if self.msgs_in >= expected and not self.outbox:
                return True
            if time.time() > t_end:
                return False
            self.bell.wait(self.bell.short)

    def conclude(self, status: str) -> RunResult:
        """Dump unfinished CFs with the DFs they await, flush the trace, agree on the totals."""
        unfinished = self.dump_unfinished()
        local = {"done": self.done, "unfinished": len(unfinished), "errors": self.errors,
                 "moves": self.moves, "planned": getattr(self, "planned", 0), "sent": self.sent, "recv": self.recvd}
        if status == "finished" and self.errors:
            status = "failed"
        self.rec({"k": "exit", "status": status, "t": time.time(), **local,
                  **({"message": self.stop_message} if self.stop_message else {})})
        if self.tw is not None:
            self.tw.close()       # before the collective: rank 0 may read every trace right after it
        if self.comm is not None and self.size > 1:
            # every rank's loop has ended, so each has sent all it will: one sum gives the totals and,
            # per rank, how many runtime messages are still to be taken there (the collective does
            # not match them); a buffer sum, not an object gather, as it ends every run
            keys = list(local)
            mine = np.array([local[k] for k in keys] + self.msgs_to, dtype=np.int64)
            sums = np.empty_like(mine)
            self.comm.Allreduce(mine, sums)
            tot = dict(zip(keys, sums[:len(keys)].tolist(), strict=True))
            expected = int(sums[len(keys) + self.rank])
            self.drain(expected)
            unmatched = expected - self.msgs_in
        else:
            tot, unmatched = dict(local), 0
        # this rank: runtime messages sent to it minus those it took; 0 unless some never came within
        # the drain's bound (an injected loss), or a send path that escaped the count (a bug)
        local["unmatched"] = unmatched
        if status == "finished" and tot["errors"]:
            status = "failed"
        return RunResult(status, self.rank, self.nworkers, time.time() - self.t0, tot["done"],
                         tot["unfinished"], tot["errors"], tot["moves"], self.trace_dir, local, self.stop_message)


class _LinkProbe:
    """Balancer links measured alongside the run: one round per message size, all workers at once.

    Latency is half the round trip of the 8-byte ping; bandwidth comes from the extra round-trip
    time of the 64 KiB one (workers answer every ping with one byte: the probe's traffic comes at
    the start of the run, when the ranks need their cores to get the first CFs going). Workers
    answer from their loop, so a round trip includes a worker's reaction time, as a move's does.
    Until the last round is back the balancer plans with free transfers; CFs start meanwhile
    instead of waiting for the slowest rank to arrive.
    """

    def __init__(self, comm: Any, workers: int, ring: Callable[[int], None] = lambda _w: None) -> None:
        self.comm, self.workers, self.ring = comm, workers, ring
        self.rtts: list[list[float]] = [[] for _ in range(workers)]
        self.round = -1
        self.sends: list[Any] = []
        self._next_round()

    def _next_round(self) -> None:
        self.round += 1
        payload = b"x" * _PING_SIZES[self.round]
        self.pending = {w: self.comm.irecv_matched(w, PING_TAG) for w in range(self.workers)}
        self.t = time.perf_counter()
        self.sends += [self.comm.isend(payload, w, PING_TAG) for w in range(self.workers)]
        for w in range(self.workers):
            self.ring(w)

    def step(self) -> bool:
        """Collect the replies that came; start the next round when this one is complete. True when done."""
        for w, req in list(self.pending.items()):
            if req.test()[0]:
                self.rtts[w].append(time.perf_counter() - self.t)
                del self.pending[w]
        self.sends = [r for r in self.sends if not r.Test()]
        if self.pending:
            return False
        if self.round + 1 < len(_PING_SIZES):
            self._next_round()
            return False
        return not self.sends

    def result(self) -> tuple[list[float], list[float]]:
        """Latency and bandwidth per worker; a link whose probe did not complete counts as free."""
        lat = [r[0] / 2 if r else 0.0 for r in self.rtts]
        bw = [_PING_SIZES[-1] / max(r[-1] - r[0], 1e-9) if len(r) == len(_PING_SIZES) else float("inf")
              for w, r in enumerate(self.rtts)]
        return lat, bw


def _refs(a: Any) -> list[DFRef]:
    from planaria.fragments.model import refs_in
    return refs_in(a)
