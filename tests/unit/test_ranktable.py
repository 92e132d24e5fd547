"""The rank table's rules without sockets (``planaria.launch.ranktable``), and the socket-free
pieces around it: tools' subscriptions, the job record's kept writes, ``ctl``'s signals."""
from __future__ import annotations

import signal
import subprocess
from typing import Any

import pytest

from planaria.events import codes
from planaria.launch import protocol
from planaria.launch.eventlog import RECORD_BATCH, EventLog
from planaria.launch.ranktable import LOST_REASON, RankTable, summary
from planaria.launch.relay import Subscriptions
from planaria.launch.toolservice import ctl_signal, parse_signal

TOK = "s3cret"


def _table(*ranks: int, t: float = 0.0) -> RankTable:
    """A table (pids not looked at) whose ``ranks`` said hello at ``t`` and beat once."""
    table = RankTable("here", pid_check=False)
    for r in ranks:
        table.update({"type": "hello", "rank": r, "pid": 100 + r, "host": "n0", "role": "initial",
                      "backend": "ulfm"}, t)
        table.update({"type": "hb", "rank": r, "step": 1}, t)
    return table


def test_hello_heartbeat_and_bye_move_a_row_along() -> None:
    table = RankTable("here")
    assert table.update({"type": "hb", "rank": "x"}, 1.0) is None and table.copy() == {}
    table.update({"type": "hello", "rank": 0, "pid": 7, "host": "n0", "role": "initial"}, 1.0)
    assert table.copy()[0]["state"] == "starting" and table.copy()[0]["hello_time"] == 1.0
    table.update({"type": "hb", "rank": 0, "step": 4, "role": "spare", "logical": 2}, 1.5)
    row = table.copy()[0]
    assert (row["state"], row["step"], row["role"], row["logical"]) == ("running", 4, "spare", 2)
    table.update({"type": "log", "rank": 0}, 1.7)                  # any other message: a sign of life
    assert table.copy()[0]["last_hb"] == 1.7
    table.update({"type": "bye", "rank": 0, "code": 3, "reason": "Unrecoverable", "site": "a.py:9"}, 2.0)
    row = table.copy()[0]
    assert (row["state"], row["exit_code"], row["end_time"]) == ("finished", 3, 2.0)
    assert row["reason"] == "exit 3: Unrecoverable" and row["site"] == "a.py:9"
    table.update({"type": "hello", "rank": 0}, 3.0)                 # an ended rank stays ended
    assert table.copy()[0]["state"] == "finished"
    table.update({"type": "fail", "rank": 1, "reason": "boom"}, 2.0)   # first word: a failure
    assert (table.copy()[1]["state"], table.copy()[1]["reason"]) == ("failed", "boom")


def test_silence_is_a_loss_until_the_next_heartbeat_unless_the_process_is_gone() -> None:
    table = _table(0, 1)
    assert table.sweep(2.0, silence=3.0) == []
    table.update({"type": "hb", "rank": 1, "step": 2}, 2.5)
    lost = table.sweep(3.5, silence=3.0)
    assert [(r["type"], r["rank"], r["reason"]) for r in lost] == [("lost", 0, LOST_REASON)]
    assert table.copy()[0]["lost_by"] == "silence" and table.copy()[1]["state"] == "running"
    merged = table.take_merged(3.6, force=True)
    assert merged["affected"] == [0] and merged["info"]["causes"]["0"][0]["kind"] == "lost-connection"
    rec = table.update({"type": "hb", "rank": 0, "step": 9}, 4.0)
    assert rec == {"type": "recovered", "rank": 0, "t": 4.0, "silent_s": 4.0}
    assert (table.copy()[0]["state"], table.copy()[0]["reason"]) == ("running", None)
    assert table.sweep(7.5, silence=3.0)[0]["rank"] == 0 and table.mark_gone(0, False)
    assert table.update({"type": "hb", "rank": 0}, 8.0) is None           # known dead: stays lost
    assert table.copy()[0]["state"] == "lost"
    assert not table.mark_gone(5, False) and not table.mark_gone(1, True)


def test_a_gone_pid_is_a_loss_at_once_but_a_routed_rank_is_looked_at_on_its_node() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()                                  # reaped: its pid names no process
    table = RankTable("here")
    for r in (0, 1):
        table.update({"type": "hello", "rank": r, "pid": dead.pid, "host": "here"}, 0.0)
    lost = table.sweep(0.5, silence=3.0, routed=lambda r: r == 1)
    assert [r["rank"] for r in lost] == [0] and table.copy()[1]["state"] == "starting"
    assert "lost_by" not in table.copy()[0]
    assert table.take_merged(1.0, force=True)["info"]["causes"]["0"][0]["kind"] == "exited"


