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
