"""This process's side of event notification: its registry, the default handler, and the hooks
through which the runtime's agent relays events to and from the controller.

Without a controller (outside ``planaria run``) every event stays in the process and its chain
runs on a small dispatcher thread; under ``planaria run`` the agent thread runs the chain for
events the controller forwards, and cached events reach a late registrant on the dispatcher
thread. Either way handlers never run on the application thread.
"""
from __future__ import annotations

# the C modules behind ``socket`` and ``queue``: what a rank uses of them without their imports
# (socket's enum conversions and selectors, queue's heapq: about 2 ms of a rank's start)
import _queue
import _socket
import os
import threading
import time
from collections.abc import Callable, Iterable

from planaria.events import codes as _codes
from planaria.events.ranges import PROC_LOCAL, Range, parse_range
from planaria.events.registry import (
    COMPLETE,
    NO_ACTION,
    Event,
    Registry,
    Result,
)
from planaria.errors import PlanariaError
from planaria.util.env import PLANARIA_EVENTS_CACHE, PLANARIA_EVENTS_DEFAULT

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any

    from planaria.events.registry import Handler

DEFAULT_HANDLER = "planaria-default"
POLICY_ENV = PLANARIA_EVENTS_DEFAULT        # abort | none
CACHE_ENV = PLANARIA_EVENTS_CACHE


class EventsUnavailable(PlanariaError, RuntimeError):
    """A call that needs the job's controller outside ``planaria run``."""


class _Local:
    def __init__(self) -> None:
        try:
            limit = int(os.environ.get(CACHE_ENV, "64") or 64)
        except ValueError:
            limit = 64
        self.registry = Registry(None, _socket.gethostname(), cache_limit=limit)
        self.send: Callable[[dict[str, Any]], bool] | None = None
        self.request: Callable[[dict[str, Any], float], dict[str, Any] | None] | None = None
        self.abort: Callable[[str, Event], None] | None = None
        self.policy = (os.environ.get(POLICY_ENV, "none") or "none").strip().lower()
        self.aborted: Event | None = None
        self._q: _queue.SimpleQueue[Event | Callable[[], Any] | None] = _queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.registry.register(None, self._default, name=DEFAULT_HANDLER, last=True, replay=False)

    # the default handler: abort the job on a fault no earlier handler completed
    def _default(self, ev: Event, results: list[Result]) -> Any:
        if self.policy != "abort" or ev.code not in _codes.FAULT_CODES:
            return NO_ACTION
        if self.aborted is not None:
            return COMPLETE, {"action": "abort", "already": True}
        self.aborted = ev
        reason = (f"default event handler: {ev.name} (affected ranks {sorted(ev.affected)}) "
                  f"not completed by any other handler")
        if self.abort is not None:
            self.abort(reason, ev)
        return COMPLETE, {"action": "abort", "reason": reason}

    def local_dispatch(self, ev: Event | Callable[[], Any]) -> None:
        """Run an event's chain (or a replay) on the events thread."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="planaria-events", daemon=True)
                self._thread.start()
        self._q.put(ev)

    def _run(self) -> None:
        while True:
            ev = self._q.get()
            if ev is None:
                return
            if isinstance(ev, Event):
                self.registry.dispatch(ev)
            else:
                ev()


_L = _Local()


def registry() -> Registry:
    """This process's handler registry."""
    return _L.registry


def install(rank: int, send: Callable[[dict[str, Any]], bool],
            request: Callable[[dict[str, Any], float], dict[str, Any] | None],
            abort: Callable[[str, Event], None], policy: str | None = None) -> None:
    """Connect this process to its controller (called by the runtime when the agent starts)."""
    _L.registry.me = int(rank)
    _L.send, _L.request, _L.abort = send, request, abort
    if policy is not None:
        set_default_action(policy)


def set_default_action(action: str) -> None:
    """What the default handler does with an uncompleted fault event: ``"abort"`` the job or ``"none"``."""
    action = action.strip().lower()
    if action not in ("abort", "none"):
        raise ValueError(f"default action must be 'abort' or 'none', not {action!r}")
    _L.policy = action


