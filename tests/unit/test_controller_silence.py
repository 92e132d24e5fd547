"""A rank lost only because it fell silent comes back with its next heartbeat; one whose process
is known dead does not (the real controller, a rank played by a socket on its agent channel)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from planaria.events.channel import address_for, connect, frame
from planaria.launch import controller as controller_mod
from planaria.launch.controller import Controller
from planaria.launch.jobdir import JobDir

pytestmark = pytest.mark.timeout(60)


def _until(check: Any, timeout: float = 8.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_a_late_heartbeat_is_a_recovery_not_a_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_mod, "HEARTBEAT_SILENCE", 0.6)
    jd = JobDir.create(tmp_path)
    ctl = Controller(jd, pid_check=False)          # the pid cannot be looked at (another host's)
    uri = ctl.start()
    try:
        path = address_for(uri)
        assert path is not None
        sock = connect(path)
        assert sock is not None
        send = lambda m: sock.sendall(frame(msgpack.packb({**m, "tok": jd.secret()})))  # noqa: E731
        send({"type": "hello", "rank": 0, "size": 1, "pid": 12345, "host": "far", "role": "initial",
              "backend": "ulfm"})
        send({"type": "hb", "rank": 0, "step": 1})
        _until(lambda: ctl.table().get(0, {}).get("state") == "running")
        _until(lambda: ctl.table()[0]["state"] == "lost")          # silent for longer than the bound
        assert ctl.table()[0]["lost_by"] == "silence"
        send({"type": "hb", "rank": 0, "step": 2})
        _until(lambda: ctl.table()[0]["state"] == "running")
        row = ctl.table()[0]
        assert row["step"] == 2 and row["reason"] is None and row["fail_time"] is None
        # known dead (its node agent saw the process go): the next heartbeat-like news changes nothing
        with ctl._lock:
            ctl.ranks[0]["pid_gone"] = True
        _until(lambda: ctl.table()[0]["state"] == "lost")
        send({"type": "hb", "rank": 0, "step": 3})
        time.sleep(0.3)
        assert ctl.table()[0]["state"] == "lost"
        sock.close()
    finally:
        ctl.stop()
    recs = [e for e in jd.events() if e.get("rank") == 0 and e.get("type") in ("lost", "recovered")]
    assert [e["type"] for e in recs] == ["lost", "recovered", "lost"], recs
    assert recs[1]["silent_s"] >= 0.6


def test_ctl_kill_signals_a_rank_process_but_not_a_pid_that_names_another(tmp_path: Path) -> None:
    """``planaria ctl kill`` of a rank on the controller's own channel: the pid must still be the
    process that said hello (its start time), not another process that got the number since."""
    import os
    import signal
    import subprocess

    from planaria.launch.client import request
    from planaria.util.procstat import start_ticks
    jd = JobDir.create(tmp_path)
    ctl = Controller(jd, pid_check=False)
    uri = ctl.start()
    rank = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["sleep", "60"])          # stands for a process that got rank 1's pid
    try:
        path = address_for(uri)
        assert path is not None
        sock = connect(path)
        assert sock is not None
        for r, p, st in ((0, rank.pid, start_ticks(rank.pid)), (1, other.pid, (start_ticks(other.pid) or 0) + 1)):
            sock.sendall(frame(msgpack.packb({"type": "hello", "rank": r, "size": 2, "pid": p, "st": st,
                                              "host": os.uname().nodename, "role": "initial", "backend": "ulfm",
                                              "tok": jd.secret()})))
            sock.sendall(frame(msgpack.packb({"type": "hb", "rank": r, "step": 1, "tok": jd.secret()})))
        _until(lambda: all(ctl.table().get(r, {}).get("state") == "running" for r in (0, 1)))
        reply = request(jd, {"type": "ctl", "action": "kill", "ranks": [0, 1], "signal": None}, timeout=10)
        assert reply["ranks"] == [0] and "not on this host or has ended" in reply["errors"]["1"], reply
        assert rank.wait(timeout=10) == -signal.SIGKILL and other.poll() is None
        sock.close()
    finally:
        ctl.stop()
        for p in (rank, other):
            p.kill()
            p.wait()
