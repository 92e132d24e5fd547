"""Open MPI 5.0's known crash (docs/recovery.md, "A limit of the MPI library"), made to happen:
the launcher names the killed rank as the root cause and the crashed ones as its consequences."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planaria.campaign.targets import library_crashes

SCRIPT = Path(__file__).parent / "scripts" / "split_crash.py"
pytestmark = pytest.mark.library_crash_expected


def _run(tmp_path: Path, *options: str) -> tuple[str, Path]:
    """``planaria run -n 8 OPTIONS`` of the script: its output and job directory (skips where gdb
    may not attach; fails when gdb did not stop rank 2 inside Open MPI)."""
    gdb_log = tmp_path / "gdb.log"
    env = dict(os.environ, PLANARIA_HOME=str(tmp_path / "home"))
    env.pop("PLANARIA_CONTROL_URI", None)
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "run", "-n", "8", "--backend", "ulfm",
                          "--timeout", "90", *options, "--", sys.executable, str(SCRIPT), str(gdb_log)],
                         env=env, capture_output=True, text=True, timeout=130)
    said = gdb_log.read_text(errors="replace") if gdb_log.exists() else ""
    if "ptrace: Operation not permitted" in said:
        pytest.skip("gdb may not attach to a process here (ptrace)")
    out = res.stdout + res.stderr
    assert "Breakpoint 1, " in said, f"gdb did not stop rank 2 inside Open MPI:\n{said}\n{out[-3000:]}"
    (jobdir,) = (tmp_path / "home" / "jobs").iterdir()
    return out, jobdir


@pytest.mark.timeout(150)
@pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb to stop a rank inside Open MPI")
def test_ranks_crashed_by_a_failure_inside_split_are_named_as_its_consequences(tmp_path: Path) -> None:
    out, jobdir = _run(tmp_path)
    rows = {row["rank"]: row for row in json.loads((jobdir / "summary.json").read_text())["ranks"]}
    crashed = [r for r, row in rows.items() if "SIGSEGV" in str(row["how"])]
    # the library crashed at least the working ranks that waited for rank 2's part of the split
    assert crashed and set(crashed) <= {0, 1, 3, 4, 5}, out[-3000:]
    assert all(rows[r].get("in_call") == "split" for r in crashed), rows
    assert "SIGKILL" in rows[2]["how"] and rows[6]["state"] == rows[7]["state"] == "failed", rows
    causes = [ln for ln in out.splitlines() if "root cause:" in ln]
    assert causes == ["planaria run: root cause: rank 2 lost: killed by signal 9 (SIGKILL) (no report)"], out[-3000:]
    assert "crashed inside the MPI library (SIGSEGV in split) after rank(s) 2 had failed" in out
    assert library_crashes(out) == len(crashed)


@pytest.mark.timeout(150)
@pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb to stop a rank inside Open MPI")
def test_a_job_the_library_crash_ended_is_restarted(tmp_path: Path) -> None:
    """With ``--restart``, a new mpiexec is the way on: the crashed processes' node is fine."""
    out, jobdir = _run(tmp_path, "--restart", "1")
    attempts = [json.loads(ln) for ln in (jobdir / "attempts.jsonl").read_text().splitlines()]
    assert [a["next"] for a in attempts] == ["restart", "stop"], out[-3000:]
    assert "crashed inside the MPI library while creating a communicator" in attempts[0]["node_failure"]
    assert "attempt 1 ended by Open MPI's known crash (rank(s) " in out
    summary = json.loads((jobdir / "summary.json").read_text())
    assert summary["status"] == 0 and summary["restarts"] == 1, out[-3000:]
    assert sorted(int(r) for r in re.findall(r"split returned at rank (\d+)", out)) == [0, 1, 2, 3, 4, 5, 6, 6, 7, 7]
