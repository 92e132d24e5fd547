"""Event ranges (PMIx data ranges): who an event reaches, and which sources a handler accepts.

The controller resolves a range to target ranks (``targets``); a registration's own range
filters by source on the receiving side (``accepts``), as the PMIx standard asks.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from planaria.util.frozen import Frozen

# PMIx values (pmix_data_range_t)
RM = 1             # PMIX_RANGE_RM: the resource manager (controller) only
LOCAL = 2          # PMIX_RANGE_LOCAL: processes on the source's host
JOB = 3            # PMIX_RANGE_NAMESPACE: every process of the job (the default)
SESSION = 4        # PMIX_RANGE_SESSION: the job plus the tools attached to it
GLOBAL = 5         # PMIX_RANGE_GLOBAL: everything this controller reaches (as SESSION here)
CUSTOM = 6         # PMIX_RANGE_CUSTOM: an explicit set of ranks
PROC_LOCAL = 7     # PMIX_RANGE_PROC_LOCAL: the source process itself; never leaves it

_NAMES = {RM: "rm", LOCAL: "local", JOB: "job", SESSION: "session", GLOBAL: "global",
          CUSTOM: "custom", PROC_LOCAL: "proc_local"}
_BY_NAME = {v: k for k, v in _NAMES.items()} | {"namespace": JOB, "proc-local": PROC_LOCAL,
                                                 "host": LOCAL, "node": LOCAL}


class Range(Frozen):
    """A range kind plus, for CUSTOM, the ranks it names."""

    __slots__ = ("kind", "ranks")
    kind: int
    ranks: frozenset[int]

    def __init__(self, kind: int = JOB, ranks: frozenset[int] = frozenset()) -> None:
        if kind not in _NAMES:
            raise ValueError(f"unknown range {kind!r}")
        if kind == CUSTOM and not ranks:
            raise ValueError("a custom range needs at least one rank")
        self._set(kind=kind, ranks=ranks)

    @property
    def name(self) -> str:
        """``job``, ``local``, ``custom``..."""
        return _NAMES[self.kind]

    def to_wire(self) -> dict:
        """A msgpack-friendly form."""
        return {"kind": self.kind, "ranks": sorted(self.ranks)}

    @classmethod
    def from_wire(cls, d: Mapping | None) -> "Range":
        """Inverse of ``to_wire`` (None gives the default JOB range)."""
        if not d:
            return cls()
        return cls(int(d.get("kind", JOB)), frozenset(int(r) for r in d.get("ranks") or ()))


def parse_range(text: str | int | Range, ranks: Iterable[int] | None = None) -> Range:
    """``"job"``, ``"local"``, ``"custom"`` (with ``ranks``), a PMIx value, or a Range."""
    if isinstance(text, Range):
        return text
    rk = frozenset(int(r) for r in ranks or ())
    if isinstance(text, int):
        kind = text
    else:
        key = text.strip().lower().replace("pmix_range_", "").replace("-", "_")
        if key not in _BY_NAME:
            raise ValueError(f"unknown range {text!r} (choose {', '.join(_NAMES.values())})")
        kind = _BY_NAME[key]
    if rk and kind != CUSTOM:
        if kind == JOB:            # ranks given with the default range: a custom set is meant
            kind = CUSTOM
        else:
            raise ValueError(f"--ranks only goes with a custom range, not {_NAMES[kind]!r}")
    return Range(kind, rk)


def targets(rng: Range, source: int | None, hosts: Mapping[int, str | None],
            source_host: str | None = None) -> set[int]:
    """The ranks an event from ``source`` (None: controller or tool, on ``source_host``) reaches;
    ``hosts``: rank -> host of live ranks."""
    everyone = set(hosts)
    if rng.kind in (JOB, SESSION, GLOBAL):
        return everyone
    if rng.kind == CUSTOM:
        return everyone & set(rng.ranks)
    if rng.kind == LOCAL:
        where = hosts.get(source) if source is not None else source_host
        if where is None:
            return set()
        return {r for r, h in hosts.items() if h == where}
    if rng.kind == PROC_LOCAL:
        return {source} & everyone if source is not None else set()
    return set()                   # RM: the controller alone


def accepts(rng: Range | None, source: int | None, me: int | None, my_host: str | None,
            source_host: str | None) -> bool:
    """Whether a handler registered with range ``rng`` takes an event from ``source`` (receiver filter)."""
    if rng is None or rng.kind in (JOB, SESSION, GLOBAL, RM):
        return True
    if rng.kind == PROC_LOCAL:
        return source is not None and source == me
    if rng.kind == LOCAL:
        return source_host is not None and source_host == my_host
    if rng.kind == CUSTOM:
        return source is not None and source in rng.ranks
    return True
