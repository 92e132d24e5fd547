"""The fault-injection plan language: parsing, validation, printing and expansion.

A plan is a list of faults.  Each fault is written ``KIND:key=value,key=value``;
several faults are separated by ``;`` (or newlines).  See ``docs/injection.md``.

This module is pure logic: it never touches MPI, files or clocks.
"""
from __future__ import annotations

import hashlib
import math
import os
import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Union
from planaria.errors import BadInput
from planaria.util.env import PLANARIA_INJECT

__all__ = [
    "ENV_VAR",
    "PlanError",
    "RankSet",
    "Fault",
    "Kill",
    "RandomKill",
    "Hang",
    "Delay",
    "Drop",
    "BitFlip",
    "IOErrorFault",
    "Plan",
    "KillEvent",
    "derive_seed",
    "kill",
    "random_kill",
    "hang",
    "delay",
    "drop",
    "bitflip",
    "ioerror",
]

#: Environment variable through which a plan is handed to every rank.
ENV_VAR = PLANARIA_INJECT


PHASES = ("checkpoint", "recover", "complete", "finish")
"""Phases a kill can be tied to (``kill:rank=R,phase=NAME``)."""


class PlanError(BadInput):
    """A fault spec or plan is malformed or does not fit the job.

    ``reason`` is the message without the ``bad inject spec '...'`` prefix.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --------------------------------------------------------------------------- rank sets

# ASCII digits only: ``\d`` and int()/float() also take other scripts' digits (``٣``) and ``1_0``
_INT_RE = re.compile(r"[0-9]+\Z")
# NUMBER of the grammar (docs/injection.md): 1, 2.5, .5, 1e-3; the sign only so that a negative
# value is told it is out of range. No ``_``, no inf/nan, no hex, no non-ASCII digits.
_NUM_RE = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


@dataclass(frozen=True, init=False)
class RankSet:
    """A set of ranks: ``*`` (every rank), ``R``, ``R-S`` (inclusive) or ``A+B+C`` unions."""

    ranks: frozenset[int] | None  # None means every rank

    def __init__(self, ranks: Iterable[int] | None = None) -> None:
        if ranks is None:
            object.__setattr__(self, "ranks", None)
            return
        items = frozenset(ranks)
        for r in items:
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise PlanError(f"bad rank {r!r} (expected a non-negative integer)")
        if not items:
            raise PlanError("empty rank set")
        object.__setattr__(self, "ranks", items)

    ALL: ClassVar["RankSet"]

    @classmethod
    def coerce(cls, value: "RankLike") -> "RankSet":
        """Turn an int, an iterable of ints, a spec string or a RankSet into a RankSet."""
        if isinstance(value, RankSet):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if isinstance(value, bool):
            raise PlanError(f"bad rank {value!r}")
        if isinstance(value, int):
            return cls([value])
        if value is None:
            return cls(None)
        return cls(value)

    @classmethod
    def parse(cls, text: str) -> "RankSet":
        """Parse ``*``, ``R``, ``R-S`` or ``A+B-C+...``."""
        text = text.strip()
        if text == "*":
            return cls(None)
        ranks: set[int] = set()
        for item in text.split("+"):
            item = item.strip()
            lo, sep, hi = item.partition("-")
            lo, hi = lo.strip(), hi.strip()
            if not _INT_RE.match(lo) or (sep and not _INT_RE.match(hi)):
                raise PlanError(f"bad rank set {text!r} (expected R, R-S, R+S+T or *)",)
            a = int(lo)
            b = int(hi) if sep else a
            if b < a:
                raise PlanError(f"bad rank range {item!r} (end before start)")
            if b - a > 1_000_000:
                raise PlanError(f"rank range {item!r} is too large")
            ranks.update(range(a, b + 1))
        return cls(ranks)

    @property
    def is_all(self) -> bool:
        """True for ``*``."""
        return self.ranks is None

    def __contains__(self, rank: object) -> bool:
        return self.ranks is None or rank in self.ranks

    def expand(self, size: int) -> list[int]:
        """The sorted ranks of this set that exist in a job of ``size`` ranks."""
        if self.ranks is None:
            return list(range(size))
        return sorted(r for r in self.ranks if r < size)

    def max(self) -> int | None:
        """The largest explicit rank, or None for ``*``."""
        return None if self.ranks is None else max(self.ranks)

    def to_spec(self) -> str:
        """Canonical text: ``*`` or sorted runs like ``0-3+7``."""
        if self.ranks is None:
            return "*"
        out: list[str] = []
        rs = sorted(self.ranks)
        start = prev = rs[0]
        for r in rs[1:] + [None]:
            if r is not None and r == prev + 1:
                prev = r
                continue
            out.append(str(start) if start == prev else f"{start}-{prev}")
            if r is not None:
                start = prev = r
        return "+".join(out)

    def __str__(self) -> str:
        return self.to_spec()

    def __repr__(self) -> str:
        return f"RankSet({self.to_spec()!r})"


RankSet.ALL = RankSet(None)
RankLike = Union[RankSet, int, str, Iterable[int], None]


# --------------------------------------------------------------------------- value checks


def _check_int(name: str, value: Any, *, minimum: int = 0, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        raise PlanError(f"bad value {value!r} for {name} (expected {what})")


def _check_float(name: str, value: Any, *, positive: bool = False, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"bad value {value!r} for {name} (expected a number)")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        what = "a positive number" if positive else "a non-negative number"
        raise PlanError(f"bad value {value!r} for {name} (expected {what})")
    return v


def _check_trigger(iteration: Any, time: Any, *, required: bool) -> float | None:
    _check_int("iter", iteration, optional=True)
    t = _check_float("time", time, optional=True)
    if iteration is not None and t is not None:
        raise PlanError("'iter' and 'time' are mutually exclusive")
    if required and iteration is None and t is None:
        raise PlanError("missing required key 'iter' or 'time'")
    return t


def _fmt_float(v: float) -> str:
    return repr(float(v))


def _fmt_secs(v: float) -> str:
    return f"{v:g}s"


# --------------------------------------------------------------------------- faults


class Fault:
    """Base class of every fault kind."""

    kind: ClassVar[str] = ""

    def to_spec(self) -> str:  # pragma: no cover - overridden
        """The spec text of this fault."""
        raise NotImplementedError

    def rank_sets(self) -> Iterator[tuple[str, RankSet]]:
        """(key, rank set) pairs of this fault, for validation."""
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass; Fault is not
            v = getattr(self, f.name)
            if isinstance(v, RankSet):
                yield f.name, v

    def __add__(self, other: "Fault | Plan") -> "Plan":
        return Plan([self]) + other

    def __str__(self) -> str:
        return self.to_spec()

    def _spec(self, items: list[tuple[str, Any]]) -> str:
        parts = []
        for key, value in items:
            if value is None:
                continue
            if isinstance(value, float):
                value = _fmt_float(value)
            elif isinstance(value, RankSet):
                value = value.to_spec()
            parts.append(f"{key}={value}")
        return f"{self.kind}:" + ",".join(parts)


def _post(obj: Fault, fn: Callable[[], None]) -> None:
    try:
        fn()
    except PlanError as e:
        raise PlanError(f"bad {obj.kind} fault: {e.reason}", e.reason) from None


def _set(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class Kill(Fault):
    """Kill ``rank`` at iteration ``iteration``, ``time`` seconds after the start, or on entering ``phase``.

    With ``phase`` (``checkpoint``, ``recover``, ``complete`` or ``finish``, announced by the application or
    the recovery driver through ``planaria.phase``), ``iteration`` if given means "not before iteration I".
    """

    rank: RankSet
    iteration: int | None = None
    time: float | None = None
    phase: str | None = None
    kind: ClassVar[str] = "kill"

    def __post_init__(self) -> None:
        def check() -> None:
            _set(self, "rank", RankSet.coerce(self.rank))
            if self.phase is not None:
                if self.phase not in PHASES:
                    raise PlanError(f"bad value {self.phase!r} for phase (expected {', '.join(PHASES)})")
                if self.time is not None:
                    raise PlanError("'phase' and 'time' are mutually exclusive")
                _check_trigger(self.iteration, None, required=False)
                return
            _set(self, "time", _check_trigger(self.iteration, self.time, required=True))
        _post(self, check)

    def to_spec(self) -> str:
        """The spec text of this fault."""
        return self._spec([("rank", self.rank), ("iter", self.iteration), ("time", self.time),
                           ("phase", self.phase)])


@dataclass(frozen=True)
class RandomKill(Fault):
    """Kill up to ``count`` random ranks with exponential inter-arrival times of mean ``mtbf``."""

    mtbf: float
    seed: int
    count: int = 1
    ranks: RankSet = field(default_factory=lambda: RankSet.ALL)
    start: float = 0.0
    kind: ClassVar[str] = "kill"

    def __post_init__(self) -> None:
        def check() -> None:
            _set(self, "mtbf", _check_float("mtbf", self.mtbf, positive=True))
            _check_int("seed", self.seed)
            _check_int("count", self.count, minimum=1)
            _set(self, "ranks", RankSet.coerce(self.ranks))
            _set(self, "start", _check_float("start", self.start))
        _post(self, check)

    def to_spec(self) -> str:
        """The spec text of this fault."""
        return self._spec([
            ("mtbf", self.mtbf), ("seed", self.seed),
            ("count", None if self.count == 1 else self.count),
            ("ranks", None if self.ranks.is_all else self.ranks),
            ("start", None if self.start == 0.0 else self.start),
        ])

    def schedule(self, size: int) -> list[tuple[float, int]]:
        """The deterministic (time, victim) sequence for a job of ``size`` ranks."""
        rng = random.Random(derive_seed(self.seed, "kill", size))
        candidates = self.ranks.expand(size)
        out: list[tuple[float, int]] = []
        t = self.start
        for _ in range(min(self.count, len(candidates))):
            t += rng.expovariate(1.0 / self.mtbf)
            victim = candidates.pop(rng.randrange(len(candidates)))
            out.append((t, victim))
        return out


@dataclass(frozen=True)
class Hang(Fault):
    """Make ``rank`` stop progressing (alive, blocked forever) at an iteration or time."""

    rank: RankSet
    iteration: int | None = None
    time: float | None = None
    kind: ClassVar[str] = "hang"

    def __post_init__(self) -> None:
        def check() -> None:
            _set(self, "rank", RankSet.coerce(self.rank))
            _set(self, "time", _check_trigger(self.iteration, self.time, required=True))
        _post(self, check)

    def to_spec(self) -> str:
        """The spec text of this fault."""
        return self._spec([("rank", self.rank), ("iter", self.iteration), ("time", self.time)])


def _check_p(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(float(p)):
        raise PlanError(f"bad value {p!r} for p (expected a probability in [0, 1])")
    if not 0.0 <= float(p) <= 1.0:
        raise PlanError(f"p={p!r} out of range [0, 1]")
    return float(p)


@dataclass(frozen=True)
class Delay(Fault):
    """Delay each message from ``src`` to ``dst`` by ``ms`` milliseconds with probability ``p``."""

    p: float
    ms: float
    src: RankSet = field(default_factory=lambda: RankSet.ALL)
    dst: RankSet = field(default_factory=lambda: RankSet.ALL)
    seed: int = 0
    kind: ClassVar[str] = "delay"

    def __post_init__(self) -> None:
        def check() -> None:
            _set(self, "src", RankSet.coerce(self.src))
            _set(self, "dst", RankSet.coerce(self.dst))
            _set(self, "p", _check_p(self.p))
            _set(self, "ms", _check_float("ms", self.ms, positive=True))
            _check_int("seed", self.seed)
        _post(self, check)

    def to_spec(self) -> str:
        """The spec text of this fault."""
        return self._spec([("src", self.src), ("dst", self.dst), ("p", self.p), ("ms", self.ms),
                           ("seed", self.seed or None)])


@dataclass(frozen=True)
class Drop(Fault):
    """Drop each message from ``src`` to ``dst`` with probability ``p``."""

    p: float
    src: RankSet = field(default_factory=lambda: RankSet.ALL)
    dst: RankSet = field(default_factory=lambda: RankSet.ALL)
    seed: int = 0
    kind: ClassVar[str] = "drop"

    def __post_init__(self) -> None:
        def check() -> None:
            _set(self, "src", RankSet.coerce(self.src))
            _set(self, "dst", RankSet.coerce(self.dst))
            _set(self, "p", _check_p(self.p))
            _check_int("seed", self.seed)
        _post(self, check)

    def to_spec(self) -> str:
        """The spec text of this fault."""
        return self._spec([("src", self.src), ("dst", self.dst), ("p", self.p),
                           ("seed", self.seed or None)])


@dataclass(frozen=True)
class BitFlip(Fault):
    """Flip one bit of element ``index`` of the array registered as ``array`` on ``rank``."""

    rank: RankSet
    array: str
    iteration: int
    index: int | None = None
    bit: int | None = None
    seed: int = 0
    kind: ClassVar[str] = "bitflip"

    def __post_init__(self) -> None:
        def check() -> None:
            _set(self, "rank", RankSet.coerce(self.rank))
            if not isinstance(self.array, str) or not _NAME_RE.match(self.array):
                raise PlanError(f"bad array name {self.array!r} (expected letters, digits, '_' or '.')")
            _check_int("iter", self.iteration)
            _check_int("index", self.index, optional=True)
            _check_int("bit", self.bit, optional=True)
            _check_int("seed", self.seed)
        _post(self, check)

    def to_spec(self) -> str:
        """The spec text of this fault."""
        return self._spec([("rank", self.rank), ("array", self.array), ("iter", self.iteration),
                           ("index", self.index), ("bit", self.bit), ("seed", self.seed or None)])


_BAD_GLOB_CHARS = set(",;=\n\r")


@dataclass(frozen=True)
class IOErrorFault(Fault):
    """Make file opens on ``rank`` (matching ``path``) fail with EIO after a trigger."""

    rank: RankSet
    iteration: int | None = None
    time: float | None = None
    path: str | None = None
    count: int | None = None
    kind: ClassVar[str] = "ioerror"

    def __post_init__(self) -> None:
        def check() -> None:
            _set(self, "rank", RankSet.coerce(self.rank))
            _set(self, "time", _check_trigger(self.iteration, self.time, required=False))
            if self.path is not None:
                if (not isinstance(self.path, str) or not self.path or self.path != self.path.strip()
                        or _BAD_GLOB_CHARS & set(self.path)):
                    raise PlanError(f"bad path glob {self.path!r}")
            _check_int("count", self.count, minimum=1, optional=True)
        _post(self, check)

    def to_spec(self) -> str:
        """The spec text of this fault."""
        return self._spec([("rank", self.rank), ("iter", self.iteration), ("time", self.time),
                           ("path", self.path), ("count", self.count)])


# --------------------------------------------------------------------------- parser

_Conv = Callable[[str, str], Any]


def _p_int(key: str, text: str) -> int:
    if not _INT_RE.match(text):
        raise PlanError(f"bad value {text!r} for {key} (expected a non-negative integer)")
    return int(text)


def _p_float(key: str, text: str) -> float:
    if not _NUM_RE.match(text):
        raise PlanError(f"bad value {text!r} for {key} (expected a non-negative number)")
    v = float(text)
    if not math.isfinite(v) or v < 0:
        raise PlanError(f"bad value {text!r} for {key} (expected a non-negative number)")
    return v


def _p_pos_float(key: str, text: str) -> float:
    v = _p_float(key, text)
    if v == 0.0:
        raise PlanError(f"bad value {text!r} for {key} (expected a positive number)")
    return v


def _p_pos_int(key: str, text: str) -> int:
    v = _p_int(key, text)
    if v == 0:
        raise PlanError(f"bad value {text!r} for {key} (expected an integer >= 1)")
    return v


def _p_prob(key: str, text: str) -> float:
    if not _NUM_RE.match(text):
        raise PlanError(f"bad value {text!r} for {key} (expected a probability in [0, 1])")
    v = float(text)
    if not (0.0 <= v <= 1.0):  # also rejects nan
        raise PlanError(f"{key}={text} out of range [0, 1]")
    return v


def _p_ranks(key: str, text: str) -> RankSet:
    try:
        return RankSet.parse(text)
    except PlanError as e:
        if "range" in e.reason:
            raise PlanError(f"bad value {text!r} for {key}: {e.reason}") from None
        raise PlanError(f"bad value {text!r} for {key} (expected R, R-S, R+S+T or *)") from None


def _p_str(key: str, text: str) -> str:
    return text


def _p_phase(key: str, text: str) -> str:
    if text not in PHASES:
        raise PlanError(f"bad value {text!r} for {key} (expected {', '.join(PHASES)})")
    return text


# key -> (constructor argument, converter); order = canonical order in messages
_HANG_KEYS: dict[str, tuple[str, _Conv]] = {
    "rank": ("rank", _p_ranks), "iter": ("iteration", _p_int), "time": ("time", _p_float)}
_KILL_KEYS: dict[str, tuple[str, _Conv]] = {**_HANG_KEYS, "phase": ("phase", _p_phase)}
_RKILL_KEYS: dict[str, tuple[str, _Conv]] = {
    "mtbf": ("mtbf", _p_pos_float), "seed": ("seed", _p_int), "count": ("count", _p_pos_int),
    "ranks": ("ranks", _p_ranks), "start": ("start", _p_float)}
_SCHEMAS: dict[str, tuple[type[Fault], dict[str, tuple[str, _Conv]], tuple[str, ...]]] = {
    "kill": (Kill, _KILL_KEYS, ("rank",)),
    "randomkill": (RandomKill, _RKILL_KEYS, ("mtbf", "seed")),
    "hang": (Hang, dict(_HANG_KEYS), ("rank",)),
    "delay": (Delay, {"src": ("src", _p_ranks), "dst": ("dst", _p_ranks), "p": ("p", _p_prob),
                      "ms": ("ms", _p_pos_float), "seed": ("seed", _p_int)}, ("p", "ms")),
    "drop": (Drop, {"src": ("src", _p_ranks), "dst": ("dst", _p_ranks), "p": ("p", _p_prob),
                    "seed": ("seed", _p_int)}, ("p",)),
    "bitflip": (BitFlip, {"rank": ("rank", _p_ranks), "array": ("array", _p_str),
                          "iter": ("iteration", _p_int), "index": ("index", _p_int),
                          "bit": ("bit", _p_int), "seed": ("seed", _p_int)},
                ("rank", "array", "iter")),
    "ioerror": (IOErrorFault, {"rank": ("rank", _p_ranks), "iter": ("iteration", _p_int),
                               "time": ("time", _p_float), "path": ("path", _p_str),
                               "count": ("count", _p_pos_int)}, ("rank",)),
}
_KINDS = ("kill", "hang", "delay", "drop", "bitflip", "ioerror")


def _ascii_lower(word: str) -> str:
    """``word`` in lower case if it is ASCII; else unchanged, so it matches no kind or key
    (``str.lower`` maps e.g. the Kelvin sign to ``k``)."""
    return word.lower() if word.isascii() else word


def _parse_fault(token: str) -> Fault:
    kind, colon, body = token.partition(":")
    kind = _ascii_lower(kind.strip())
    if kind not in _KINDS:
        raise PlanError(f"unknown kind {kind!r} (expected {', '.join(_KINDS)})")
    if not colon or not body.strip():
        raise PlanError(f"no keys after {kind!r} (expected {kind}:key=value,...)")
    pairs: dict[str, str] = {}
    for item in body.split(","):
        key, eq, value = item.partition("=")
        key, value = _ascii_lower(key.strip()), value.strip()
        if not eq or not key:
            raise PlanError(f"expected key=value, got {item.strip()!r}")
        if key in pairs:
            raise PlanError(f"duplicate key {key!r}")
        if not value:
            raise PlanError(f"empty value for {key!r}")
        pairs[key] = value
    schema_name = kind
    if kind == "kill" and "mtbf" in pairs:
        schema_name = "randomkill"
    cls, keys, required = _SCHEMAS[schema_name]
    for key in pairs:
        if key not in keys:
            if schema_name == "kill" and key in _RKILL_KEYS:
                raise PlanError(f"key {key!r} needs mtbf= (random kill: mtbf, seed, count, ranks, start)")
            if schema_name == "randomkill" and key in _KILL_KEYS:
                raise PlanError(f"key {key!r} cannot be used with mtbf (expected {', '.join(keys)})")
            raise PlanError(f"unknown key {key!r} (expected {', '.join(keys)})")
    for key in required:
        if key not in pairs:
            raise PlanError(f"missing required key {key!r}")
    kwargs = {keys[k][0]: keys[k][1](k, v) for k, v in pairs.items()}
    return cls(**kwargs)


def _split_specs(text: str) -> list[str]:
    return [t.strip() for t in re.split(r"[;\n]", text) if t.strip()]


# --------------------------------------------------------------------------- plan

KillEvent = tuple[Union[float, None], Union[int, None], int, str]


def derive_seed(seed: int, *parts: object) -> int:
    """A stable 64-bit seed derived from ``seed`` and ``parts`` (same on every host and run)."""
    text = repr((int(seed),) + tuple(parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


@dataclass(frozen=True, init=False)
class Plan:
    """An ordered collection of faults."""

    faults: tuple[Fault, ...]

    def __init__(self, faults: Iterable[Fault] = ()) -> None:
        items = tuple(faults)
        for f in items:
            if not isinstance(f, Fault):
                raise TypeError(f"not a fault: {f!r}")
        object.__setattr__(self, "faults", items)

    @classmethod
    def parse(cls, text: "str | Iterable[str] | Plan | None") -> "Plan":
        """Parse one spec string (faults separated by ';') or a list of them."""
        if text is None:
            return cls()
        if isinstance(text, Plan):
            return text
        chunks = [text] if isinstance(text, str) else list(text)
        faults: list[Fault] = []
        for chunk in chunks:
            if not isinstance(chunk, str):
                raise TypeError(f"inject spec must be a string, got {chunk!r}")
            for token in _split_specs(chunk):
                try:
                    faults.append(_parse_fault(token))
                except PlanError as e:
                    msg = _one_line(f"bad inject spec {token!r}: {e.reason}")
                    raise PlanError(msg, e.reason) from None
        return cls(faults)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Plan":
        """Read the plan from ``$PLANARIA_INJECT`` (missing or empty gives an empty plan)."""
        env = os.environ if environ is None else environ
        return cls.parse(env.get(ENV_VAR, "") or "")

    def to_spec(self) -> str:
        """Spec text that parses back to an equal plan."""
        return ";".join(f.to_spec() for f in self.faults)

    def to_env(self) -> dict[str, str]:
        """``{PLANARIA_INJECT: spec}`` for a child environment."""
        return {ENV_VAR: self.to_spec()}

    def validate(self, size: int) -> "Plan":
        """Check every rank named by the plan exists in a job of ``size`` ranks; return self."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise PlanError(f"bad job size {size!r}")
        for f in self.faults:
            for key, rs in f.rank_sets():
                top = rs.max()
                if top is not None and top >= size:
                    bad = min(r for r in rs.ranks or () if r >= size)
                    raise PlanError(
                        f"bad inject spec {f.to_spec()!r}: {key} {bad} out of range "
                        f"for {size} ranks (0-{size - 1})")
        return self

    def kill_schedule(self, size: int) -> list[KillEvent]:
        """Every kill as (time or None, iteration or None, rank, reason), random kills expanded."""
        out: list[KillEvent] = []
        for f in self.faults:
            if isinstance(f, Kill):
                if f.phase is not None:
                    continue  # fired by Injector.phase, not by the clock or the step counter
                for r in f.rank.expand(size):
                    if f.iteration is not None:
                        out.append((None, f.iteration, r, f"injected kill at iteration {f.iteration}"))
                    else:
                        assert f.time is not None
                        out.append((f.time, None, r, f"injected kill at t={f.time:.2f}s"))
            elif isinstance(f, RandomKill):
                for t, r in f.schedule(size):
                    out.append((t, None, r, f"injected random kill (mtbf={_fmt_secs(f.mtbf)}, "
                                            f"seed={f.seed}) at t={t:.2f}s"))
        return out

    def unfired(self, size: int, fired: Iterable[tuple[int, str]]) -> list[str]:
        """The planned rank faults that never acted, one line each (``fired``: the (rank, kind) of
        each fault the ranks reported, e.g. from the job's event log).

        Kills (random ones included), hangs, bit flips and I/O errors name their ranks, so each
        (rank, kind) planned more often than it was reported did not fire, typically because the
        job or the rank ended first. Message faults act per message and are not listed."""
        seen: dict[tuple[int, str], int] = {}
        for rank, kind in fired:
            seen[(rank, kind)] = seen.get((rank, kind), 0) + 1
        out: list[str] = []
        for f in self.faults:
            if isinstance(f, RandomKill):
                planned = [(r, f"at t={t:.2f}s") for t, r in f.schedule(size)]
                kind = "kill"
            elif isinstance(f, (Delay, Drop)):
                continue
            elif isinstance(f, (Kill, Hang, BitFlip, IOErrorFault)):
                planned = [(r, "") for r in f.rank.expand(size)]
                kind = f.kind
            else:
                continue
            for r, when in planned:
                if seen.get((r, kind), 0) > 0:
                    seen[(r, kind)] -= 1
                else:
                    out.append(f"{f.to_spec()} on rank {r}{' ' + when if when else ''}")
        return out

    def for_rank(self, rank: int, size: int) -> "Plan":
        """The faults that can act on ``rank`` (as victim or as message sender)."""
        keep: list[Fault] = []
        for f in self.faults:
            if isinstance(f, RandomKill):
                if any(r == rank for _, r in f.schedule(size)):
                    keep.append(f)
            elif isinstance(f, (Delay, Drop)):
                if rank in f.src:
                    keep.append(f)
            elif isinstance(f, (Kill, Hang, BitFlip, IOErrorFault)) and rank in f.rank:
                keep.append(f)
        return Plan(keep)

    def __add__(self, other: "Plan | Fault") -> "Plan":
        if isinstance(other, Fault):
            return Plan(self.faults + (other,))
        if isinstance(other, Plan):
            return Plan(self.faults + other.faults)
        return NotImplemented

    def __radd__(self, other: Any) -> "Plan":
        if other == 0 or other is None:  # allows sum(plans)
            return self
        if isinstance(other, Fault):
            return Plan((other,) + self.faults)
        return NotImplemented

    def __len__(self) -> int:
        return len(self.faults)

    def __iter__(self) -> Iterator[Fault]:
        return iter(self.faults)

    def __bool__(self) -> bool:
        return bool(self.faults)

    def __str__(self) -> str:
        return self.to_spec()


