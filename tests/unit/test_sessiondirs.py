"""Removal of Open MPI session directories left by killed launchers (planaria.launch.sessiondirs)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from planaria.launch import sessiondirs

pytestmark = pytest.mark.timeout(30)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=20)
    return p.pid


def session_dir(base, pid: int, age: float = 10.0):
    d = base / f"ompi.{pid}"
    (d / "1" / "0").mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / f"pmix.{socket.gethostname()}.tool.{pid}"))   # what blocks the next launcher with this pid
    s.close()
    t = time.time() - age
    os.utime(d, (t, t))
    return d


def test_only_dead_launchers_old_directories_are_removed(tmp_path):
    gone = session_dir(tmp_path, dead_pid())
    live = session_dir(tmp_path, os.getpid())          # a running process: its directory stays
    young = session_dir(tmp_path, dead_pid() + 100000, age=0.0)   # within the grace period
    other = tmp_path / "ompi.x12"
    other.mkdir()
    (tmp_path / f"ompi.{dead_pid()}").write_text("a file, not a session directory")
    assert sessiondirs.stale(tmp_path) == [gone]
    assert sessiondirs.remove_stale(tmp_path) == [gone]
    assert not gone.exists() and live.exists() and young.exists() and other.exists()
    assert sessiondirs.remove_stale(tmp_path / "missing") == []


def test_a_directory_of_a_launcher_on_another_host_is_left_alone(tmp_path):
    """A launcher in another PID namespace sharing this file system (the Slurm test cluster's
    hosts) names its host in its PMIx files; its pid says nothing here, so its directory stays."""
    theirs, bare = tmp_path / f"ompi.{dead_pid()}", tmp_path / f"ompi.{dead_pid()}"
    for d in (theirs, bare):
        (d / "0").mkdir(parents=True)
    (theirs / "pmix.pl-other-host.tool").write_text("")   # the name is what counts (a socket there)
    t = time.time() - 10
    for d in (theirs, bare):                         # bare: no PMIx file, judged by its pid
        os.utime(d, (t, t))
    assert sessiondirs.stale(tmp_path) == [bare]
    assert theirs.exists()


def test_base_dir_follows_tmpdir_like_open_mpi():
    assert str(sessiondirs.base_dir({"TMPDIR": "/x", "TMP": "/y"})) == "/x"
    assert str(sessiondirs.base_dir({"TMP": "/y"})) == "/y"
    assert str(sessiondirs.base_dir({})) == "/tmp"
