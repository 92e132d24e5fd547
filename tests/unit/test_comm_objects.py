"""Decoding the parts of an object collective: a part that never arrived is a process failure."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from planaria.comm.base import _loads, _split
from planaria.comm.errors import ProcFailedError


class _Known:
    """Only what ``_loads`` asks of a communicator: the failures it knows of."""

    def get_failed(self) -> set[int]:
        return {3}


def test_parts_decode() -> None:
    parts = [pickle.dumps(x) for x in ("a", [1, 2], None)]
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    assert _split(_Known(), bytearray(b"".join(parts)), lengths) == ["a", [1, 2], None]


@pytest.mark.parametrize("missing", [b"\x00" * 12, b""])
def test_a_part_left_as_allocated_is_a_process_failure(missing: bytes) -> None:
    parts = [pickle.dumps("a"), missing, pickle.dumps("c")]
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    with pytest.raises(ProcFailedError) as err:
        _split(_Known(), bytearray(b"".join(parts)), lengths)
    assert err.value.ranks == {3} and "without every rank's part" in str(err.value)


def test_a_real_pickle_that_does_not_load_is_the_programs_error() -> None:
    bad = pickle.dumps("x")[:-3]            # truncated, not zeros
    with pytest.raises(Exception) as err:
        _loads(_Known(), bytearray(bad))
    assert not isinstance(err.value, ProcFailedError)
