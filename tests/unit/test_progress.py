"""Progress without sockets: a rank's step total and rate in the rank table, the slowest working
rank, the heartbeat's task counters, what a node agent passes on as it is, ``top``'s rendering."""
from __future__ import annotations

import io

import pytest

from planaria.launch import protocol
from planaria.launch.ranktable import RATE_WINDOW, RankTable, slowest


def _table(*ranks: int) -> RankTable:
    table = RankTable("here", pid_check=False)
    for r in ranks:
        table.update({"type": "hello", "rank": r, "pid": 100 + r, "host": "n0", "role": "initial"}, 0.0)
    return table


@pytest.mark.timeout(10)
def test_total_rate_and_task_counters_in_a_row() -> None:
    table = _table(0, 1)
    table.update({"type": "hb", "rank": 0, "step": 0, "total": 100}, 1.0)
    table.update({"type": "hb", "rank": 0, "step": 5}, 2.0)
    assert table.copy()[0]["rate"] is None                      # the window is not over yet
    table.update({"type": "hb", "rank": 0, "step": 10}, 1.0 + RATE_WINDOW)
    row = table.copy()[0]
    assert (row["total"], row["rate"]) == (100, 5.0)            # 10 steps in 2 s
    table.update({"type": "hb", "rank": 0, "step": 3}, 4.0)     # restored to an older step: a new window
    table.update({"type": "hb", "rank": 0, "step": 3}, 4.0 + RATE_WINDOW)
    assert table.copy()[0]["rate"] == 0.0                       # stuck at one step
    table.update({"type": "hb", "rank": 1, "step": 1, "cf": [4, 2, 1, 75]}, 1.0)
    assert table.copy()[1]["cf"] == [4, 2, 1, 75]
    table.update({"type": "hb", "rank": 1, "step": 1, "cf": "junk", "total": "x"}, 1.5)
    assert table.copy()[1]["cf"] is None and table.copy()[1]["total"] is None
    table.update({"type": "bye", "rank": 0, "code": 0, "step": 99}, 5.0)      # the bye's step is the last
    assert table.copy()[0]["step"] == 99
    # a node agent's summary keeps the rate too
    table.update({"type": "hb", "rank": 1, "step": 0}, 10.0)
    table.node_beats([1], [0], 10.0)
    table.node_beats([1], [8], 10.0 + RATE_WINDOW)
    assert table.copy()[1]["rate"] == 4.0


@pytest.mark.timeout(10)
def test_the_slowest_working_rank_sets_the_progress() -> None:
    rows = [{"state": "running", "step": 30, "total": 40, "rate": 10.0},
            {"state": "running", "step": 12, "total": 40, "rate": 5.0},
            {"state": "failed", "step": 2, "total": 40},          # holds nothing up
            {"state": "running", "step": 3, "total": None}]       # announced no total
    assert slowest(rows) == (12, 40, 5.0)
    assert slowest([{"state": "finished", "step": 39, "total": 40, "rate": 1.0}]) == (40, 40, 1.0)
    assert slowest([{"state": "running", "step": 3}]) is None
    table = _table(0)
    table.update({"type": "hb", "rank": 0, "step": 7, "total": 9}, 1.0)
    assert table.progress() == (7, 9, None)


@pytest.mark.timeout(10)
def test_a_node_agent_passes_on_a_heartbeat_with_more_than_a_step() -> None:
    assert {"type": "hb", "rank": 0, "step": 3, "t": 1.0}.keys() <= protocol.PLAIN_HB
    assert not {"type": "hb", "rank": 0, "step": 3, "total": 9}.keys() <= protocol.PLAIN_HB
    assert not {"type": "hb", "rank": 0, "step": 3, "cf": [1, 2, 3, 4]}.keys() <= protocol.PLAIN_HB