def default_action() -> str:
    """The default handler's current action (``abort`` or ``none``)."""
    return _L.policy


def handle_failures(name: str, on_event: Callable[[Event], None] | None = None,
                    action: str = "handled-by-program") -> int:
    """Register a resilient handler that completes process-failure events (PMIx: ahead of the
    default abort), for a program that recovers from failures itself (ULFM ``shrink`` loops).

    ``on_event(event)`` sees each event first; a handler of the same name is replaced. Returns
    the registration id.
    """
    for h in _L.registry.chain():
        if h.name == name:
            _L.registry.deregister(h.id)

    def handler(ev: Event, results: list[Result]) -> Any:
        if on_event is not None:
            on_event(ev)
        return COMPLETE, {"action": action}
    return register(_codes.PROC_FAILED_CODES, handler, name=name)


def deliver(msg: dict[str, Any]) -> list[Result]:
    """Run the local chain for an event the controller forwarded (in the calling thread: the agent's)."""
    return _L.registry.dispatch(Event.from_wire(msg))


def register(codes: int | Iterable[int] | None, handler: Handler, *, name: str | None = None,
             first: bool = False, last: bool = False, first_in_category: bool = False,
             last_in_category: bool = False, before: str | None = None, after: str | None = None,
             prepend: bool = False, append: bool = False, range: str | int | Range | None = None,
             ranks: Iterable[int] | None = None, affected: Iterable[int] | None = None) -> int:
    """Register ``handler(event, results) -> Status | (Status, dict) | None`` for ``codes`` (None: all).

    Ordering attributes follow PMIx (see ``planaria.events.registry``); ``range`` filters by
    the event's source (``proc_local``, ``local``, ``custom`` with ``ranks``); ``affected`` keeps
    only events naming one of these ranks. Cached events that match are replayed to it at once.
    """
    rng = None if range is None and not ranks else parse_range(range or "job", ranks)
    rid = _L.registry.register(codes, handler, name=name, first=first, last=last,
                               first_in_category=first_in_category, last_in_category=last_in_category,
                               before=before, after=after, prepend=prepend, append=append, range=rng,
                               affected=affected, replay=False)
    if _L.registry.cache:                 # cached events reach it on the events thread, not this one
        _L.local_dispatch(lambda: _L.registry.replay(rid))
    return rid


def deregister(handler_id: int) -> bool:
    """Remove a handler by the id ``register`` returned."""
    return _L.registry.deregister(handler_id)


def notify(code: int | str, source: int | None = None, range: str | int | Range = "job",
           info: dict[str, Any] | None = None, *, ranks: Iterable[int] | None = None,
           affected: Iterable[int] | None = None, cache: bool = True) -> bool:
    """Raise event ``code`` (PMIx name or number) from this rank to the processes in ``range``.

    ``proc_local`` events (and every event outside ``planaria run``) run this process's chain
    only; other ranges go through the controller, which forwards to the ranks in range.
    Returns True once the event is handed over (delivery is asynchronous).
    """
    rng = parse_range(range, ranks)
    me = _L.registry.me
    ev = Event(code=_codes.parse_code(code), source=me if source is None else int(source), range=rng,
               info=dict(info or {}), affected=frozenset(int(r) for r in affected or ()),
               t=time.time(), source_host=_L.registry.host, cache=cache)
    if rng.kind == PROC_LOCAL or _L.send is None:
        _L.local_dispatch(ev)
        return True
    msg = ev.to_wire()
    msg["type"] = "notify"
    msg["rank"] = me
    return bool(_L.send(msg))


def _need_controller(what: str) -> Callable[[dict[str, Any], float], dict[str, Any] | None]:
    if _L.request is None:
        raise EventsUnavailable(f"{what} needs the job's controller (run under 'planaria run')")
    if threading.current_thread().name.startswith("planaria-agent"):
        # the agent thread runs handlers and is the one that would carry the answer
        raise RuntimeError(f"{what} cannot wait inside an event handler; hand it to another thread")
    return _L.request


