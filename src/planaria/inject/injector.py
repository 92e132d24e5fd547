"""Per-rank runtime that fires the faults of a :class:`~planaria.inject.plan.Plan`.

One :class:`Injector` lives in each rank.  The application loop calls
:meth:`Injector.step` once per iteration, communication poll loops call
:meth:`Injector.check`, and the send path asks :meth:`Injector.message_fault`.
When the plan has nothing for this rank, ``active`` is False and the hooks are
(almost) free.
"""
from __future__ import annotations

import builtins
import errno
import fnmatch
import io
import os
import random
import threading
import time as _time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .plan import (
    BitFlip,
    Delay,
    Drop,
    Hang,
    IOErrorFault,
    Kill,
    Plan,
    PlanError,
    RandomKill,
    derive_seed,
)

__all__ = ["Injector", "Event"]

ReportFn = Callable[[str, dict], None]


@dataclass
class Event:
    """One pending trigger of this rank: fires once at an iteration or a time."""

    action: str  # "kill", "hang", "bitflip", "ioerror"
    iteration: int | None
    time: float | None  # seconds since clock_start
    reason: str
    fault: Any
    order: int = 0


@dataclass
class _MsgRule:
    drop: bool
    delay_s: float
    dst: Any
    p: float
    rng: random.Random


@dataclass
class _IORule:
    glob: str | None
    remaining: int | None  # None = unlimited
    fault: IOErrorFault = field(repr=False, default=None)  # type: ignore[assignment]  # set for every rule made

    def matches(self, path: str) -> bool:
        if self.glob is None:
            return True
        if "/" in self.glob:
            return fnmatch.fnmatchcase(path, self.glob)
        return fnmatch.fnmatchcase(os.path.basename(path), self.glob) or fnmatch.fnmatchcase(path, self.glob)


def _path_text(file: Any) -> str | None:
    if isinstance(file, int):
        return None
    try:
        p = os.fspath(file)
    except TypeError:
        return None
    if isinstance(p, bytes):
        return os.fsdecode(p)
    return p


def _rank_event(f: Hang | BitFlip | IOErrorFault, n: int) -> Event | None:
    """The event of a hang, bit flip or I/O-error fault ``f`` (number ``n`` of the plan) on its rank;
    I/O errors without an iteration or a time start at once."""
    if isinstance(f, Hang):
        when = f"iteration {f.iteration}" if f.iteration is not None else f"t={f.time:.2f}s"
        return Event("hang", f.iteration, f.time, f"injected hang at {when}", f, n)
    if isinstance(f, BitFlip):
        return Event("bitflip", f.iteration, None,
                     f"injected bit flip in {f.array!r} at iteration {f.iteration}", f, n)
    if isinstance(f, IOErrorFault):
        if f.iteration is None and f.time is None:
            return Event("ioerror", None, None, "injected I/O errors", f, n)
        when = f"iteration {f.iteration}" if f.iteration is not None else f"t={f.time:.2f}s"
        return Event("ioerror", f.iteration, f.time, f"injected I/O errors from {when}", f, n)
    return None