# --------------------------------------------------------------------------- constructors


def kill(rank: RankLike, iteration: int | None = None, time: float | None = None) -> Plan:
    """Plan that kills ``rank`` at ``iteration`` or at ``time`` seconds."""
    return Plan([Kill(rank=rank, iteration=iteration, time=time)])  # type: ignore[arg-type]  # __post_init__ makes RankSets of the RankLikes


def random_kill(mtbf: float, seed: int, count: int = 1, ranks: RankLike = None,
                start: float = 0.0) -> Plan:
    """Plan that kills up to ``count`` random ranks, exponential gaps of mean ``mtbf``."""
    return Plan([RandomKill(mtbf=mtbf, seed=seed, count=count, ranks=ranks, start=start)])  # type: ignore[arg-type]  # __post_init__ makes RankSets of the RankLikes


def hang(rank: RankLike, iteration: int | None = None, time: float | None = None) -> Plan:
    """Plan that makes ``rank`` hang at ``iteration`` or at ``time`` seconds."""
    return Plan([Hang(rank=rank, iteration=iteration, time=time)])  # type: ignore[arg-type]  # __post_init__ makes RankSets of the RankLikes


def delay(p: float, ms: float, src: RankLike = None, dst: RankLike = None, seed: int = 0) -> Plan:
    """Plan that delays messages src->dst by ``ms`` with probability ``p``."""
    return Plan([Delay(p=p, ms=ms, src=src, dst=dst, seed=seed)])  # type: ignore[arg-type]  # __post_init__ makes RankSets of the RankLikes


def drop(p: float, src: RankLike = None, dst: RankLike = None, seed: int = 0) -> Plan:
    """Plan that drops messages src->dst with probability ``p``."""
    return Plan([Drop(p=p, src=src, dst=dst, seed=seed)])  # type: ignore[arg-type]  # __post_init__ makes RankSets of the RankLikes


def bitflip(rank: RankLike, array: str, iteration: int, index: int | None = None,
            bit: int | None = None, seed: int = 0) -> Plan:
    """Plan that flips one bit of a watched array on ``rank`` at ``iteration``."""
    return Plan([BitFlip(rank=rank, array=array, iteration=iteration, index=index,  # type: ignore[arg-type]  # __post_init__ makes RankSets of the RankLikes
                         bit=bit, seed=seed)])


def ioerror(rank: RankLike, iteration: int | None = None, time: float | None = None,
            path: str | None = None, count: int | None = None) -> Plan:
    """Plan that makes file opens on ``rank`` fail with EIO after a trigger."""
    return Plan([IOErrorFault(rank=rank, iteration=iteration, time=time, path=path,  # type: ignore[arg-type]  # __post_init__ makes RankSets of the RankLikes
                              count=count)])
