"""``planaria.util.frozen``: the event classes' immutable values, as frozen dataclasses behaved."""
from __future__ import annotations

import copy
import pickle

import pytest

from planaria.events.ranges import CUSTOM, Range
from planaria.events.registry import Event, Result, Status


@pytest.mark.timeout(30)
def test_values_compare_hash_copy_and_pickle_by_their_fields():
    a, b = Range(CUSTOM, frozenset({1, 2})), Range(CUSTOM, frozenset({2, 1}))
    assert a == b and hash(a) == hash(b) and a != Range() and a != (CUSTOM, frozenset({1, 2}))
    assert repr(a) == "Range(kind=6, ranks=frozenset({1, 2}))"
    ev = Event(7, source=1, range=a, info={"x": 1}, t=2.5)
    assert pickle.loads(pickle.dumps(ev)) == ev and copy.deepcopy(ev) == ev and copy.copy(ev) is not ev
    assert ev.range == a and Event(7).range == Range() and Event(7).info == {}
    moved = ev.replace(id=-3)
    assert (moved.id, moved.code, moved.info) == (-3, 7, {"x": 1}) and ev.id == 0
    assert Result("h", Status.COMPLETE) == Result("h", Status.COMPLETE, {})


@pytest.mark.timeout(30)
def test_values_are_immutable_and_checked():
    rng = Range()
    with pytest.raises(AttributeError, match="immutable"):
        rng.kind = CUSTOM
    with pytest.raises(AttributeError):
        del rng.ranks
    with pytest.raises(ValueError, match="custom range needs"):
        Range(CUSTOM)
    with pytest.raises(ValueError, match="unknown range"):
        Range(99)
