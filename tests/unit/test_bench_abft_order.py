"""The ABFT benchmark's run order: no mode may always follow the same other mode."""
from __future__ import annotations

from collections import Counter

from benchmarks.abft import MODES, ORDERS


def test_six_repetitions_put_every_mode_after_every_other_equally_often():
    follows = Counter()
    for order in ORDERS[:6]:
        follows.update(zip(order, order[1:], strict=False))
    pairs = [(a, b) for a in MODES for b in MODES if a != b]
    assert sorted(follows) == sorted(pairs)
    assert set(follows.values()) == {2}
    assert Counter(o[0] for o in ORDERS) == Counter({m: 2 for m in MODES})   # each mode opens a repetition twice