class Injector:
    """Fires the faults of ``plan`` that concern ``rank`` in a job of ``size`` ranks."""

    def __init__(self, plan: Plan, rank: int, size: int, *, kill: Callable[[str], None],
                 clock_start: float | None = None, report: ReportFn | None = None,
                 kill_from_thread: bool = False) -> None:
        plan = Plan.parse(plan) if not isinstance(plan, Plan) else plan
        plan.validate(size)
        if not 0 <= rank < size:
            raise PlanError(f"rank {rank} out of range for {size} ranks")
        self.plan = plan
        self.rank = rank
        self.size = size
        self.clock_start = _time.time() if clock_start is None else float(clock_start)
        self.iteration: int | None = None
        self.fired: list[dict] = []  # log of the faults fired on this rank
        self.messages_delayed = 0
        self.messages_dropped = 0
        self._kill = kill
        self._report = report
        self._kill_from_thread = kill_from_thread
        self._lock = threading.Lock()
        self._arrays: dict[str, Any] = {}
        self._io_rules: list[_IORule] = []
        self._io_installed = False
        self._orig_open: Any = None
        self._orig_io_open: Any = None
        self._orig_os_open: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

        events: list[Event] = [Event("kill", it, t, reason, None, order)
                               for order, (t, it, r, reason) in enumerate(plan.kill_schedule(size)) if r == rank]
        immediate: list[Event] = []
        msg_rules: list[_MsgRule] = []
        phase_kills: list[tuple[Kill, int]] = []
        for n, f in enumerate(plan.faults, start=len(events)):
            if isinstance(f, Kill) and f.phase is not None and rank in f.rank:
                phase_kills.append((f, n))
            elif isinstance(f, (Kill, RandomKill)):
                continue
            elif isinstance(f, (Delay, Drop)):
                if rank in f.src:
                    rng = random.Random(derive_seed(f.seed, f.kind, rank))
                    delay_s = f.ms / 1000.0 if isinstance(f, Delay) else 0.0
                    msg_rules.append(_MsgRule(isinstance(f, Drop), delay_s, f.dst, f.p, rng))
            elif isinstance(f, (Hang, BitFlip, IOErrorFault)) and rank in f.rank:
                ev = _rank_event(f, n)
                if ev is not None:
                    (immediate if ev.action == "ioerror" and ev.iteration is None and ev.time is None
                     else events).append(ev)

        self._iter_events = sorted((e for e in events if e.iteration is not None),
                                   key=lambda e: (e.iteration, e.order))
        self._time_events = sorted((e for e in events if e.time is not None),
                                   key=lambda e: (e.time, e.order))
        self._msg_rules = msg_rules
        #: True only if some delay/drop applies to this rank as a sender.
        self.has_message_faults: bool = bool(msg_rules)
        self._phase_kills = phase_kills
        self._active = bool(events or immediate or msg_rules or phase_kills)
        self._next_iter: int | None = None
        self._next_time: float | None = None
        self._refresh()
        for ev in immediate:
            self._fire(ev)

    # ------------------------------------------------------------------ public hooks

    @property
    def active(self) -> bool:
        """False when the plan has nothing for this rank (callers may skip every hook)."""
        return self._active

    @property
    def pending(self) -> int:
        """Number of iteration/time triggers that have not fired yet."""
        return len(self._iter_events) + len(self._time_events)

    def watch(self, name: str, array: Any) -> None:
        """Register a C-contiguous, writeable numpy array under ``name`` for bit flips."""
        flags = getattr(array, "flags", None)
        if flags is None or not flags["C_CONTIGUOUS"]:
            raise ValueError(f"array {name!r} must be a C-contiguous numpy array")
        if not flags["WRITEABLE"]:
            raise ValueError(f"array {name!r} is read-only")
        self._arrays[name] = array

    def unwatch(self, name: str) -> None:
        """Forget the array registered under ``name``."""
        self._arrays.pop(name, None)

    def step(self, i: int) -> None:
        """Called once per application iteration: fires iteration (and due time) triggers."""
        self.iteration = i
        if self._next_iter is not None and i >= self._next_iter:
            self._fire_iter(i)
        if self._next_time is not None and _time.time() >= self._next_time:
            self._fire_time(_time.time(), thread=False)

    def phase(self, name: str) -> None:
        """Called on entering a phase (``checkpoint``, ``recover``): fires kills tied to it (each once)."""
        for k, (f, order) in enumerate(self._phase_kills):
            if f.phase != name:
                continue
            if f.iteration is not None and (self.iteration is None or self.iteration < f.iteration):
                continue
            del self._phase_kills[k]
            when = f" (iteration >= {f.iteration})" if f.iteration is not None else ""
            self._fire(Event("kill", None, None, f"injected kill on entering {name}{when}", f, order))
            return

    def check(self) -> None:
        """Cheap poll: fires time-triggered faults whose time has passed."""
        if self._next_time is not None and _time.time() >= self._next_time:
            self._fire_time(_time.time(), thread=False)

    def message_fault(self, dst: int) -> float | None:
        """Fate of a message from this rank to ``dst``: None (send), seconds to delay, or -1.0 (drop)."""
        if not self._msg_rules:
            return None
        dropped = False
        delay = 0.0
        for rule in self._msg_rules:
            if dst not in rule.dst:
                continue
            hit = rule.rng.random() < rule.p  # always draw: keeps the stream deterministic
            if hit:
                if rule.drop:
                    dropped = True
                else:
                    delay += rule.delay_s
        if dropped:
            self.messages_dropped += 1
            return -1.0
        if delay > 0.0:
            self.messages_delayed += 1
            return delay
        return None

    def start_timers(self) -> None:
        """Start a daemon thread that fires time-triggered kills (if ``kill_from_thread``) and I/O errors."""
        if self._thread is not None or self._closed:
            return
        if not any(self._thread_ok(e) for e in self._time_events):
            return
        self._thread = threading.Thread(target=self._timer_loop, name="planaria-inject-timer",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the timer thread and restore the patched ``open`` functions."""
        self._closed = True
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=1.0)
        self._thread = None
        self._uninstall_io()

    def __enter__(self) -> "Injector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _refresh(self) -> None:
        self._next_iter = self._iter_events[0].iteration if self._iter_events else None
        self._next_time = (self.clock_start + self._time_events[0].time  # type: ignore[operator]  # time events have a time
                           if self._time_events else None)

    def _fire_iter(self, i: int) -> None:
        while True:
            with self._lock:
                ev = None
                for k, cand in enumerate(self._iter_events):
                    if cand.iteration is not None and cand.iteration > i:
                        break
                    if cand.action == "bitflip" and cand.fault.array not in self._arrays:
                        continue  # deferred until the array is registered
                    ev = self._iter_events.pop(k)
                    break
                self._refresh()
            if ev is None:
                return
            self._fire(ev)

    def _thread_ok(self, ev: Event) -> bool:
        return ev.action == "ioerror" or (ev.action == "kill" and self._kill_from_thread)

    def _fire_time(self, now: float, *, thread: bool) -> None:
        while True:
            with self._lock:
                ev = None
                for k, cand in enumerate(self._time_events):
                    if self.clock_start + cand.time > now:  # type: ignore[operator]  # time events have a time
                        break
                    if thread and not self._thread_ok(cand):
                        continue
                    ev = self._time_events.pop(k)
                    break
                self._refresh()
            if ev is None:
                return
            self._fire(ev)

    def _timer_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                due = [self.clock_start + e.time for e in self._time_events  # type: ignore[operator]  # time events have a time
                       if self._thread_ok(e)]
            if not due:
                return
            wait = min(due) - _time.time()
            if wait > 0:
                if self._stop.wait(min(wait, 60.0)):
                    return
                continue
            self._fire_time(_time.time(), thread=True)

    def _emit(self, topic: str, info: dict) -> None:
        self.fired.append(dict(info, topic=topic))
        if self._report is not None:
            try:
                self._report(topic, info)
            except Exception:  # a failing reporter must not prevent the fault
                pass

    def _fire(self, ev: Event) -> None:
        if ev.action == "kill":
            self._emit("inject", {"kind": "kill", "detail": ev.reason, "rank": self.rank})
            self._kill(ev.reason)
        elif ev.action == "hang":
            self._emit("hang", {"kind": "hang", "detail": ev.reason, "rank": self.rank})
            self._hang_forever()
        elif ev.action == "bitflip":
            self._bitflip(ev)
        elif ev.action == "ioerror":
            f: IOErrorFault = ev.fault
            detail = ev.reason + (f" on {f.path!r}" if f.path else "")
            if f.count is not None:
                detail += f" (at most {f.count})"
            self._emit("inject", {"kind": "ioerror", "detail": detail, "rank": self.rank})
            with self._lock:
                self._io_rules.append(_IORule(f.path, f.count, f))
            self._install_io()

    @staticmethod
    def _hang_forever() -> None:
        ev = threading.Event()
        while True:
            ev.wait(3600.0)

    def _bitflip(self, ev: Event) -> None:
        import numpy as np

        f: BitFlip = ev.fault
        arr = self._arrays[f.array]
        rng = random.Random(derive_seed(f.seed, "bitflip", self.rank))
        n = int(arr.size)
        width = int(arr.dtype.itemsize) * 8
        if n == 0:
            raise PlanError(f"bitflip: array {f.array!r} is empty")
        index = rng.randrange(n) if f.index is None else f.index
        bit = rng.randrange(width) if f.bit is None else f.bit
        if index >= n:
            raise PlanError(f"bitflip: index {index} out of range for array {f.array!r} of size {n}")
        if bit >= width:
            raise PlanError(f"bitflip: bit {bit} out of range for {arr.dtype} ({width} bits)")
        raw = arr.reshape(-1).view(np.uint8)
        itemsize = arr.dtype.itemsize
        byte_in_item = bit // 8
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and np.little_endian is False):
            byte_in_item = itemsize - 1 - byte_in_item
        pos = index * itemsize + byte_in_item
        flat = arr.reshape(-1)
        old = flat[index].item() if hasattr(flat[index], "item") else flat[index]
        detail = (f"flipped bit {bit} of {f.array}[{index}] ({arr.dtype}) "
                  f"at iteration {self.iteration}")
        info = {"kind": "bitflip", "detail": detail, "rank": self.rank, "array": f.array,
                "index": index, "bit": bit, "old": old}
        self._emit("inject", info)
        raw[pos] ^= np.uint8(1 << (bit % 8))

    # ---- I/O errors

    def _io_hit(self, file: Any) -> bool:
        path = _path_text(file)
        if path is None:
            return False
        with self._lock:
            for rule in self._io_rules:
                if rule.remaining == 0 or not rule.matches(path):
                    continue
                if rule.remaining is not None:
                    rule.remaining -= 1
                return True
        return False

    def _install_io(self) -> None:
        if self._io_installed:
            return
        orig_open, orig_io_open, orig_os_open = builtins.open, io.open, os.open
        inj = self

        def open_(file: Any, *args: Any, **kwargs: Any) -> Any:
            if inj._io_hit(file):
                raise OSError(errno.EIO, "injected I/O error", _path_text(file))
            return orig_open(file, *args, **kwargs)

        def io_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            if inj._io_hit(file):
                raise OSError(errno.EIO, "injected I/O error", _path_text(file))
            return orig_io_open(file, *args, **kwargs)

        def os_open(path: Any, *args: Any, **kwargs: Any) -> Any:
            if inj._io_hit(path):
                raise OSError(errno.EIO, "injected I/O error", _path_text(path))
            return orig_os_open(path, *args, **kwargs)

        self._orig_open, self._orig_io_open, self._orig_os_open = orig_open, orig_io_open, orig_os_open
        self._open_wrappers = (open_, io_open, os_open)
        builtins.open = open_
        io.open = io_open
        os.open = os_open
        self._io_installed = True

    def _uninstall_io(self) -> None:
        if not self._io_installed:
            return
        open_, io_open, os_open = self._open_wrappers
        # restore only what is still ours (someone may have wrapped on top of us)
        if builtins.open is open_:
            builtins.open = self._orig_open
        if io.open is io_open:
            io.open = self._orig_io_open
        if os.open is os_open:
            os.open = self._orig_os_open
        self._io_installed = False
        with self._lock:
            self._io_rules.clear()
