"""An unchanged mpi4py program run with planaria's runtime (``python -m planaria`` / ``planaria run --world``)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpi.test_run import env_for, planaria

SCRIPTS = Path(__file__).parent / "scripts"
CPI = str(SCRIPTS / "plain_cpi.py")
pytestmark = pytest.mark.timeout(90)


def _run(home: Path, *args: str, stdin: str = "200000\n") -> subprocess.CompletedProcess[str]:
    return subprocess.run(planaria(home, *args), env=env_for(home), capture_output=True, text=True,
                          timeout=80, input=stdin)


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
@pytest.mark.parametrize("how", ["--world", "-m"])
def test_an_unchanged_program_gets_planarias_world(tmp_path: Path, backend: str, how: str) -> None:
    cmd = ["--", "python", CPI] if how == "--world" else ["--", "python", "-m", "planaria", CPI]
    res = _run(tmp_path, "-n", "3", "--backend", backend, *(["--world"] if how == "--world" else []), *cmd)
    assert res.returncode == 0, res.stderr
    cls = "UlfmComm" if backend == "ulfm" else "SimComm"
    assert f"[0] WORLD planaria.comm.{backend}.{cls}" in res.stdout, res.stdout
    err = float(res.stdout.split("ERROR ")[1].split()[0])
    assert err < 1e-9


def test_without_the_switch_the_program_keeps_mpi4pys_world(tmp_path: Path) -> None:
    res = _run(tmp_path, "-n", "2", "--", "python", CPI)
    assert res.returncode == 0, res.stderr
    assert "[0] WORLD mpi4py.MPI.Intracomm" in res.stdout


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_steps_by_drives_iteration_faults_and_the_survivors_see_planarias_error(tmp_path: Path, backend: str) -> None:
    """--steps-by Allreduce makes each world Allreduce one iteration: kill:rank=1,iter=20 fires
    there, and the survivors' Allreduce raises pl.ProcFailedError (uncaught: one line, exit 1)."""
    res = _run(tmp_path, "-n", "3", "--backend", backend, "--json", "--inject", "kill:rank=1,iter=20", "--",
               "python", "-m", "planaria", "--steps-by", "Allreduce", CPI, "--loop", "1000")
    summary = json.loads(res.stdout)
    ranks = {r["rank"]: r for r in summary["ranks"]}
    assert ranks[1]["state"] == "failed" and "injected kill" in ranks[1]["how"], ranks[1]
    assert "at iteration 20" in ranks[1]["how"]
    for r in (0, 2):
        assert "ProcFailedError" in ranks[r]["how"], ranks[r]
    assert res.returncode != 0


@pytest.mark.parametrize("args, message", [
    (["--world", "--", "ls"], "planaria run: --world: the command must be 'python PROGRAM.py ...'"),
    (["--", "python", "-m", "planaria", "--steps-by", "1x", CPI], "--steps-by '1x': expected a method name"),
    (["--", "python", "-m", "planaria", "--bogus", CPI], "unknown option '--bogus'"),
    (["--", "python", "-m", "planaria", "no/such.py"], "no/such.py: no such file"),
])
def test_bad_use_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    res = _run(tmp_path, "-n", "2", *args)
    assert res.returncode == 2 if args[0] == "--world" else res.returncode != 0
    assert message in res.stderr, res.stderr


def test_usage_without_a_program() -> None:
    res = subprocess.run([sys.executable, "-m", "planaria"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and res.stderr.startswith("usage: python -m planaria")
