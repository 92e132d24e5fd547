"""Controller-side parts of event relay: merging low-level failure signals into one
"process failed" event, the job's key-value store with waiting lookups, and the tools subscribed
to events and output (pure, no sockets; ``planaria.launch.fanout`` sends)."""
from __future__ import annotations

from typing import Any

from planaria.events import codes
from planaria.util.record import field, record

MERGE_WINDOW = 0.05          # seconds: signals about failures this close together become one event
SUBSCRIPTION_TTL = 5.0       # seconds a tool subscription lives without renewal

# low-level signal -> (code it suggests, precedence: the most specific nature wins)
_NATURE = {
    "killed-by-cmd": (codes.PROC_KILLED_BY_CMD, 4),
    "signal": (codes.PROC_ABORTED_BY_SIG, 3),
    "exited": (codes.PROC_TERM_WO_SYNC, 2),
    "aborted": (codes.PROC_ABORTED, 1),       # reported its own failure and lives on (sim zombie)
    "lost-connection": (codes.PROC_ABORTED, 1),
    "unreachable": (codes.PROC_ABORTED, 0),
}


@record
class FaultMerger:
    """Collects signals (process exited, killed by signal, lost connection, undeliverable message)
    and emits one event per burst naming every affected rank; a rank is announced once."""

    window: float = MERGE_WINDOW
    announced: set[int] = field(default_factory=set)
    _pending: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    _due: float | None = None
    absorbed: int = 0                    # signals about ranks already announced

    def add(self, rank: int, kind: str, now: float, **detail: Any) -> bool:
        """Record one signal; False when ``rank`` was already announced (the signal is merged away)."""
        if kind not in _NATURE:
            raise ValueError(f"unknown failure signal {kind!r}")
        if rank in self.announced:
            self.absorbed += 1
            return False
        self._pending.setdefault(rank, []).append({"kind": kind, "t": now, **detail})
        if self._due is None:
            self._due = now + self.window
        return True

    def any_failure(self) -> bool:
        """Whether any rank has been reported failed (announced or still pending)."""
        return bool(self.announced or self._pending)

    def next_due(self) -> float | None:
        """When the pending burst is to be emitted (None: nothing pending)."""
        return self._due

    def take(self, now: float, force: bool = False) -> dict[str, Any] | None:
        """The merged event once the window has passed: {code, affected, info}; None otherwise."""
        if self._due is None or (now < self._due and not force):
            return None
        pending, self._pending, self._due = self._pending, {}, None
        best = max((_NATURE[c["kind"]] for cs in pending.values() for c in cs), key=lambda x: x[1])
        self.announced.update(pending)
        causes = {str(r): cs for r, cs in sorted(pending.items())}
        sig = next((c.get("signal") for cs in pending.values() for c in cs if c.get("signal")), None)
        info: dict[str, Any] = {"causes": causes, "nature": codes.name_of(best[0])}
        if sig is not None:
            info["signal"] = sig
        return {"code": best[0], "affected": sorted(pending), "info": info}


@record
class _Waiter:
    ident: Any                           # where the answer goes (the controller's peer handle)
    mid: Any
    keys: list[str]
    deadline: float


class KVStore:
    """Published key-values of one job (PMIx_Publish/PMIx_Lookup) with bounded waiting lookups."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.owner: dict[str, Any] = {}
        self._waiters: list[_Waiter] = []

    def publish(self, items: dict[str, Any], replace: bool = False, owner: Any = None) -> tuple[list[str], str | None]:
        """Store ``items``; (stored keys, error). Nothing is stored when a key exists and not ``replace``."""
        if not isinstance(items, dict) or not items:
            return [], "nothing to publish"
        clash = sorted(k for k in items if k in self.data) if not replace else []
        if clash:
            return [], f"already published: {', '.join(clash)} (replace to overwrite)"
        for k, v in items.items():
            self.data[str(k)] = v
            self.owner[str(k)] = owner
        return sorted(str(k) for k in items), None

    def lookup(self, keys: list[str]) -> dict[str, Any]:
        """The published values of ``keys`` (missing ones left out)."""
        return {k: self.data[k] for k in keys if k in self.data}

    def wait(self, ident: Any, mid: Any, keys: list[str], deadline: float) -> None:
        """Answer later: when every key is there or at ``deadline``."""
        self._waiters.append(_Waiter(ident, mid, list(keys), deadline))

    def waiting(self) -> bool:
        """True while a lookup waits for keys."""
        return bool(self._waiters)

    def next_deadline(self) -> float | None:
        """The earliest waiting deadline."""
        return min((w.deadline for w in self._waiters), default=None)

    def ready(self, now: float) -> list[tuple[Any, dict[str, Any]]]:
        """Replies for waiters that are satisfied or timed out."""
        out, keep = [], []
        for w in self._waiters:
            found = self.lookup(w.keys)
            if len(found) == len(w.keys) or now >= w.deadline:
                reply: dict[str, Any] = {"type": "lookup", "data": found,
                                         "missing": [k for k in w.keys if k not in found]}
                if w.mid is not None:
                    reply["id"] = w.mid
                out.append((w.ident, reply))
            else:
                keep.append(w)
        self._waiters = keep
        return out


class Subscriptions:
    """Tools subscribed to events (all, or some codes) and to the ranks' output, each until it has
    gone ``ttl`` seconds without renewal."""

    def __init__(self, ttl: float = SUBSCRIPTION_TTL) -> None:
        self.ttl = ttl
        self.subs: dict[Any, dict[str, Any]] = {}          # the controller's peer handle -> subscription

    def __bool__(self) -> bool:
        return bool(self.subs)

    def renew(self, ident: Any, msg: dict[str, Any], now: float) -> bool:
        """Subscribe ``ident`` as ``subscribe`` message ``msg`` asks (``io``, ``events``, ``codes``)
        or renew its subscription; True when it is new."""
        new = ident not in self.subs
        cs = msg.get("codes")
        self.subs[ident] = {"until": now + self.ttl, "io": bool(msg.get("io")),
                            "events": bool(msg.get("events")),
                            "codes": None if cs is None else {int(c) for c in cs}}
        return new

    def cancel(self, ident: Any) -> None:
        """Forget ``ident``'s subscription."""
        self.subs.pop(ident, None)

    def expire(self, now: float) -> None:
        """Forget subscriptions not renewed in time."""
        for ident in [i for i, sub in self.subs.items() if sub["until"] < now]:
            del self.subs[ident]

    def wanted(self, msg: dict[str, Any], what: str) -> list[Any]:
        """Who gets ``msg`` (``what``: ``events`` or ``io``); an event only when its code is subscribed."""
        subs = [i for i, sub in self.subs.items() if sub.get(what)]
        if subs and what == "events" and msg.get("event"):
            code = msg["event"]["code"]
            subs = [i for i in subs if self.subs[i].get("codes") is None or code in self.subs[i]["codes"]]
        return subs
