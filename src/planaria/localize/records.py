"""Error records: the paper's 5-tuple <src, dst, time, type, status> plus where it happened.

A record is what a rank sends to the responsible rank of the rank it suspects
(one short message: see ``MAX_PROBE_PAYLOAD``).  Records are immutable; the rule
base (:mod:`planaria.localize.rules`) groups them into incidents.

Fields
------
``src``
    world rank that detected the error (for records made from a probe result: the
    responsible rank that ran the probe).
``dst``
    world rank the error is about (the peer that did not answer, the rank a
    collective waits for), or ``None`` when there is no suspect (an I/O error is
    about ``src`` itself; a collective timeout may not know who is missing).
``time``
    when it was detected (seconds, the ``time.time()`` of the detecting rank).
``type``
    one of the error types below (other software may use its own, non-empty,
    at most ``MAX_TYPE_LEN`` characters).
``status``
    probe progress: one of ``STATUSES``.
``evidence``
    a small JSON-able dict (threshold, waited seconds, ping result, vote tally...).
``comm``, ``tag``, ``op``, ``site``
    communicator id, message tag, planaria operation name and the application
    frame ("path/file.py:LINE in func") the error was seen in, when known.
``host``
    host of the rank the record is about (``dst``, or ``src`` when ``dst`` is None).

The subject of a record (``record.subject``) is ``dst`` when set, else ``src``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

__all__ = [
    "MSG_TIMEOUT", "COLL_TIMEOUT", "PING_TIMEOUT", "PROC_FAILED", "IO_ERROR", "SLOW_MESSAGE",
    "NO_SEND", "PEER_COMPUTING", "EXTERNAL", "NETWORK", "UNMATCHED", "ERROR_TYPES",
    "DETECTED", "PROBING", "CONFIRMED", "REFUTED", "MERGED", "STATUSES",
    "MAX_PROBE_PAYLOAD", "MAX_TYPE_LEN", "ErrorRecord",
]

# --------------------------------------------------------------------------- error types

MSG_TIMEOUT = "msg-timeout"
"""A point-to-point operation waited longer than its threshold (src waits for dst)."""
COLL_TIMEOUT = "coll-timeout"
"""A collective operation waited longer than its threshold (dst: the rank it waits for, if known)."""
PING_TIMEOUT = "ping-timeout"
"""No reply to a response probe (``check_ping``).  Status ``confirmed``: a vote of dst's group agrees."""
PROC_FAILED = "proc-failed"
"""The MPI library reported that dst failed (ULFM ``MPI_ERR_PROC_FAILED``)."""
IO_ERROR = "io-error"
"""An I/O operation failed on src (dst is None); ``host`` says where."""
SLOW_MESSAGE = "slow-message"
"""A message completed, but far above its threshold: a message-performance anomaly."""
NO_SEND = "no-send"
"""Status probe: dst never posted the send src waits for; it is blocked elsewhere (evidence: op, waiting_on)."""
PEER_COMPUTING = "peer-computing"
"""Status probe: dst has not been inside MPI for long (``site``: where it computes)."""
EXTERNAL = "external"
"""Submitted by other software (the injector, the launcher); evidence["message"] says what."""
NETWORK = "network"
"""Link-level fault: pings from several sources fail while dst answers its own group."""
UNMATCHED = "unmatched"
"""Status probe: dst sent src a message src's receive does not match (another tag, or src waits for
another rank): the program's mismatch (evidence: tag sent, tag and source waited for)."""

ERROR_TYPES: dict[str, str] = {
    name: doc for name, doc in (
        (MSG_TIMEOUT, "point-to-point operation exceeded its threshold"),
        (COLL_TIMEOUT, "collective operation exceeded its threshold"),
        (PING_TIMEOUT, "no reply to a response probe"),
        (PROC_FAILED, "MPI reported the peer failed"),
        (IO_ERROR, "I/O error on the detecting rank"),
        (SLOW_MESSAGE, "message completed far above its threshold"),
        (NO_SEND, "status probe: peer never posted the matching send"),
        (PEER_COMPUTING, "status probe: peer not in MPI for long"),
        (EXTERNAL, "submitted by other software"),
        (NETWORK, "link-level fault: peer answers its own group only"),
        (UNMATCHED, "status probe: the peer's message does not match the receive (tag or source)"),
    )
}
"""Every built-in error type with a one-line description."""

