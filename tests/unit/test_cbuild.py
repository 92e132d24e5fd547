"""The small C parts' builds: named by their source, arguments and headers, made once, a failure
noted and not tried again, nothing without a compiler."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from planaria.util import cbuild

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="no C compiler on this machine")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "planaria"


def test_the_name_changes_with_the_source_the_arguments_and_the_extra_files(tmp_path: Path, cache: Path) -> None:
    src, hdr = tmp_path / "a.c", tmp_path / "h.h"
    src.write_text("int main(void) { return 0; }\n")
    hdr.write_text("#define X 1\n")
    first = cbuild.build_path(str(src), "a", ("-O2",), ".so", extra=(str(hdr),))
    assert first is not None and first.startswith(str(cache / "a-")) and first.endswith(".so")
    assert cbuild.build_path(str(src), "a", ("-O2",), ".so", extra=(str(hdr),)) == first
    assert cbuild.build_path(str(src), "a", ("-O1",), ".so", extra=(str(hdr),)) != first
    hdr.write_text("#define X 2\n")
    assert cbuild.build_path(str(src), "a", ("-O2",), ".so", extra=(str(hdr),)) != first
    assert cbuild.build_path(str(src), "a", ("-O2",), ".so", extra=(str(tmp_path / "none.h"),)) is None
    assert cbuild.build_path(str(tmp_path / "none.c"), "a") is None


@needs_cc
def test_a_program_is_built_once(tmp_path: Path, cache: Path) -> None:
    src = tmp_path / "ok.c"
    src.write_text("int main(void) { return 3; }\n")
    assert cbuild.built(str(src), "ok", ("-O2",), build=False) is None        # asked not to build: none yet
    exe = cbuild.built(str(src), "ok", ("-O2",))
    assert exe is not None and subprocess.run([exe], timeout=10).returncode == 3
    made = os.stat(exe).st_mtime_ns
    assert cbuild.built(str(src), "ok", ("-O2",)) == exe and os.stat(exe).st_mtime_ns == made
    assert [p.name for p in cache.iterdir()] == [Path(exe).name]              # no temporary file left


@needs_cc
def test_a_temporary_build_whose_process_is_gone_is_removed_by_the_next_build(tmp_path: Path, cache: Path) -> None:
    src = tmp_path / "ok.c"
    src.write_text("int main(void) { return 0; }\n")
    out = cbuild.build_path(str(src), "ok", ("-O2",))
    assert out is not None
    gone = subprocess.Popen(["true"])
    gone.wait()                                         # a process id that no process has now
    host = os.uname().nodename
    cache.mkdir(parents=True)
    left = {name: Path(f"{out}.{name}.tmp") for name in
            (f"{host}.{gone.pid}", f"{host}.{os.getppid()}", f"elsewhere.{gone.pid}")}
    for p in left.values():
        p.write_bytes(b"half a build")
    assert cbuild.built(str(src), "ok", ("-O2",)) == out
    assert not left[f"{host}.{gone.pid}"].exists()                 # its builder is gone
    assert left[f"{host}.{os.getppid()}"].exists()                 # a live builder's is its own
    assert left[f"elsewhere.{gone.pid}"].exists()                  # another host's is that host's


@needs_cc
def test_a_failed_build_is_noted_and_not_tried_again(tmp_path: Path, cache: Path) -> None:
    src = tmp_path / "bad.c"
    src.write_text("this is not C\n")
    assert cbuild.built(str(src), "bad") is None
    failed = list(cache.glob("bad-*.failed"))
    assert len(failed) == 1 and failed[0].read_text()          # the compiler's message
    os.utime(failed[0], (0, 0))
    assert cbuild.built(str(src), "bad") is None and failed[0].stat().st_mtime == 0     # not tried again
    assert [p.suffix for p in cache.iterdir()] == [".failed"]


def test_without_a_compiler_nothing_is_built_or_noted(tmp_path: Path, cache: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "ok.c"
    src.write_text("int main(void) { return 0; }\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cbuild.built(str(src), "ok") is None
    assert not cache.exists() or not list(cache.iterdir())
