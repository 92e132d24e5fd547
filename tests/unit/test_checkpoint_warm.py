"""Warm restore buffers (WarmPool) and restoring into a rank's current arrays (unpack ``into``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from planaria.checkpoint.store import WarmPool, pack, unpack

DTYPES = st.sampled_from([np.int8, np.int32, np.float32, np.float64, np.complex128, np.uint16])
ARRAYS = st.dictionaries(st.text("abcxyz", min_size=1, max_size=3),
                         DTYPES.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5))),
                         min_size=1, max_size=4)


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes() for k in a)


def test_reserve_holds_exactly_the_sizes_asked_and_take_returns_them() -> None:
    pool = WarmPool()
    pool.reserve([1000, 1000, 24])
    assert pool.held() == 2024
    a = pool.take(1000)
    assert a.nbytes == 1000 and a.dtype == np.uint8
    assert pool.held() == 1024
    pool.reserve([24, 4096])                  # sizes no longer asked for are let go
    assert pool.held() == 24 + 4096
    cold = pool.take(77)                      # nothing of that size: a new buffer
    assert cold.nbytes == 77 and pool.held() == 24 + 4096


def test_reserve_keeps_buffers_it_already_holds() -> None:
    pool = WarmPool()
    pool.reserve([4096])
    first = pool.take(4096)
    pool.reserve([4096])
    again = pool.take(4096)
    assert again is not first                 # taken buffers are not handed out twice
    pool.reserve([4096, 4096])
    x = pool.take(4096)
    pool.reserve([4096, 4096])                # one is held already, one more is made
    assert pool.held() == 2 * 4096 and x.nbytes == 4096


@settings(max_examples=60, deadline=None)
@given(ARRAYS)
def test_unpack_from_a_pool_is_bit_exact_and_uses_the_pool(state: dict[str, np.ndarray]) -> None:
    meta, buf = pack(state)
    pool = WarmPool()
    pool.reserve([meta.nbytes])
    out = unpack(meta, buf, pool=pool)
    assert same(out, state)
    if meta.nbytes:
        assert pool.held() == 0               # the output came out of the reserved buffer
    buf[:] = 0                                # the output does not alias the checkpoint buffer
    assert same(out, state)


@settings(max_examples=60, deadline=None)
@given(ARRAYS)
def test_unpack_into_overwrites_matching_arrays_in_place(state: dict[str, np.ndarray]) -> None:
    meta, buf = pack(state)
    current = {k: np.zeros_like(v) for k, v in state.items()}
    out = unpack(meta, buf, into=current)
    assert same(out, state)
    assert all(out[k] is current[k] for k in state)
    buf[:] = 0
    assert same(out, state)


def test_unpack_into_allocates_what_does_not_match() -> None:
    state = {"a": np.arange(6.0), "b": np.arange(4, dtype=np.int32), "c": np.ones((2, 3))}
    meta, buf = pack(state)
    readonly = np.zeros(4, dtype=np.int32)
    readonly.flags.writeable = False
    current = {"a": np.zeros(5), "b": readonly, "c": np.zeros((3, 2))[::1].T}   # wrong shape, read-only, not C
    out = unpack(meta, buf, into=current)
    assert same(out, state)
    assert all(out[k] is not current[k] for k in state)
    assert list(out) == ["a", "b", "c"]


@pytest.mark.parametrize("missing", ["a", "b"])
def test_unpack_into_with_a_missing_name(missing: str) -> None:
    state = {"a": np.arange(3.0), "b": np.arange(5.0)}
    meta, buf = pack(state)
    current = {k: np.zeros_like(v) for k, v in state.items() if k != missing}
    out = unpack(meta, buf, into=current)
    assert same(out, state)
    kept = "b" if missing == "a" else "a"
    assert out[kept] is current[kept]
