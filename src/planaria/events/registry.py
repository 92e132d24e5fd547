"""Handler registry and chain (pure): categories, precedence attributes, outcomes, cache.

Semantics follow the PMIx standard (RFC 0018): handlers for a single code run first, then
handlers for several codes, then default handlers (no codes); ``first``/``last`` place one
handler at the very start/end of the whole chain, ``first_in_category``/``last_in_category``
at the start/end of its category, ``before``/``after`` next to a named handler of the same
category, ``prepend``/``append`` at the front/back of the category (prepend is the default).
The chain runs in order and stops at the first handler that returns ``COMPLETE``; each handler
sees the results of the earlier ones. Events are cached (bounded) for handlers registered later.
"""
from __future__ import annotations

import enum
import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from planaria.events import codes as _codes
from planaria.events.ranges import Range, accepts
from planaria.errors import PlanariaError
from planaria.util.frozen import Frozen

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any

SINGLE, MULTI, DEFAULT = 0, 1, 2
CATEGORY_NAMES = ("single", "multi", "default")
DEFAULT_CACHE = 64


class Status(enum.IntEnum):
    """What a handler did (PMIx values)."""

    NO_ACTION = -331       # PMIX_EVENT_NO_ACTION_TAKEN
    PARTIAL = -332         # PMIX_EVENT_PARTIAL_ACTION_TAKEN
    DEFERRED = -333        # PMIX_EVENT_ACTION_DEFERRED
    COMPLETE = -334        # PMIX_EVENT_ACTION_COMPLETE: stop the chain


COMPLETE, NO_ACTION, PARTIAL, DEFERRED = Status.COMPLETE, Status.NO_ACTION, Status.PARTIAL, Status.DEFERRED


class RegistrationError(PlanariaError, ValueError):
    """A registration that breaks the ordering rules (PMIX_ERR_EVENT_REGISTRATION)."""


class Event(Frozen):
    """One notification as delivered to handlers (immutable)."""

    __slots__ = ("code", "source", "range", "info", "affected", "id", "t", "source_host", "origin", "cache")
    code: int
    source: int | None                   # rank that raised it; None: the controller or a tool
    range: Range
    info: Mapping[str, Any]
    affected: frozenset[int]
    id: int                              # assigned by the controller (0: local)
    t: float                             # wall clock at notify
    source_host: str | None
    origin: str                          # rank | rm | tool
    cache: bool

    def __init__(self, code: int, source: int | None = None, range: Range | None = None,
                 info: Mapping[str, Any] | None = None, affected: frozenset[int] = frozenset(), id: int = 0,
                 t: float = 0.0, source_host: str | None = None, origin: str = "rank", cache: bool = True) -> None:
        self._set(code=code, source=source, range=Range() if range is None else range,
                  info={} if info is None else info, affected=affected, id=id, t=t, source_host=source_host,
                  origin=origin, cache=cache)

    @property
    def name(self) -> str:
        """The code's PMIx name."""
        return _codes.name_of(self.code)

    def to_wire(self) -> dict:
        """A msgpack-friendly form."""
        return {"code": self.code, "source": self.source, "range": self.range.to_wire(),
                "info": dict(self.info), "affected": sorted(self.affected), "id": self.id,
                "t": self.t, "source_host": self.source_host, "origin": self.origin,
                "cache": self.cache}

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Event":
        """Inverse of ``to_wire``."""
        src = d.get("source")
        return cls(code=int(d["code"]), source=None if src is None else int(src),
                   range=Range.from_wire(d.get("range")), info=dict(d.get("info") or {}),
                   affected=frozenset(int(r) for r in d.get("affected") or ()),
                   id=int(d.get("id") or 0), t=float(d.get("t") or 0.0),
                   source_host=d.get("source_host"), origin=str(d.get("origin") or "rank"),
                   cache=bool(d.get("cache", True)))


class Result(Frozen):
    """One handler's outcome, passed down the chain (immutable)."""

    __slots__ = ("name", "status", "data")
    name: str
    status: Status
    data: Mapping[str, Any]

    def __init__(self, name: str, status: Status, data: Mapping[str, Any] | None = None) -> None:
        self._set(name=name, status=status, data={} if data is None else data)


if TYPE_CHECKING:
    Handler = Callable[[Event, list[Result]], Any]


