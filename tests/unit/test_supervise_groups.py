"""The launcher's end of a job: the process groups the ranks leave behind, signalled only while
their number still names them (real processes)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from planaria.launch.supervise import rank_groups, signal_groups

pytestmark = pytest.mark.timeout(30)


def _group_of_two() -> tuple[subprocess.Popen[bytes], int]:
    """A process leading a group of its own, with a child in that group; (leader, child pid)."""
    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(c.pid, flush=True)\n"
            "time.sleep(60)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    return leader, child


def _gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)       # our own child: reap it
            if done:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.02)
    return False


def test_a_rank_group_is_signalled_whole() -> None:
    leader, child = _group_of_two()
    try:
        groups = rank_groups([leader.pid], exclude=-1)
        assert [g for g, _ in groups] == [leader.pid]
        signal_groups(groups, signal.SIGKILL)
        leader.wait(5)
        assert _gone(child), "the child in the rank's group survived"
    finally:
        for pid in (leader.pid, child):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_group_number_now_led_by_another_process_is_left_alone() -> None:
    """A leader that started at another time than the one noted: the number was reused."""
    leader, child = _group_of_two()
    try:
        (pgid, ticks), = rank_groups([leader.pid], exclude=-1)
        assert ticks is not None
        signal_groups([(pgid, ticks + 1)], signal.SIGKILL)
        time.sleep(0.2)
        assert leader.poll() is None and not _gone(child, within=0.1)
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(5)