# --------------------------------------------------------------------------- probe statuses

DETECTED = "detected"
"""Reported, not probed yet."""
PROBING = "probing"
"""A probe of dst is in progress."""
CONFIRMED = "confirmed"
"""A probe (or the MPI library) confirmed the error."""
REFUTED = "refuted"
"""A probe found dst healthy."""
MERGED = "merged"
"""Folded into another incident (duplicate or consequence)."""

STATUSES: tuple[str, ...] = (DETECTED, PROBING, CONFIRMED, REFUTED, MERGED)

MAX_PROBE_PAYLOAD = 1024
"""Bytes a packed record may take: it must fit in one short message (never split)."""
MAX_TYPE_LEN = 64
"""Longest allowed error type name."""

_MIN_STR = 16  # trimming never cuts a string field below this many characters
_KEYS = ("src", "dst", "time", "type", "status", "evidence", "comm", "tag", "op", "site", "host")


def _jsonable(value: Any, where: str) -> Any:
    """A deep copy of ``value`` with tuples as lists; ValueError if it is not JSON-able."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: non-finite number {value!r}")
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, where) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            out[k] = _jsonable(v, where)
        return out
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return _jsonable(value.item(), where)
    raise ValueError(f"{where}: {type(value).__name__} value {value!r} is not JSON-able")


def _opt_str(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"error record: {name} must be a string or None, got {value!r}")
    return value


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if hasattr(value, "item") and isinstance(value.item(), int):  # numpy integer
            return int(value.item())
        raise ValueError(f"error record: {name} must be an integer, got {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """One detected error: who saw it (src), about whom (dst), when, what, and probe progress."""

    src: int
    dst: int | None
    time: float
    type: str
    status: str = DETECTED
    evidence: dict = field(default_factory=dict, hash=False)
    comm: str | None = None
    tag: int | None = None
    op: str | None = None
    site: str | None = None
    host: str | None = None

    def __post_init__(self) -> None:
        src = _int(self.src, "src")
        if src < 0:
            raise ValueError(f"error record: src must be >= 0, got {src}")
        dst = None if self.dst is None else _int(self.dst, "dst")
        if dst is not None and dst < 0:
            raise ValueError(f"error record: dst must be >= 0 or None, got {dst}")
        try:
            t = float(self.time)
        except (TypeError, ValueError):
            raise ValueError(f"error record: time must be a number, got {self.time!r}") from None
        if not math.isfinite(t):
            raise ValueError(f"error record: time must be finite, got {self.time!r}")
        if not isinstance(self.type, str) or not self.type or len(self.type) > MAX_TYPE_LEN:
            raise ValueError(f"error record: type must be a non-empty string of at most "
                             f"{MAX_TYPE_LEN} characters, got {self.type!r}")
        if self.status not in STATUSES:
            raise ValueError(f"error record: status must be one of {', '.join(STATUSES)}, got {self.status!r}")
        if not isinstance(self.evidence, dict):
            raise ValueError(f"error record: evidence must be a dict, got {type(self.evidence).__name__}")
        evidence = _jsonable(self.evidence, "error record evidence")
        tag = None if self.tag is None else _int(self.tag, "tag")
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "time", t)
        object.__setattr__(self, "evidence", evidence)
        object.__setattr__(self, "tag", tag)
        for name in ("comm", "op", "site", "host"):
            object.__setattr__(self, name, _opt_str(getattr(self, name), name))

    # ----------------------------------------------------------------- views

    @property
    def subject(self) -> int:
        """The rank this record is about: dst when set, else src."""
        return self.src if self.dst is None else self.dst

    def sort_key(self) -> tuple:
        """A total order on records (time first); used wherever a deterministic order is needed."""
        return (self.time, self.src, -1 if self.dst is None else self.dst, self.type, self.status,
                self.comm or "", -1 if self.tag is None else self.tag, self.op or "", self.site or "",
                self.host or "", json.dumps(self.evidence, sort_keys=True))

    def with_status(self, status: str) -> ErrorRecord:
        """The same record with another probe status."""
        return replace(self, status=status)

    # ----------------------------------------------------------------- (de)serialisation

    def to_dict(self) -> dict[str, Any]:
        """A msgpack/JSON-able map; optional fields are left out when empty."""
        out: dict[str, Any] = {"src": self.src, "dst": self.dst, "time": self.time,
                               "type": self.type, "status": self.status}
        if self.evidence:
            out["evidence"] = self.evidence
        for name in ("comm", "tag", "op", "site", "host"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorRecord:
        """Inverse of :meth:`to_dict`; ValueError on a missing or unknown key."""
        if not isinstance(data, dict):
            raise ValueError(f"error record: expected a map, got {type(data).__name__}")
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise ValueError(f"error record: unknown key(s) {', '.join(map(str, unknown))}")
        missing = [k for k in ("src", "time", "type") if k not in data]
        if missing:
            raise ValueError(f"error record: missing key(s) {', '.join(missing)}")
        kwargs = dict(data)
        kwargs.setdefault("dst", None)
        kwargs["evidence"] = dict(kwargs.get("evidence") or {})
        return cls(**kwargs)

    def encoded_size(self) -> int:
        """Bytes of the msgpack encoding of :meth:`to_dict`."""
        return len(msgpack.packb(self.to_dict(), use_bin_type=True))

    def trimmed(self, limit: int = MAX_PROBE_PAYLOAD) -> ErrorRecord:
        """This record cut down to fit ``limit`` bytes: evidence entries go first (largest first,
        leaving ``evidence["trimmed"]`` = how many were dropped), then long string fields are
        shortened, keeping their tail."""
        if self.encoded_size() <= limit:
            return self
        rec = self
        evidence = dict(self.evidence)
        dropped = 0
        while evidence and rec.encoded_size() > limit:
            biggest = max(sorted(evidence), key=lambda k: len(msgpack.packb([k, evidence[k]])))
            del evidence[biggest]
            dropped += 1
            rec = replace(self, evidence={**evidence, "trimmed": dropped})
        if rec.encoded_size() > limit:
            rec = replace(rec, evidence={"trimmed": dropped} if dropped else {})
        while rec.encoded_size() > limit:
            name = max(("comm", "op", "site", "host"), key=lambda n: len(getattr(rec, n) or ""))
            value = getattr(rec, name) or ""
            if len(value) <= _MIN_STR:
                rec = replace(rec, evidence={})
                if rec.encoded_size() > limit:
                    raise ValueError(f"error record cannot be trimmed to {limit} bytes")
                break
            keep = max(_MIN_STR, len(value) // 2)
            shorter: dict[str, Any] = {name: "…" + value[-(keep - 1):]}
            rec = replace(rec, **shorter)
        return rec

    def pack(self, limit: int = MAX_PROBE_PAYLOAD) -> bytes:
        """msgpack bytes of the record, trimmed to fit ``limit`` (one short message)."""
        return msgpack.packb(self.trimmed(limit).to_dict(), use_bin_type=True)

    @classmethod
    def unpack(cls, payload: bytes) -> ErrorRecord:
        """Inverse of :meth:`pack`."""
        try:
            data = msgpack.unpackb(payload, raw=False)
        except Exception as exc:  # msgpack raises several unrelated types
            raise ValueError(f"error record: undecodable payload ({type(exc).__name__})") from None
        return cls.from_dict(data)