class Registration:
    """A registered handler and its filters."""

    __slots__ = ("id", "handler", "codes", "name", "category", "pin", "range", "affected", "seen")

    def __init__(self, id: int, handler: Handler, codes: frozenset[int] | None, name: str, category: int,
                 pin: str = "", range: Range | None = None, affected: frozenset[int] | None = None) -> None:
        self.id = id
        self.handler = handler
        self.codes = codes
        self.name = name
        self.category = category
        self.pin = pin                           # "first" | "last" | "first_in_category" | "last_in_category"
        self.range = range
        self.affected = affected
        self.seen: set[int] = set()              # cached event ids already given to it

    def __repr__(self) -> str:
        return f"Registration(id={self.id}, name={self.name!r}, category={self.category}, pin={self.pin!r})"

    def matches(self, ev: Event, me: int | None, my_host: str | None) -> bool:
        """Code, source range and affected-ranks filters."""
        if self.codes is not None and ev.code not in self.codes:
            return False
        if self.codes is None and ev.info.get("non_default"):
            return False
        if not accepts(self.range, ev.source, me, my_host, ev.source_host):
            return False
        if self.affected is not None and ev.affected and not (self.affected & ev.affected):
            return False
        return True


def _as_result(name: str, out: Any) -> Result:
    if out is None:
        return Result(name, Status.NO_ACTION)
    if isinstance(out, Result):
        return out
    if isinstance(out, tuple):
        st, data = out
        return Result(name, Status(st), dict(data or {}))
    return Result(name, Status(out))


