"""The simulation backend is deterministic: the same fault plan and seed give the same failure sequence."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.mpi.mpijob import SCRIPTS, root_env

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


def failure_sequence(tmp_path, seed: int) -> list[tuple[int, str]]:
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "5", "--backend", "sim",
           "--inject", f"kill:mtbf=0.5,seed={seed},count=2", "--json", "--timeout", "60",
           "--default-handler", "none",          # the survivors keep looping after the kills
           "--", sys.executable, str(SCRIPTS / "steady_loop.py"), "60"]
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    failed = [r for r in summary["ranks"] if r["state"] == "failed"]
    # order of failure = order of the scheduled kill times named in the reasons
    failed.sort(key=lambda r: float(r["how"].rsplit("t=", 1)[1].rstrip("s")))
    return [(r["rank"], r["how"]) for r in failed]


def test_same_seed_same_failures(tmp_path) -> None:
    first = failure_sequence(tmp_path, 11)
    second = failure_sequence(tmp_path, 11)
    assert len(first) == 2, first
    assert first == second


def test_other_seed_other_failures(tmp_path) -> None:
    seqs = {tuple(failure_sequence(tmp_path, s)) for s in (11, 12)}
    assert len(seqs) == 2, seqs
