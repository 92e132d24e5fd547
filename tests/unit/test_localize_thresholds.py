"""Timer thresholds: parsing (one-line errors) and the kind x distance rule."""
import math

import pytest
from hypothesis import given, strategies as st

from planaria.localize.thresholds import Thresholds


def test_defaults_and_parse():
    th = Thresholds.parse("p2p=2, coll=3,remote=2")
    assert (th.p2p, th.coll, th.remote, th.slow, th.probe) == (2.0, 3.0, 2.0, 0.25, 3.0)
    assert Thresholds.parse("") == Thresholds()
    assert Thresholds.parse(None) == Thresholds()


@pytest.mark.parametrize("text, word", [("p2p", "p2p"), ("foo=1", "foo"), ("p2p=x", "not a number"),
                                        ("coll=-1", "positive"), ("coll=nan", "positive"), ("probe=0", "positive"),
                                        ("p2p=1_0", "not a number"), ("p2p=\u0663", "not a number")])
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


def test_tick_follows_the_thresholds():
    from planaria.localize.thresholds import TICK_MAX, TICK_MIN
    th = Thresholds()
    assert th.tick() == TICK_MAX == 1.0 and th.busy_tick() == pytest.approx(0.15)
    short = Thresholds.parse("p2p=1,coll=1.5,probe=1,slow=0.1")      # the localization tests' settings
    assert short.tick() == pytest.approx(0.05)                       # slow_after 0.1 s, seen within half of it
    assert Thresholds(probe=0.3).tick() == pytest.approx(0.1)        # a probe answered within a third
    assert Thresholds(p2p=0.8, slow=1.0).tick() == pytest.approx(0.1)  # a timer fires within an eighth
    assert Thresholds(p2p=1e-3, coll=1e-3, slow=1e-3, probe=1e-3).tick() == TICK_MIN


@given(*[st.floats(1e-3, 1e3) for _ in range(4)])
def test_tick_is_within_every_bound(p2p, coll, slow, probe):
    from planaria.localize.thresholds import TICK_MAX, TICK_MIN
    th = Thresholds(p2p=p2p, coll=coll, slow=slow, probe=probe)
    t, busy = th.tick(), th.busy_tick()
    assert TICK_MIN <= busy <= t <= TICK_MAX
    assert t <= max(TICK_MIN, probe / 3) and t <= max(TICK_MIN, th.slow_after() / 2)
    assert t <= max(TICK_MIN, min(p2p, coll) / 8) and busy <= max(TICK_MIN, probe / 20)


def test_the_runtime_fields_are_those_the_type_checker_sees():
    # the named tuple is made by collections at run time and declared with typing for the type checker
    import ast
    import inspect

    from planaria.localize import thresholds

    tree = ast.parse(inspect.getsource(thresholds))
    typed = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_Fields")
    declared = {f.target.id: ast.literal_eval(f.value) for f in typed.body if isinstance(f, ast.AnnAssign)}
    assert Thresholds._fields == tuple(declared)
    assert Thresholds._field_defaults == declared
    assert repr(Thresholds()) == "Thresholds(p2p=10.0, coll=20.0, remote=1.5, slow=0.25, probe=3.0)"
