"""The launcher's timed kills for programs without planaria's runtime, on real child processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from planaria.launch.plaininject import PlainKills


@pytest.fixture()
def ranks(tmp_path):
    """Two 'ranks': sleeping children of this process, with start records 5 s old."""
    kids = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    for r, kid in enumerate(kids):
        rec = {"rank": r, "host": os.uname().nodename, "pid": kid.pid, "shim": os.getpid(), "start": time.time() - 5}
        (tmp_path / f"{r}.json").write_text(json.dumps(rec))
    yield kids
    for kid in kids:
        kid.kill()
        kid.wait(10)


@pytest.mark.timeout(30)
def test_timed_kills_are_sent_when_due_counted_from_the_last_rank_start(tmp_path, ranks):
    kills = PlainKills("kill:rank=1,time=4.5;hang:rank=0,iter=3", 2, tmp_path)
    assert kills.unsupported == ["hang:rank=0,iter=3"]
    start = json.loads((tmp_path / "1.json").read_text())["start"]
    assert kills.check(start + 4.0) == []                      # not due yet
    sent = kills.check(time.time())
    assert sent == [(1, "injected kill at t=4.50s (sent by the launcher)")]
    assert ranks[1].wait(10) == -signal.SIGKILL
    assert ranks[0].poll() is None
    assert kills.check(time.time()) == []                      # sent once


@pytest.mark.timeout(30)
def test_nothing_is_sent_before_every_rank_started(tmp_path, ranks):
    missing = PlainKills("kill:rank=1,time=0.5", 3, tmp_path)  # a third rank has not started yet
    assert missing.check(time.time() + 60) == []
    assert all(kid.poll() is None for kid in ranks)


@pytest.mark.timeout(30)
def test_a_rank_on_another_host_is_named_not_signalled(tmp_path, ranks):
    rec = json.loads((tmp_path / "1.json").read_text())
    (tmp_path / "1.json").write_text(json.dumps(dict(rec, host="elsewhere")))
    kills = PlainKills("kill:rank=1,time=0.5", 2, tmp_path)
    assert kills.check(time.time()) == []
    assert [r for r, _ in kills.missed] == [1] and "runs on elsewhere" in kills.missed[0][1]
    assert ranks[1].poll() is None
