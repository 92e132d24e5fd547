"""A short seeded fault campaign (planaria.campaign) on real jobs: no run may be wrong, hung or unexplained.

The first 12 plans of seed 5 go round the demo, the application (examples/resilient_app.py) and
ABFT on both backends, and include a kill in every driver phase (finish among them), kills of
spares and of adjacent ranks, kills at times near the start, bit flips, I/O errors on checkpoint
files, a checkpoint file damaged between two runs and an adjacent pair of silent ABFT faults
(``test_ci_plans_cover_every_kind_of_fault``). Every command is bounded (the job's --timeout,
and the campaign's own bound above it); a failed assertion prints the plan and the commands that
replay it.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from planaria.campaign import plans, targets
from planaria.campaign.classify import BAD, HUNG
from tests.mpi.mpijob import root_env

pytestmark = [pytest.mark.mpi, pytest.mark.library_crash_expected]   # it classes such runs itself

SEED, RUNS, TIMEOUT = 5, 12, 60
ALL, BOTH = list(plans.TARGETS), list(plans.BACKENDS)


def _ci_plans() -> list[plans.RunPlan]:
    return plans.schedule(SEED, RUNS, ALL, BOTH)


def _context(tmp_path: Path, timeout: float = TIMEOUT) -> targets.Context:
    app = targets.find_app()
    assert app is not None, "examples/resilient_app.py is missing"
    return targets.Context(root=tmp_path, timeout=timeout, app=app)


@pytest.mark.timeout(2 * (TIMEOUT + targets.GRACE) + 30)     # an app run with damage launches two jobs
@pytest.mark.parametrize("index", range(RUNS))
def test_campaign_run(tmp_path, index: int) -> None:
    plan = _ci_plans()[index]
    rec = targets.execute(plan, _context(tmp_path))
    assert rec.cls not in BAD, (f"run {index} ({plan.target}, {plan.backend}) {rec.cls}: {rec.reason}\n"
                                f"plan: {plan.describe()}\nreplay:\n  " + "\n  ".join(rec.replay)
                                + f"\n--- output\n{rec.tail}")


def test_ci_plans_cover_every_kind_of_fault() -> None:
    """The seeded plans exercise what the campaign promises, so a change to the drawing cannot quietly thin CI out."""
    ps = _ci_plans()
    specs = [f for p in ps for f in p.faults]
    for phase in ("checkpoint", "recover", "finish"):
        assert any(f"phase={phase}" in s for s in specs), phase
    assert any(re.match(r"kill:rank=[67],", s) for s in specs)                     # a spare
    assert any(re.match(r"kill:rank=\d\+\d,iter=", s) for s in specs)              # adjacent ranks at once
    assert any(re.search(r",time=0\.0[0-4]\d*$", s) for s in specs)               # near the start
    assert any(s.startswith("bitflip:") for s in specs) and any(s.startswith("ioerror:") for s in specs)
    assert any(p.damage for p in ps)
    assert any(re.search(r"--force silent:(\d) --force silent:(\d)", " ".join(p.settings.get("abft_args", [])))
               for p in ps)
    assert {(p.target, p.backend) for p in ps} == {(t, b) for t in ALL for b in BOTH}


@pytest.mark.timeout(90)
def test_a_hung_job_is_classified_hung(tmp_path) -> None:
    """A rank that stops progressing makes the job run into its --timeout: the campaign calls that hung."""
    plan = plans.RunPlan(0, "app", "sim", ["hang:rank=1,iter=20"], {"store": "memory"})
    rec = targets.execute(plan, _context(tmp_path, timeout=8))
    assert rec.cls == HUNG, (rec.cls, rec.reason, rec.tail)
    assert rec.codes == [124] and rec.directory and Path(rec.directory).is_dir()
    assert "hang:rank=1,iter=20" in rec.replay[0] and "--timeout 8" in rec.replay[0]


@pytest.mark.timeout(120)
def test_command_json_and_bad_input(tmp_path) -> None:
    """``planaria campaign --json`` records every run with its replay; bad input is one line and exit 2."""
    env = root_env()
    env["TMPDIR"] = str(tmp_path)
    cmd = [sys.executable, "-m", "planaria.cli.main", "campaign"]
    res = subprocess.run(cmd + ["--runs", "2", "--targets", "abft", "--backends", "sim,ulfm", "--seed", "3",
                                "--timeout", "60", "--json"], capture_output=True, text=True, timeout=100, env=env)
    rep = json.loads(res.stdout)
    assert [(r["index"], r["target"], r["backend"]) for r in rep["runs"]] == [(0, "abft", "sim"), (1, "abft", "ulfm")]
    assert all(r["replay"][0].startswith("planaria abft ") and r["class"] for r in rep["runs"])
    assert sum(rep["total"].values()) == 2 and rep["seed"] == 3
    assert res.returncode == (1 if rep["bad"] else 0), res.stderr[-2000:]
    for bad, what in ((["--runs", "0"], "--runs"), (["--backends", "mpich"], "--backends"),
                      (["--timeout", "inf"], "--timeout"), (["--timeout", "1_0"], "--timeout"),
                      (["--seed", "x"], "--seed"), (["--runs", "\u0663"], "--runs"),
                      (["--app", str(tmp_path / "missing.py")], "--app")):
        res = subprocess.run(cmd + bad, capture_output=True, text=True, timeout=60, env=env)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"planaria campaign: {what}"), \
            res.stderr
