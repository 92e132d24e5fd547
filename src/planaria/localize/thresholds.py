"""Message timer thresholds by kind of operation and communication distance ([Gao 2024] §2.2).

A point-to-point wait times out after ``p2p`` seconds when the peer is on the same host and
``p2p * remote`` when it is not; a collective after ``coll * (1 + log2(size) / 8)`` (deeper
trees take longer) times ``remote`` when its members span hosts. A completed operation that
took longer than ``slow`` times its threshold is a *message-performance anomaly*.

Configured with ``planaria run --detect-timeouts p2p=10,coll=20,remote=1.5,slow=0.25,probe=3``
(or ``$PLANARIA_DETECT_TIMEOUTS``); ``probe`` is how long a probe waits for its answer.

The localization service wakes up every ``tick()`` seconds, derived from the thresholds so that
it is never the slow part of a detection: a probe is answered within a third of the probe
timeout, a receive slower than ``slow_after`` is seen within half of that, a timer fires within
an eighth of the shortest timeout; never more than TICK_MAX. While its own probes or sends are
outstanding, and for ``probe`` seconds after another rank's message reached it, it wakes every
``busy_tick()`` (a twentieth of the probe timeout). With the defaults: 1 s idle, 0.15 s busy.
Every idle tick costs a job a few ms on a machine with more busy ranks than cores (for a
tightly coupled one such as HALO, the wake-up itself more than the tick's work: see
docs/benchmarks.md), hence the long default. Under ``planaria run`` a knock through the
controller wakes a probe's target at once; without a controller the target answers at its next
idle tick, hence a probe waits 3 s for its answer.
"""
from __future__ import annotations

import math
import re
from collections import namedtuple

from planaria.util.env import PLANARIA_DETECT_TIMEOUTS

ENV_VAR = PLANARIA_DETECT_TIMEOUTS
TICK_MAX = 1.0       # seconds: the longest interval between the service's wake-ups
TICK_MIN = 0.005     # seconds: the shortest, whatever the thresholds (no busy loop)


# a number of seconds in plain ASCII digits; compiled on first use (re caches it): every rank
# loads this module, few parse a setting
_SECONDS = r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|infinity)\Z"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple

    class _Fields(NamedTuple):
        p2p: float = 10.0
        coll: float = 20.0
        remote: float = 1.5
        slow: float = 0.25
        probe: float = 3.0
else:
    # the same fields and defaults from collections: typing's NamedTuple would load typing and
    # compile each field's annotation, about 4 ms of every rank's start (tests compare the two)
    _Fields = namedtuple("_Fields", ("p2p", "coll", "remote", "slow", "probe"),
                         defaults=(10.0, 20.0, 1.5, 0.25, 3.0))


class Thresholds(_Fields):
    """Timer thresholds in seconds (see the module docstring).

    A named tuple rather than a frozen dataclass: every rank parses them in ``world()``, and the
    dataclasses module (with inspect and ast) would add about 8 ms to each rank's start."""

    __slots__ = ()

    @classmethod
    def parse(cls, text: str | None) -> Thresholds:
        """``"p2p=2,coll=3"`` -> Thresholds; ValueError (one line, naming the item) on bad input."""
        out = cls()
        if not text or not text.strip():
            return out
        names = set(cls._fields)
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            key, eq, val = item.partition("=")
            key = key.strip()
            if not eq or key not in names:
                raise ValueError(f"bad detection timeout {item!r} (expected one of {', '.join(sorted(names))} = seconds)")
            # float() alone also takes "1_0" and non-ASCII digits ("٣"); seconds are plain ASCII decimals
            if not re.match(_SECONDS, val.strip(), re.I):
                raise ValueError(f"bad detection timeout {item!r}: {val.strip()!r} is not a number")
            num = float(val)
            if not math.isfinite(num) or num <= 0:
                raise ValueError(f"bad detection timeout {item!r}: must be a positive number")
            out = out._replace(**{key: num})
        return out

    def limit(self, kind: str, same_host: bool, comm_size: int = 2) -> float:
        """Seconds after which an operation of ``kind`` ("p2p" or "coll") is reported as timed out."""
        far = 1.0 if same_host else self.remote
        if kind == "coll":
            return self.coll * (1.0 + math.log2(max(comm_size, 2)) / 8.0) * far
        return self.p2p * far

    def slow_after(self) -> float:
        """Seconds above which a completed same-host point-to-point operation counts as anomalously slow."""
        return self.p2p * self.slow

    def tick(self) -> float:
        """Seconds between the localization service's wake-ups while nothing of its own is outstanding."""
        bound = min(TICK_MAX, self.probe / 3.0, self.slow_after() / 2.0, min(self.p2p, self.coll) / 8.0)
        return max(TICK_MIN, bound)

    def busy_tick(self) -> float:
        """Seconds between wake-ups while the service waits for probe answers or its sends to complete."""
        return max(TICK_MIN, min(self.tick(), self.probe / 20.0))