def publish(data: dict[str, Any] | None = None, *, replace: bool = False, timeout: float = 5.0,
            **kv: Any) -> list[str]:
    """Publish key-values in the job's store (PMIx_Publish); returns the keys stored.

    A key already published is refused (KeyError) unless ``replace``.
    """
    items = dict(data or {}) | kv
    reply = _need_controller("publish")({"type": "publish", "data": items, "replace": replace}, timeout)
    if reply is None:
        raise TimeoutError(f"no answer from the controller within {timeout:g} s")
    if reply.get("error"):
        raise KeyError(reply["error"])
    return list(reply.get("stored") or [])


#: how long ``lookup_value`` waits for its key unless told otherwise (seconds)
LOOKUP_WAIT = 60.0
#: a longer wait is a sequence of waiting lookups of at most this many seconds each, so that every
#: request is answered by the controller (which holds one at most an hour) before its reply timeout
WAIT_SLICE = 600.0
#: how much longer than its wait a waiting lookup's request waits for the controller's answer
REPLY_MARGIN = 5.0

if TYPE_CHECKING:
    Request = Callable[[dict[str, Any], float], "dict[str, Any] | None"]


class NotPublished(PlanariaError, TimeoutError):
    """Keys still not published when a waiting lookup's time was up (``keys``, ``timeout``)."""

    def __init__(self, keys: list[str], timeout: float) -> None:
        self.keys, self.timeout = list(keys), timeout
        super().__init__(f"{', '.join(keys)} not published within {timeout:g} s")


def wait_for_keys(request: Request, keys: list[str], timeout: float | None) -> dict[str, Any]:
    """The values of ``keys`` once all are published, or those found when ``timeout`` s have passed
    (None: no bound), asking through ``request(msg, reply_timeout)`` in slices of ``WAIT_SLICE`` s.

    TimeoutError when the controller does not answer a slice within its wait and ``REPLY_MARGIN``.
    """
    deadline = None if timeout is None or timeout == float("inf") else time.monotonic() + max(timeout, 0.0)
    while True:
        left = WAIT_SLICE if deadline is None else min(WAIT_SLICE, max(deadline - time.monotonic(), 0.0))
        reply = request({"type": "lookup", "keys": list(keys), "wait": True, "timeout": left}, left + REPLY_MARGIN)
        if reply is None:
            raise TimeoutError(f"no answer from the controller within {left + REPLY_MARGIN:g} s")
        found = dict(reply.get("data") or {})
        if len(found) == len(keys) or (deadline is not None and time.monotonic() >= deadline - 0.01):
            return found


def lookup(keys: str | Iterable[str], *, wait: bool = False, timeout: float | None = 5.0) -> dict[str, Any]:
    """Values of ``keys`` in the job's store (PMIx_Lookup) as a dict; keys not published are absent.

    With ``wait``, block until every key is published or ``timeout`` s (default 5, None: no bound)
    have passed, and return what is there then. For one value or an error, use ``lookup_value``.
    """
    ks = [keys] if isinstance(keys, str) else list(keys)
    request = _need_controller("lookup")
    if wait:
        return wait_for_keys(request, ks, timeout)
    reply = request({"type": "lookup", "keys": ks, "wait": False}, timeout or 5.0)
    if reply is None:
        raise TimeoutError(f"no answer from the controller within {timeout or 5.0:g} s")
    return dict(reply.get("data") or {})


def lookup_value(key: str, *, timeout: float | None = LOOKUP_WAIT) -> Any:
    """The value published under ``key``, waiting for it at most ``timeout`` s (default
    ``LOOKUP_WAIT``, 60 s; None: no bound). ``NotPublished`` (a TimeoutError) when the time is up."""
    found = wait_for_keys(_need_controller("lookup"), [str(key)], timeout)
    if str(key) not in found:
        raise NotPublished([str(key)], float("inf") if timeout is None else timeout)
    return found[str(key)]


def log(message: str, **fields: Any) -> bool:
    """Append a record to the job record (``events.jsonl``, type ``log``) (PMIx_Log with the job-record channel)."""
    if _L.send is None:
        raise EventsUnavailable("log needs the job's controller (run under 'planaria run')")
    return bool(_L.send({"type": "log", "rank": _L.registry.me, "message": str(message),
                         "fields": fields, "t": time.time()}))
