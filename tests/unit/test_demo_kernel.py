"""The heat kernel's buffered form gives the same bits as the textbook expression."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from planaria.comm.errors import RevokedError, failure_raised, failures_seen
from planaria.demo.heat import update

FIELDS = hnp.arrays(np.float64, st.integers(3, 200),
                    elements=st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))


@settings(max_examples=200, deadline=None)
@given(FIELDS, st.floats(0.0, 0.5))
def test_update_matches_the_expression_bit_for_bit(p: np.ndarray, r: float) -> None:
    expect = p[1:-1] + r * (p[:-2] - 2.0 * p[1:-1] + p[2:])
    out = np.full(len(p) - 2, np.nan)
    got = update(p, r, out)
    assert got is out
    assert got.tobytes() == expect.tobytes()
    assert update(p, r).tobytes() == expect.tobytes()


def test_a_failure_error_is_remembered_for_finalize() -> None:
    err = RevokedError()
    assert failure_raised(err) is err
    assert failures_seen()
