"""--on-hang's decisions from the incident feed (pure)."""
from __future__ import annotations

import pytest

from planaria.launch.onhang import MAX_LINES, IncidentWatch


def inc(kind: str, ranks: list[int], status: str = "confirmed", verdict: str = "v") -> dict:
    return {"kind": kind, "ranks": ranks, "status": status, "verdict": verdict}


def test_each_settled_incident_is_announced_once_with_the_job() -> None:
    w = IncidentWatch("report", "J1")
    lines, action = w.take([(inc("slow", [3], verdict="rank 3 slow"), 2), (inc("deadlock", [0, 1], "probing"), 0)])
    assert lines == ["incident (slow, found by rank 2): rank 3 slow; full report: planaria diagnose J1"]
    assert action is None
    lines, action = w.take([(inc("slow", [3], verdict="rank 3 slow (5 records)"), 2),
                            (inc("deadlock", [0, 1], verdict="cycle"), 0)])
    assert lines == ["incident (deadlock, found by rank 0): cycle; full report: planaria diagnose J1"]
    assert action is None                                    # report: nothing else


@pytest.mark.parametrize("mode", ["diagnose", "abort"])
def test_a_hang_triggers_the_action_once(mode: str) -> None:
    w = IncidentWatch(mode, "J")
    assert w.take([(inc("io-error", [1]), 1)])[1] is None   # not a hang
    assert w.take([(inc("not-sending", [2]), 0)])[1] == mode
    assert w.take([(inc("deadlock", [4, 5]), 4)])[1] is None


def test_lines_are_bounded_and_modes_checked() -> None:
    w = IncidentWatch("report", "J")
    lines, _ = w.take([(inc("slow", [r]), 0) for r in range(MAX_LINES + 5)])
    assert len(lines) == MAX_LINES + 1 and lines[-1] == "more incidents: planaria diagnose J"
    with pytest.raises(ValueError, match="--on-hang must be one of report, diagnose, abort"):
        IncidentWatch("stop", "J")


def test_an_unreachable_rank_that_still_runs_is_a_hang_a_failed_one_is_not() -> None:
    """A stopped (SIGSTOP) or cut-off rank is 'rank-failed' for its peers while its process runs:
    the job hangs. A rank that really failed lets the survivors go on (ULFM errors), no action."""
    w = IncidentWatch("abort", "J")
    assert w.take([(inc("rank-failed", [2]), 0)], running=lambda ranks: False)[1] is None
    assert w.take([(inc("rank-failed", [3]), 0)])[1] is None                  # no way to tell: no action
    assert w.take([(inc("rank-failed", [4]), 0)], running=lambda ranks: ranks == [4])[1] == "abort"


def test_a_finished_rank_is_named_finished_not_failed() -> None:
    """Peers waiting for a rank that finished: the line says it finished (and where), and it is a hang."""
    w = IncidentWatch("abort", "J")
    lines, action = w.take([(inc("rank-failed", [3]), 0)], running=lambda ranks: True,
                           finished=lambda ranks: "rank 3 has finished (exit 0 at a.py:9 in <module>)")
    assert action == "abort"
    assert lines == ["incident (rank-failed, found by rank 0): rank 3 has finished (exit 0 at a.py:9 in <module>); "
                     "its peers wait for it; full report: planaria diagnose J"]


def test_a_message_that_never_arrived_is_a_hang() -> None:
    """A network incident (a lost message) leaves its receiver waiting: --on-hang acts on it."""
    w = IncidentWatch("abort", "J")
    assert w.take([(inc("network", [0, 1]), 1)])[1] == "abort"