def test_the_final_sweep_settles_by_recorded_ends() -> None:
    table = _table(0, 1, 2, t=10.0)
    fates = {0: {"rank": 0, "end": 11.0, "exit_code": 0}, 1: {"rank": 1, "end": 11.0, "ended_by": "timeout"}}
    table.sweep(11.0, silence=3.0, final=True, final_ok=True, fates=fates)
    rows = table.copy()
    assert (rows[0]["state"], rows[0]["reason"]) == ("finished", "exited without a bye")
    assert (rows[1]["state"], rows[1]["ended_by"], rows[1]["reason"]) == ("lost", "timeout", "ended by timeout")
    assert rows[2]["state"] == "finished"          # no recorders: mpiexec's exit 0 is all there is


def test_node_beats_and_node_hellos() -> None:
    table = _table(0, 1)
    table.update({"type": "hello", "rank": 2}, 0.0)
    assert table.node_beats([0, 1], [5], 1.0) == []           # malformed: nothing changes
    assert table.copy()[0]["step"] == 1
    assert table.node_beats([0, 2, 9], [5, 6, 7], 1.0) == []
    rows = table.copy()
    assert (rows[0]["step"], rows[0]["last_hb"]) == (5, 1.0) and (rows[2]["state"], rows[2]["step"]) == ("running", 6)
    table.node_hello("n0", 42, 1.0)
    assert table.nodes == {"n0": {"node": "n0", "pid": 42, "t": 1.0}}


def test_ctl_changes_rows_and_recorder_only_ranks() -> None:
    table = _table(0, 1)
    table.apply_ctl(0, "pause", signal.SIGSTOP, 1.0)
    assert table.copy()[0]["state"] == "paused" and table.reachable() == [0, 1]
    table.apply_ctl(0, "resume", signal.SIGCONT, 2.0)
    assert (table.copy()[0]["state"], table.copy()[0]["last_hb"]) == ("running", 2.0)
    table.apply_ctl(1, "kill", signal.SIGKILL, 3.0)
    assert table.copy()[1]["state"] == "lost" and table.reachable([0, 1]) == [0] and table.failures_known()
    assert table.take_merged(3.1, force=True)["code"] == codes.PROC_KILLED_BY_CMD
    table.apply_ctl(7, "pause", signal.SIGSTOP, 4.0)
    table.apply_ctl(8, "kill", signal.SIGKILL, 4.0)
    assert table.ctl_paused == {7} and table.ctl_killed == {8}
    table.apply_ctl(7, "resume", signal.SIGCONT, 5.0)
    assert table.ctl_paused == set() and set(table.copy()) == {0, 1}


def test_failure_signals_are_merged() -> None:
    table = _table(0, 1, 2)
    table.update({"type": "hello", "rank": 3, "backend": "sim"}, 0.0)
    assert not table.failures_known()
    table.signal_fail(1, "boom", 1.0)
    table.signal_fail(3, "zombie", 1.0)
    table.signal_seen(0, [0, 2, "x"], 1.0)             # a rank never reports itself
    ev = table.take_merged(1.1, force=True)
    assert ev["affected"] == [1, 2, 3] and ev["info"]["signal"] == signal.SIGKILL
    assert [c["kind"] for c in ev["info"]["causes"]["3"]] == ["aborted"]
    assert ev["info"]["causes"]["2"][0]["by"] == 0


def test_ps_rows_and_summary() -> None:
    table = _table(0, 1, 2)
    table.update({"type": "hb", "rank": 2, "step": 8}, 1.0)
    table.update({"type": "bye", "rank": 1, "code": 0}, 1.0)
    table.node_hello("n0", 1, 1.0)
    msg, why = protocol.unpack(table.ps_reply([0, 2, "x"], False, 5.0, TOK), TOK.encode())
    assert why is None and msg["t0"] == 5.0 and [r["rank"] for r in msg["ranks"]] == [0, 2]
    msg, _ = protocol.unpack(table.ps_reply(None, True, 5.0, TOK), TOK.encode())
    assert msg["summary"] == {"ranks": 3, "states": {"running": 2, "finished": 1}, "hosts": {"n0": 3},
                              "node_agents": 1, "step_min": 1, "step_max": 8, "progress": None}
    assert summary([], 0)["step_min"] is None


