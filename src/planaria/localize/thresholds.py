"""Message timer thresholds by kind of operation and communication distance (paper 000 §2.2).

A point-to-point wait times out after ``p2p`` seconds when the peer is on the same host and
``p2p * remote`` when it is not; a collective after ``coll * (1 + log2(size) / 8)`` (deeper
trees take longer) times ``remote`` when its members span hosts. A completed operation that
took longer than ``slow`` times its threshold is a *message-performance anomaly*.

Configured with ``planaria run --detect-timeouts p2p=10,coll=20,remote=1.5,slow=0.25,probe=1``
(or ``$PLANARIA_DETECT_TIMEOUTS``); ``probe`` is how long a probe waits for its answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

ENV_VAR = "PLANARIA_DETECT_TIMEOUTS"


@dataclass(frozen=True)
class Thresholds:
    """Timer thresholds in seconds (see the module docstring)."""

    p2p: float = 10.0
    coll: float = 20.0
    remote: float = 1.5
    slow: float = 0.25
    probe: float = 1.0

    @classmethod
    def parse(cls, text: str | None) -> Thresholds:
        """``"p2p=2,coll=3"`` -> Thresholds; ValueError (one line, naming the item) on bad input."""
        out = cls()
        if not text or not text.strip():
            return out
        names = {f.name for f in fields(cls)}
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            key, eq, val = item.partition("=")
            key = key.strip()
            if not eq or key not in names:
                raise ValueError(f"bad detection timeout {item!r} (expected one of {', '.join(sorted(names))} = seconds)")
            try:
                num = float(val)
            except ValueError:
                raise ValueError(f"bad detection timeout {item!r}: {val.strip()!r} is not a number") from None
            if not math.isfinite(num) or num <= 0:
                raise ValueError(f"bad detection timeout {item!r}: must be a positive number")
            out = replace(out, **{key: num})
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
