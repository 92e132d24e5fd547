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
def test_timed_kills_are_sent_once_the_program_runs_without_the_runtime(tmp_path, ranks):
    kills = PlainKills("kill:rank=1,time=0.5;hang:rank=0,iter=3", 2, tmp_path)
    assert kills.unsupported == ["hang:rank=0,iter=3"]
    sent = kills.check(time.time(), lambda: False)
    assert [r for r, _ in sent] == [1] and "s late" in sent[0][1] and sent[0][1].startswith("injected kill at t=0.50s")
    assert ranks[1].wait(10) == -signal.SIGKILL
    assert ranks[0].poll() is None
    assert kills.check(time.time(), lambda: False) == []        # sent once


@pytest.mark.timeout(30)
def test_nothing_is_sent_while_the_runtime_may_apply_the_plan(tmp_path, ranks):
    used = PlainKills("kill:rank=1,time=0.5", 2, tmp_path)
    assert used.check(time.time(), lambda: True) == [] and used.decided is False
    assert used.check(time.time() + 60, lambda: False) == []   # the ranks' injectors have it
    early = PlainKills("kill:rank=1,time=0.5", 2, tmp_path, plain_after=60.0)
    assert early.check(time.time(), lambda: False) == [] and early.decided is None
    missing = PlainKills("kill:rank=1,time=0.5", 3, tmp_path)  # a third rank has not started yet
    assert missing.check(time.time(), lambda: False) == []
    assert all(kid.poll() is None for kid in ranks)


@pytest.mark.timeout(30)
def test_a_rank_on_another_host_is_named_not_signalled(tmp_path, ranks):
    rec = json.loads((tmp_path / "1.json").read_text())
    (tmp_path / "1.json").write_text(json.dumps(dict(rec, host="elsewhere")))
    kills = PlainKills("kill:rank=1,time=0.5", 2, tmp_path)
    assert kills.check(time.time(), lambda: False) == []
    assert [r for r, _ in kills.missed] == [1] and "runs on elsewhere" in kills.missed[0][1]
    assert ranks[1].poll() is None
