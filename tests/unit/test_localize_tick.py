"""Idle ticks fall on wall-clock multiples of the tick, the same instants in every rank."""
import math

from hypothesis import given, strategies as st

from planaria.localize.service import aligned_delay


@given(now=st.floats(min_value=1.6e9, max_value=2.2e9), tick=st.sampled_from([0.05, 0.25, 1.0, 2.5]))
def test_delay_ends_on_a_multiple_of_the_tick(now, tick):
    delay = aligned_delay(now, tick)
    assert tick / 10 <= delay <= tick * 1.1 + 1e-9
    phase = math.fmod(now + delay, tick)
    assert min(phase, tick - phase) < 1e-5          # float rounding at 2e9 s is ~2e-7 s


def test_two_ranks_that_read_the_clock_at_different_moments_wake_together():
    a = 1000.2 + aligned_delay(1000.2, 1.0)
    b = 1000.7 + aligned_delay(1000.7, 1.0)
    assert math.isclose(a, 1001.0) and math.isclose(b, 1001.0)


def test_a_tick_that_ends_just_before_a_boundary_skips_it():
    # woke 1 ms early, did its work: the next tick is a whole tick later, not in 1 ms
    assert math.isclose(aligned_delay(1000.999, 1.0), 1.001)
