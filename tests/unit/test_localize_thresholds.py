"""Timer thresholds: parsing (one-line errors) and the kind x distance rule."""
import math

import pytest
from hypothesis import given, strategies as st

from planaria.localize.thresholds import Thresholds


def test_defaults_and_parse():
    th = Thresholds.parse("p2p=2, coll=3,remote=2")
    assert (th.p2p, th.coll, th.remote, th.slow, th.probe) == (2.0, 3.0, 2.0, 0.25, 1.0)
    assert Thresholds.parse("") == Thresholds()
    assert Thresholds.parse(None) == Thresholds()


@pytest.mark.parametrize("text, word", [("p2p", "p2p"), ("foo=1", "foo"), ("p2p=x", "not a number"),
                                        ("coll=-1", "positive"), ("coll=nan", "positive"), ("probe=0", "positive")])
def test_bad_input_is_one_line_naming_the_item(text, word):
    with pytest.raises(ValueError) as err:
        Thresholds.parse(text)
    msg = str(err.value)
    assert "\n" not in msg and word in msg


def test_remote_and_collective_size_scale_the_limit():
    th = Thresholds(p2p=2, coll=4, remote=1.5)
    assert th.limit("p2p", True) == 2
    assert th.limit("p2p", False) == 3
    assert th.limit("coll", True, 2) == pytest.approx(4 * (1 + 1 / 8))
    assert th.limit("coll", False, 256) == pytest.approx(4 * 2 * 1.5)
    assert th.slow_after() == pytest.approx(0.5)


@given(st.integers(2, 10**6), st.integers(2, 10**6))
def test_bigger_collectives_wait_longer(a, b):
    th = Thresholds()
    lo, hi = sorted((a, b))
    assert th.limit("coll", True, lo) <= th.limit("coll", True, hi)
    assert math.isfinite(th.limit("coll", False, hi))
