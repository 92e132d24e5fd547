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


@settings(max_examples=60, deadline=None)
@given(ARRAYS, st.integers(min_value=0, max_value=7))
def test_unpack_views_are_the_packed_arrays_at_any_offset(state: dict[str, np.ndarray], shift: int) -> None:
    """``copy=False``: views of the buffer where they are aligned, aligned copies where the
    packing (int8 before float64) or the buffer's own offset shifts them; values bit-exact."""
    meta, buf = pack(state)
    shifted = np.zeros(meta.nbytes + shift, dtype=np.uint8)[shift:]
    shifted[:] = buf
    out = unpack(meta, shifted, copy=False)
    assert same(out, state)
    for name, off in zip(meta.names, meta.offsets, strict=True):
        a = out[name]
        assert a.flags.aligned
        if a.nbytes:                      # a view exactly where the buffer holds it aligned
            assert np.shares_memory(a, shifted) == ((shifted.ctypes.data + off) % a.dtype.alignment == 0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=-2**63, max_value=2**63 - 1), max_size=6),
       st.text(max_size=1500))
def test_restore_headers_decode_to_what_was_encoded(values: list[int], text: str) -> None:
    """A restore header's values and object come back as encoded, the object in the header or,
    too long for it, in the tail message that follows it."""
    from planaria.checkpoint._head import HEAD_BYTES, head_decode, head_encode

    class Tail:
        """The one receive ``head_decode`` makes for an object that did not fit: the tail's bytes."""
        def __init__(self, tail: np.ndarray | None) -> None:
            self.tail = tail

        def Recv(self, buf: np.ndarray, source: int, tag: int) -> None:
            assert self.tail is not None and source == 3
            buf[:] = self.tail

    head, tail = head_encode(tuple(values), {"t": text})
    assert head.nbytes == HEAD_BYTES
    got_values, got = head_decode(head, Tail(tail), 3)
    assert got_values == values and got == {"t": text}
