"""What the checkpoint test scripts share: a rank's state at a version, and the check that ends a rank that fails."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np


def state_of(version: int, rank: int, cells: int) -> dict[str, np.ndarray]:
    """Rank ``rank``'s deterministic state at ``version``: about ``cells`` floats and the version."""
    rng = np.random.default_rng(100 * version + rank)
    return {"u": rng.standard_normal(cells + 13 * rank), "v": np.array(version, dtype=np.int32)}


def same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> bool:
    """The same arrays under the same names: dtypes, shapes and bytes."""
    return set(got) == set(want) and all(
        got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
        and got[k].tobytes() == want[k].tobytes() for k in want)


def checker(tag: str, rank: int) -> Callable[[bool, str], None]:
    """``check(cond, what)``: print ``FAIL <tag> rank <rank>: <what>`` and exit 3 when ``cond`` is false."""
    def check(cond: bool, what: str) -> None:
        if not cond:
            print(f"FAIL {tag} rank {rank}: {what}", flush=True)
            os._exit(3)
    return check


def saved_with_a_gap(make: Callable[[], Any], comm: Any, rank: int,
                     state_for: Callable[[int, int], dict[str, np.ndarray]]) -> Any:
    """A store of ``make()`` with versions 1 and 2 saved, then rank 1 starting over empty (a fresh
    process) and rank 2 without version 2 (a survivor that lacks it)."""
    store = make()
    for v in (1, 2):
        store.save(comm, v, state_for(v, rank))
    if rank == 1:
        store = make()
    if rank == 2:
        store._data.pop(2)
    return store
