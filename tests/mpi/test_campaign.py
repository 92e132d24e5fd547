"""Fault campaign: many demo runs with random victims, moments and phases; each ends correct or 'spares exhausted'.

The plans are drawn from a fixed seed, so a failing run can be replayed with the command
printed in the assertion message. Every run is bounded (`--timeout`, and a subprocess timeout
above it): a hang fails the test.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from planaria.launch.jobdir import OUTPUT
from tests.mpi.mpijob import root_env

pytestmark = [pytest.mark.mpi]

RUNS = 24
WORKING, SPARES, STEPS, EVERY = 6, 2, 160, 20


def draw_plan(rng: random.Random, backend: str) -> list[str]:
    """1-3 kills of distinct processes (working or spare), each computing, checkpointing, recovering or timed."""
    victims = rng.sample(range(WORKING + SPARES), rng.randint(1, 3))
    plan = []
    for v in victims:
        phase = rng.choice(["compute", "checkpoint", "recover"] + (["time"] if backend == "ulfm" else []))
        if phase == "compute":
            plan.append(f"kill:rank={v},iter={rng.randint(5, STEPS - 10)}")
        elif phase == "checkpoint":
            plan.append(f"kill:rank={v},iter={rng.randint(0, STEPS - 30)},phase=checkpoint")
        elif phase == "recover":
            plan.append(f"kill:rank={v},phase=recover")
        else:
            # the 160 steps take ~0.1-0.3 s: early times hit the steps, later ones the protected
            # epilogue (gathering the result) or the way out
            plan.append(f"kill:rank={v},time={rng.uniform(0.02, 0.3):.2f}")
    return plan


def campaign() -> list[tuple[str, list[str]]]:
    rng = random.Random(20261121)
    out = []
    for k in range(RUNS):
        backend = "ulfm" if k % 2 == 0 else "sim"
        out.append((backend, draw_plan(rng, backend)))
    return out


@pytest.mark.timeout(150)
@pytest.mark.parametrize("run", range(RUNS))
def test_campaign_run(tmp_path, run: int) -> None:
    backend, plan = campaign()[run]
    cmd = [sys.executable, "-m", "planaria.cli.main", "demo", "--json", "--backend", backend,
           "-n", str(WORKING), "--spares", str(SPARES), "--checkpoint", "multi", "--every", str(EVERY),
           "--file-every", str(2 * EVERY), "--steps", str(STEPS), "--cells-per-rank", "5000", "--timeout", "100"]
    for spec in plan:
        cmd += ["--inject", spec]
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    replay = " ".join(cmd[3:])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=130, env=env)
    assert res.returncode != 124, f"run timed out (hang?): planaria {replay}\n{res.stderr[-3000:]}"
    assert "{" in res.stdout, f"no report: planaria {replay}\n{res.stderr[-3000:]}"
    report = json.loads(res.stdout[res.stdout.index("{"):])
    if report["outcome"] == "finished":
        assert res.returncode == 0 and report["bit_identical"] is True, f"planaria {replay}\n{res.stderr[-3000:]}"
    else:
        assert report["outcome"] == "spares exhausted", f"{report}\nplanaria {replay}\n{res.stderr[-3000:]}"
        assert res.returncode == 3
        assert len(plan) > SPARES, (f"spares exhausted with only {len(plan)} kill(s): planaria {replay}"
                                    f"{_library_crashes(tmp_path)}")


def _library_crashes(home: Path) -> str:
    """Lines of the job's output where a process crashed inside the MPI library (see docs/recovery.md)."""
    lines = [ln for log in home.glob(f"jobs/*/{OUTPUT}")
             for ln in log.read_text(errors="replace").splitlines()
             if "Segmentation fault" in ln or "libmpi.so" in ln]
    return ("\nprocesses crashed inside the MPI library:\n" + "\n".join(lines[:12])) if lines else ""


def test_campaign_covers_every_phase() -> None:
    """The drawn plans exercise computing, checkpointing, recovering and timed kills, with spares as victims too."""
    specs = [s for _, plan in campaign() for s in plan]
    assert any("phase=checkpoint" in s for s in specs) and any("phase=recover" in s for s in specs)
    assert any("time=" in s for s in specs) and any("phase" not in s and "iter=" in s for s in specs)
    assert any(f"rank={v}," in s for s in specs for v in range(WORKING, WORKING + SPARES))
    assert sum(1 for _, plan in campaign() if len(plan) > SPARES) >= 3    # some runs must exhaust the spares