class Registry:
    """The handlers of one process, in chain order, plus the bounded event cache."""

    def __init__(self, me: int | None = None, host: str | None = None, cache_limit: int = DEFAULT_CACHE) -> None:
        self.me = me
        self.host = host
        self._lists: list[list[Registration]] = [[], [], []]
        self._first: Registration | None = None
        self._last: Registration | None = None
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self.cache: deque[Event] = deque(maxlen=max(0, int(cache_limit)))
        self.evicted = 0
        self._local_ids = itertools.count(1)

    # --- registration --------------------------------------------------------------
    def register(self, codes: int | Iterable[int] | None, handler: Handler, *, name: str | None = None,
                 first: bool = False, last: bool = False, first_in_category: bool = False,
                 last_in_category: bool = False, before: str | None = None, after: str | None = None,
                 prepend: bool = False, append: bool = False, range: Range | None = None,
                 affected: Iterable[int] | None = None, replay: bool = True) -> int:
        """Add ``handler``; returns its id. Cached matching events are then given to it alone (``replay``)."""
        cs = None if codes is None else frozenset([codes] if isinstance(codes, int) else (int(c) for c in codes))
        if cs is not None and not cs:
            raise RegistrationError("an empty code list (pass None for a default handler)")
        places = [k for k, v in (("first", first), ("last", last), ("first_in_category", first_in_category),
                                 ("last_in_category", last_in_category), ("before", before is not None),
                                 ("after", after is not None), ("prepend", prepend), ("append", append)) if v]
        if len(places) > 1:
            raise RegistrationError(f"conflicting placement: {', '.join(places)}")
        cat = DEFAULT if cs is None else (SINGLE if len(cs) == 1 else MULTI)
        with self._lock:
            rid = next(self._ids)
            hname = name or f"handler-{rid}"
            if name is not None and self._find(name) is not None:
                raise RegistrationError(f"a handler named {name!r} is already registered")
            reg = Registration(rid, handler, cs, hname, cat, range=range,
                               affected=None if affected is None else frozenset(int(r) for r in affected))
            if first or last:
                slot = "_first" if first else "_last"
                if getattr(self, slot) is not None:
                    raise RegistrationError(f"another handler ({getattr(self, slot).name!r}) is already "
                                            f"{'first' if first else 'last'}")
                reg.pin = "first" if first else "last"
                setattr(self, slot, reg)
            else:
                self._place(reg, self._lists[cat], first_in_category, last_in_category, before, after, append)
        if replay:
            self.replay(rid)
        return rid

    def replay(self, rid: int) -> int:
        """Give handler ``rid`` the cached events that match it and it has not seen (each on its
        own, no chain); returns how many it got."""
        with self._lock:
            reg = next((r for r in self.chain() if r.id == rid), None)
            if reg is None:
                return 0
            todo = [ev for ev in self.cache
                    if reg.matches(ev, self.me, self.host) and self._key(ev) not in reg.seen]
            for ev in todo:
                reg.seen.add(self._key(ev))
        for ev in todo:
            self._call(reg, ev, [])
        return len(todo)

    def _place(self, reg: Registration, lst: list[Registration], fic: bool, lic: bool,
               before: str | None, after: str | None, append: bool) -> None:
        head = 1 if lst and lst[0].pin == "first_in_category" else 0
        tail = len(lst) - 1 if lst and lst[-1].pin == "last_in_category" else len(lst)
        if fic:
            if head:
                raise RegistrationError(f"{lst[0].name!r} is already first in the "
                                        f"{CATEGORY_NAMES[reg.category]} category")
            reg.pin = "first_in_category"
            lst.insert(0, reg)
        elif lic:
            if tail < len(lst):
                raise RegistrationError(f"{lst[-1].name!r} is already last in the "
                                        f"{CATEGORY_NAMES[reg.category]} category")
            reg.pin = "last_in_category"
            lst.append(reg)
        elif (ref := before if before is not None else after) is not None:
            idx = next((i for i, r in enumerate(lst) if r.name == ref), None)
            if idx is None:
                other = self._find(ref)
                why = (f"is in the {CATEGORY_NAMES[other.category]} category, not "
                       f"{CATEGORY_NAMES[reg.category]}" if other is not None else "is not registered")
                raise RegistrationError(f"handler {ref!r} {why}")
            if before is not None and lst[idx].pin == "first_in_category":
                raise RegistrationError(f"nothing can go before {ref!r} (first in its category)")
            if after is not None and lst[idx].pin == "last_in_category":
                raise RegistrationError(f"nothing can go after {ref!r} (last in its category)")
            lst.insert(idx if before is not None else idx + 1, reg)
        elif append:
            lst.insert(tail, reg)
        else:                                   # prepend (the default)
            lst.insert(head, reg)

    def _find(self, name: str) -> Registration | None:
        for reg in self.chain():
            if reg.name == name:
                return reg
        return None

    def deregister(self, rid: int) -> bool:
        """Remove the handler with id ``rid``; False if there was none."""
        with self._lock:
            if self._first is not None and self._first.id == rid:
                self._first = None
                return True
            if self._last is not None and self._last.id == rid:
                self._last = None
                return True
            for lst in self._lists:
                for i, reg in enumerate(lst):
                    if reg.id == rid:
                        del lst[i]
                        return True
        return False

    def chain(self) -> list[Registration]:
        """Every handler in invocation order."""
        with self._lock:
            out = [self._first] if self._first is not None else []
            for lst in self._lists:
                out.extend(lst)
            if self._last is not None:
                out.append(self._last)
            return out

    def names(self) -> list[str]:
        """Handler names in invocation order."""
        return [r.name for r in self.chain()]

    # --- delivery ----------------------------------------------------------------------
    @staticmethod
    def _key(ev: Event) -> int:
        return ev.id

    def dispatch(self, ev: Event) -> list[Result]:
        """Run the chain for ``ev`` (stops at COMPLETE) and cache it; returns the results in order."""
        if ev.id == 0:
            ev = ev.replace(id=-next(self._local_ids))
        with self._lock:
            regs = [r for r in self.chain() if r.matches(ev, self.me, self.host)]
            if ev.cache and self.cache.maxlen:
                if len(self.cache) == self.cache.maxlen:
                    self.evicted += 1
                self.cache.append(ev)
            for r in regs:
                r.seen.add(self._key(ev))
        results: list[Result] = []
        for reg in regs:
            res = self._call(reg, ev, results)
            results.append(res)
            if res.status == Status.COMPLETE:
                break
        return results

    def _call(self, reg: Registration, ev: Event, prior: list[Result]) -> Result:
        try:
            res = _as_result(reg.name, reg.handler(ev, list(prior)))
        except Exception as exc:  # noqa: BLE001 - a failing handler must not break the chain
            res = Result(reg.name, Status.NO_ACTION,
                         {"error": f"{type(exc).__name__}: {exc}",
                          "traceback": _format_exc()})
        if res.name != reg.name:
            res = Result(reg.name, res.status, res.data)
        return res


def _format_exc() -> str:
    """The exception being handled, formatted (``traceback`` loaded here: it is not needed at start)."""
    import traceback
    return traceback.format_exc(limit=5)
