"""The online diagnosis's state file: what the controller knows, and the state built from a collection part."""
from __future__ import annotations

from planaria.diagnose.online import build_state, known_facts
from planaria.diagnose.state import columns


def _table() -> dict[int, dict]:
    return {0: {"state": "running", "host": "a", "size": 4}, 1: {"state": "failed", "host": "a", "reason": "SIGKILL"},
            2: {"state": "finished", "host": "b", "site": "x.py:9 in main"}, 3: {"state": "lost", "host": "b"}}


def test_known_facts_name_failed_lost_finished_ranks_and_planned_faults() -> None:
    events = [{"type": "inject", "rank": 1, "kind": "kill", "detail": "at step 3", "t": 1.0},
              {"type": "hang", "kind": "hang", "rank": 0, "detail": "hang", "t": 2.0},
              {"type": "incident", "incident": {"kind": "timeout"}, "by": 0, "t": 3.0}]
    known = known_facts(_table(), events)
    assert known["failed"] == {"1": "SIGKILL"} and known["lost"] == [3] and known["finished"] == [2]
    assert [e["rank"] for e in known["injected"]] == [1, 0]
    assert known["incidents"] == [{"kind": "timeout", "by": 0, "t": 3.0}]
    assert known["exit_sites"] == {"2": "x.py:9 in main"}


def test_build_state_adds_finished_ranks_and_names_the_gone_ones_missing() -> None:
    table = _table()
    part = {"ranks": [{"rank": 0, "host": "a", "status": "running", "op": None, "threads": []}], "stacks": [],
            "missing": [], "collect": {"k": 8}}
    state = build_state(table, part, "job-1", known_facts(table, []))
    assert state["size"] == 4 and state["hosts"] == {"a": [0, 1], "b": [2, 3]}
    assert [r["rank"] for r in state["ranks"]] == [0, 2] and state["ranks"][1]["status"] == "finished"
    assert state["missing"] == [1, 3]
    table_cols, _, _ = columns(state)
    assert table_cols.cols["rank"].tolist() == [0, 2]
