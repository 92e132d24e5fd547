"""``--start-timeout``: the launcher ends a job none of whose ranks started (no recorder's record,
no hello), and leaves one alone once any rank has; mpiexec's helpers in sessions of their own are
found and ended (real files and processes)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planaria.launch.supervise import NOT_STARTED, StartBound, end_helpers
from planaria.launch.options import EXIT_USAGE
from planaria.util.procstat import descendants, running

pytestmark = pytest.mark.timeout(30)


class _Table:
    """The one thing ``StartBound`` asks the controller: the pids of the ranks that said hello."""

    def __init__(self) -> None:
        self.hello: list[int] = []

    def pids(self) -> list[int]:
        return list(self.hello)


def test_no_rank_started_ends_the_job_once_the_bound_has_passed(tmp_path: Path) -> None:
    bound = StartBound(time.time() - 1.0, 5.0, tmp_path, _Table(), interval=0.0)   # type: ignore[arg-type]
    assert bound.check() is None                   # 1 s of 5 gone
    bound.t0 = time.time() - 6.0
    out = bound.check()
    assert out is not None and out.kind == NOT_STARTED and out.status == EXIT_USAGE
    assert out.why.startswith("no rank had started 5 s after the launch")


@pytest.mark.parametrize("how", ["record", "hello"])
def test_a_rank_that_started_turns_the_bound_off(tmp_path: Path, how: str) -> None:
    table = _Table()
    bound = StartBound(time.time(), 5.0, tmp_path, table, interval=0.0)   # type: ignore[arg-type]
    if how == "record":      # what a rank's recorder writes as its command starts
        (tmp_path / "3.json").write_text(json.dumps({"rank": 3, "pid": 1, "start": time.time()}))
    else:
        table.hello.append(12345)
    assert bound.check() is None and bound.started
    bound.t0 = time.time() - 60.0                  # long past the bound: still nothing to do
    assert bound.check() is None


def test_helpers_in_sessions_of_their_own_are_found_and_ended() -> None:
    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
            "print(c.pid, flush=True)\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        found = descendants(parent.pid)
        assert child in [pid for pid, _ in found]
        ticks = dict(found)[child]
        parent.kill()
        parent.wait(5)
        assert running(child, ticks)               # orphaned, in its own session: the group kill missed it
        end_helpers(found, grace=2.0)
        assert not running(child, ticks)
    finally:
        parent.kill()
        parent.wait(5)
