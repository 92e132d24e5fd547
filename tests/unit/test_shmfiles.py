"""Orphaned Open MPI shared-memory files: only this user's old files that no live process maps are removed."""
from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planaria.launch import shmfiles


def _segment(d: Path, name: str, age_s: float) -> Path:
    p = d / name
    p.write_bytes(b"\0" * 4096)
    t = time.time() - age_s
    os.utime(p, (t, t))
    return p


HOST = sorted(shmfiles.host_names())[0]
UID = os.getuid()


@pytest.mark.timeout(60)
def test_only_old_unmapped_segments_of_this_host_and_user_are_orphans(tmp_path: Path) -> None:
    old = _segment(tmp_path, f"sm_segment.{HOST}.{UID}.5eed0001.0", 3600)
    young = _segment(tmp_path, f"sm_segment.{HOST}.{UID}.5eed0002.0", 0)       # a job still starting
    vader = _segment(tmp_path, f"vader_segment.{HOST}.{UID}.5eed0003.0", 3600)
    other = _segment(tmp_path, "mpich_shm_5eed", 3600)                         # not Open MPI's
    elsewhere = _segment(tmp_path, f"sm_segment.{HOST}x.{UID}.5eed0006.0", 3600)   # another host (a container)
    someone = _segment(tmp_path, f"sm_segment.{HOST}.{UID + 1}.5eed0007.0", 3600)  # another user's name
    mine = _segment(tmp_path, f"sm_segment.{HOST}.{UID}.5eed0004.0", 3600)
    held = _segment(tmp_path, f"sm_segment.{HOST}.{UID}.5eed0005.0", 3600)
    # one file mapped by this process, one by another live process
    with open(mine, "r+b") as f, mmap.mmap(f.fileno(), 4096) as _m:
        child = subprocess.Popen([sys.executable, "-c",
                                  "import mmap,sys\n"
                                  f"f = open({str(held)!r}, 'r+b'); m = mmap.mmap(f.fileno(), 4096); f.close()\n"
                                  "print('mapped', flush=True); sys.stdin.read()"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "mapped"
            assert {str(mine), str(held)} <= shmfiles.mapped_files(tmp_path)
            assert shmfiles.orphaned(tmp_path) == sorted([old, vader])
            assert shmfiles.remove_orphaned(tmp_path) == sorted([old, vader])
            assert not old.exists() and not vader.exists()
            assert all(p.exists() for p in (young, other, elsewhere, someone, mine, held))
        finally:
            child.communicate("", timeout=20)
    # the child has exited and this process has unmapped: both are orphans now
    assert shmfiles.orphaned(tmp_path) == sorted([mine, held])
    assert shmfiles.orphaned(tmp_path, grace_s=0.0) == sorted([young, mine, held])


def test_missing_directory_has_no_orphans(tmp_path: Path) -> None:
    assert shmfiles.orphaned(tmp_path / "absent") == []
