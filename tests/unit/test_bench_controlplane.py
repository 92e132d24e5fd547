"""The control-plane benchmark runs the real controller (its own process) with simulated ranks
over real Unix sockets and reports what it measured."""
from __future__ import annotations

import pytest

from benchmarks import controlplane as cp


@pytest.mark.timeout(120)
def test_a_small_job_is_served_and_measured() -> None:
    res = cp.run("40", seconds=3.0, hb=0.25, ps_every=0.5, workers=2, timeout=60)
    (row,) = res["rows"]
    assert row["ranks"] == 40 and row["false_losses"] == 0 and not row["controller_errors"]
    assert row["heartbeats"] >= 40 * 8                  # ~12 beats per rank in 3 s, every one answered
    assert 0 < row["hb_p50_ms"] <= row["hb_p99_ms"] < 1000
    assert row["event_reached"] == 40 and 0 < row["event_to_last_s"] < 5
    assert row["ps_calls"] >= 2 and 0 <= row["controller_cpu"] < 2


@pytest.mark.timeout(120)
def test_through_a_tree_of_node_agents() -> None:
    """96 ranks, 16 per node agent, a tree of fan-out 2 (agents 2-5 reach the controller through 0 and 1)."""
    res = cp.run("96", seconds=3.0, hb=0.25, ps_every=0.5, workers=2, timeout=60, per_node=16, fanout=2)
    (row,) = res["rows"]
    assert row["node_agents"] == 6 and row["false_losses"] == 0 and not row["controller_errors"]
    assert row["heartbeats"] >= 96 * 8                  # answered by the node agents
    assert row["event_reached"] == 96
    assert row["view_age_p99_ms"] < 2000                # the summaries arrive, through two levels


@pytest.mark.parametrize("args, message", [
    (("0", 1, 0.5, 1, 1), "--ranks"), (("abc", 1, 0.5, 1, 1), "--ranks"), (("8", 0, 0.5, 1, 1), "--seconds"),
    (("8", 1, -1, 1, 1), "--hb"), (("8", 1, 0.5, 1, 0), "--workers"), (("8", 1, 0.5, 1, 1, 5, -1, 0), "--ranks-per-node"),
    (("8", 1, 0.5, 1, 1, 5, 0, 2), "--fanout")])
def test_bad_options_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cp.run(*args[:5], timeout=5, per_node=args[6] if len(args) > 6 else 0, fanout=args[7] if len(args) > 7 else 0)