def test_holds_up_finished_note_and_reach() -> None:
    table = _table(0, 1, 2)
    table.update({"type": "bye", "rank": 1, "code": 0, "site": "a.py:9"}, 1.0)
    table.update({"type": "fail", "rank": 2}, 1.0)
    assert table.holds_up([0, 1]) and not table.holds_up([2]) and not table.holds_up([])
    assert table.finished_note([0, 1]) == "rank 1 has finished (exit 0 at a.py:9)"
    assert table.state(2) == "failed" and table.state(9) is None and table.pids() == [100, 101, 102]
    live, with_src, host = table.in_reach(2, None, {0, 1, 2})
    assert live == {0: "n0"} and with_src == {0: "n0", 2: "n0"} and host == "n0"
    assert table.reachable_count() == 1


def test_subscriptions_follow_codes_and_expire() -> None:
    subs = Subscriptions(ttl=5.0)
    assert not subs and subs.wanted({"type": "io"}, "io") == []
    assert subs.renew("a", {"events": True, "codes": [7]}, 0.0)
    assert subs.renew("b", {"events": True, "io": True}, 3.0)
    assert not subs.renew("a", {"events": True, "codes": ["7", 8]}, 1.0)
    ev: dict[str, Any] = {"type": "event", "event": {"code": 8}}
    assert subs.wanted(ev, "events") == ["a", "b"] and subs.wanted({"type": "io"}, "io") == ["b"]
    assert subs.wanted({"type": "event", "event": {"code": 9}}, "events") == ["b"]
    subs.expire(6.5)
    assert list(subs.subs) == ["b"]
    subs.cancel("b")
    subs.cancel("b")
    assert not subs


class _Disk:
    """A job directory whose first ``fails`` writes fail."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.written: list[dict[str, Any]] = []

    def append_events(self, records: list[dict[str, Any]]) -> None:
        if self.fails:
            self.fails -= 1
            raise OSError("disk full")
        self.written.extend(records)


def test_event_records_are_kept_in_order_when_a_write_fails() -> None:
    disk = _Disk(fails=1)
    log = EventLog(disk)  # type: ignore[arg-type]
    log.add({"n": 1})
    log.write({"n": 2})
    assert disk.written == [] and len(log) == 2
    log.write({"n": 3})
    assert [r["n"] for r in disk.written] == [1, 2, 3] and len(log) == 0
    for n in range(RECORD_BATCH - 1):
        log.batch({"n": n})
    assert len(log) == RECORD_BATCH - 1
    log.batch({"n": "last"})
    assert len(log) == 0 and disk.written[-1] == {"n": "last"}


def test_ctl_signals() -> None:
    assert parse_signal("term") == parse_signal("SIGTERM") == parse_signal("15") == parse_signal(15) == 15
    assert ctl_signal("kill", None) == signal.SIGKILL and ctl_signal("signal", "USR1") == signal.SIGUSR1
    with pytest.raises(ValueError, match="unknown action"):
        ctl_signal("explode", None)
    with pytest.raises(ValueError, match="unknown signal"):
        parse_signal("NOPE")


def test_a_stop_kills_a_rank_process_but_never_a_pid_handed_out_again() -> None:
    """``kill_all``'s last step: the pid must still be the process that said hello (same start time)."""
    import os

    from planaria.launch.supervise import kill_ranks
    from planaria.util.procstat import start_ticks
    rank = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["sleep", "60"])         # stands for a process that got an old rank's pid
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        table = RankTable("here", pid_check=False)
        for r, (p, st) in enumerate([(rank.pid, start_ticks(rank.pid)), (other.pid, (start_ticks(other.pid) or 0) + 1),
                                     (dead.pid, 1), (os.getpid(), None)]):
            table.update({"type": "hello", "rank": r, "pid": p, "st": st, "host": "here"}, 0.0)
        procs = table.processes()
        assert sorted(p for p, _ in procs) == sorted([rank.pid, other.pid, dead.pid])   # no start time: never
        assert kill_ranks(procs) == [rank.pid]
        assert rank.wait(timeout=10) == -signal.SIGKILL and other.poll() is None
    finally:
        rank.kill()
        other.kill()
        rank.wait()
        other.wait()
