"""What the checkpoint test scripts share: a rank's state at a version, and the check that ends a rank that fails."""
from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np


def state_of(version: int, rank: int, cells: int) -> dict[str, np.ndarray]:
    """Rank ``rank``'s deterministic state at ``version``: about ``cells`` floats and the version."""
    rng = np.random.default_rng(100 * version + rank)
    return {"u": rng.standard_normal(cells + 13 * rank), "v": np.array(version, dtype=np.int32)}


def checker(tag: str, rank: int) -> Callable[[bool, str], None]:
    """``check(cond, what)``: print ``FAIL <tag> rank <rank>: <what>`` and exit 3 when ``cond`` is false."""
    def check(cond: bool, what: str) -> None:
        if not cond:
            print(f"FAIL {tag} rank {rank}: {what}", flush=True)
            os._exit(3)
    return check