@pytest.mark.timeout(10)
def test_the_heartbeat_carries_the_total_once_and_counters_when_they_change(monkeypatch) -> None:
    from planaria.runtime import agent as agent_mod
    from planaria.runtime import state
    ag = agent_mod.Agent.__new__(agent_mod.Agent)       # no sockets: only the heartbeat's making
    ag.total, ag._total_sent, ag._work_sent, ag._work_at = 40, None, None, None
    busy = [0.0]
    monkeypatch.setattr(state.RT, "work", lambda: (3, 5, 1, busy[0], 2))
    hb: dict = {}
    ag._add_work(hb, state.RT.work, 100.0)
    assert hb["cf"] == [3, 5, 1, 0]
    hb = {}
    ag._add_work(hb, state.RT.work, 100.5)               # looked at once a second at most
    assert hb == {}
    busy[0] = 1.0                                        # 1 s of 2 slots over 1 s: half busy
    ag._add_work(hb, state.RT.work, 101.0)
    assert hb["cf"] == [3, 5, 1, 50]
    hb = {}
    ag._add_work(hb, state.RT.work, 102.0)               # nothing busy since: 0 %, a change
    assert hb["cf"] == [3, 5, 1, 0]
    hb = {}
    ag._add_work(hb, state.RT.work, 103.0)               # the same again: nothing sent
    assert hb == {}


@pytest.mark.timeout(10)
def test_step_checks_its_total() -> None:
    from planaria.runtime import bootstrap
    with pytest.raises(ValueError, match="step total must be a non-negative integer"):
        bootstrap.step(0, total="ten")  # type: ignore[arg-type]


@pytest.mark.timeout(10)
def test_top_renders_steps_and_fragments_columns() -> None:
    from rich.console import Console

    from planaria.cli.top import progress_of, render
    rows = [{"rank": 0, "state": "running", "role": "initial", "step": 12, "total": 40, "rate": 5.0,
             "last_heartbeat_s": 0.2, "host": "n0", "logical": None,
             "cfs": {"done": 7, "queued": 3, "moved": 1, "busy_pct": 80}}]
    snap = {"job": "j1", "status": "running", "elapsed_s": 3.0, "ranks": rows, "progress": progress_of(rows)}
    assert snap["progress"] == {"done": 12, "total": 40, "rate": 5.0, "eta_s": 5.6}
    console = Console(file=io.StringIO(), width=120, record=True)
    console.print(render(snap, [{"t": 0.0, "name": "PLANARIA_EVENT_FAULT_LOCALIZED", "source": 1,
                                 "affected": [2], "info": {"kind": "hang"}}]))
    text = console.export_text()
    for word in ("slowest rank 12/40 30% 5/s", "12/40", "5/s", "CFs done", "80%", "FAULT_LOCALIZED"):
        assert word in text, text


@pytest.mark.timeout(30)
def test_a_real_agent_brings_total_rate_and_counters_to_a_real_controller(tmp_path, monkeypatch) -> None:
    import time

    from planaria.launch.controller import Controller
    from planaria.launch.jobdir import JobDir
    from planaria.runtime import state
    from planaria.runtime.agent import Agent
    jd = JobDir.create(tmp_path)
    ctl = Controller(jd, pid_check=False)
    uri = ctl.start()
    monkeypatch.setattr(state.RT, "work", lambda: (5, 2, 1, 0.0, 2))
    ag = Agent(uri, jd.secret(), 0, 1, heartbeat=0.05, orphan_timeout=0)
    try:
        ag.total = 400
        t0 = time.monotonic()
        deadline = t0 + 15
        row: dict = {}
        while time.monotonic() < deadline:
            ag.step = int((time.monotonic() - t0) * 100)       # 100 steps a second
            row = ctl.table().get(0, {})
            if row.get("rate") and row.get("cf"):
                break
            time.sleep(0.01)
        assert row.get("total") == 400 and row.get("cf") == [5, 2, 1, 0], row
        assert 60 <= row["rate"] <= 140, row                     # about 100 steps a second
    finally:
        ag.close()
        ctl.stop()
