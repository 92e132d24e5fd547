"""The control-plane benchmark runs the real controller (its own process) with simulated ranks
over real Unix sockets and reports what it measured."""
from __future__ import annotations

import pytest

from planaria.bench import controlplane as cp


@pytest.mark.timeout(120)
def test_a_small_job_is_served_and_measured() -> None:
    res = cp.run("40", seconds=3.0, hb=0.25, ps_every=0.5, workers=2, timeout=60)
    (row,) = res["rows"]
    assert row["ranks"] == 40 and row["false_losses"] == 0 and not row["controller_errors"]
    assert row["heartbeats"] >= 40 * 8                  # ~12 beats per rank in 3 s, every one answered
    assert 0 < row["hb_p50_ms"] <= row["hb_p99_ms"] < 1000
    assert row["event_reached"] == 40 and 0 < row["event_to_last_s"] < 5
    assert row["ps_calls"] >= 2 and 0 <= row["controller_cpu"] < 2


def test_bad_rank_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="--ranks"):
        cp.run("0", seconds=1, hb=0.5, ps_every=1, workers=1, timeout=5)
