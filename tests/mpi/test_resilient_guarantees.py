"""``Resilient`` never hangs and never ends without a clear word: failures in the epilogue, at
start-up, and a job that cannot be recovered, each as a real job under ``planaria run``.

The application is the one docs/recovery.md shows (``scripts/docs_resilient_app.py``). Each job
has ``--timeout`` below the subprocess's own timeout: a hang fails the test with exit 124.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.mpi.mpijob import SCRIPTS, root_env

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


def run_docs_app(tmp_path, backend: str, n: int, spares: int, kills: list[str], steps: int = 200,
                 setup_s: float = 0.0, raise_at: int = -1):
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(n), "--spares", str(spares),
           "--backend", backend, "--timeout", "60"]
    for k in kills:
        cmd += ["--inject", k]
    cmd += ["--", sys.executable, str(SCRIPTS / "docs_resilient_app.py"), str(steps), str(setup_s), str(raise_at)]
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=env)
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in res.stdout.splitlines() if "RESULT " in line]
    return res, results


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
@pytest.mark.parametrize("victim", [2, 0])
def test_kill_inside_a_gathering_finish_is_recovered(tmp_path, backend: str, victim: int) -> None:
    """A rank dies on entering ``finish`` while the others gather: some ranks are through the
    gather and in the closing agreement, others raise; all must meet in the recovery."""
    res, results = run_docs_app(tmp_path, backend, 6, 2, [f"kill:rank={victim},phase=finish"])
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr[-3000:]}"
    assert len(results) == 1 and results[0]["ok"] and results[0]["ranks"] == 6, res.stdout[-2000:]


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_unrecoverable_ends_every_rank_with_one_line_and_releases_spares(tmp_path, backend: str) -> None:
    """Two partner-memory neighbours die at once: no version can be restored. Every living process,
    the spare that took no rank included, says so in one line and the job exits 3 at once."""
    res, results = run_docs_app(tmp_path, backend, 5, 3, ["kill:rank=2+3,iter=55"])
    assert res.returncode == 3, f"exit {res.returncode}\n{res.stderr[-3000:]}"
    out = res.stdout + res.stderr
    stopped = sorted({int(line.split("planaria: rank ", 1)[1].split(":")[0])
                      for line in out.splitlines() if "planaria: rank " in line and ": Unrecoverable: " in line})
    assert stopped == [0, 1, 4, 5, 6, 7], out[-3000:]        # 3 survivors, 2 spares that took ranks, 1 idle
    assert "Traceback" not in out, out[-3000:]
    assert not results
    assert "exit 3: Unrecoverable: no checkpoint version" in out, out[-3000:]   # the summary says why


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_spares_stop_when_every_working_rank_has_failed(tmp_path, backend: str) -> None:
    """Every working rank raises in the same step (a bug, not a fault): no working rank is left to
    start a recovery, and the spares must not wait for one. They end with one line, exit 3."""
    res, results = run_docs_app(tmp_path, backend, 4, 2, [], raise_at=25)
    assert res.returncode == 3, f"exit {res.returncode}\n{res.stderr[-3000:]}"
    out = res.stdout + res.stderr
    stopped = sorted({int(line.split("planaria: rank ", 1)[1].split(":")[0]) for line in out.splitlines()
                      if "planaria: rank " in line and "every working rank failed" in line})
    assert stopped == [4, 5], out[-3000:]
    assert "a bug every rank meets at step 25" in out and not results


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_kill_at_start_up_is_recovered_without_a_handler_in_the_program(tmp_path, backend: str) -> None:
    """Ranks killed as soon as the job starts, while the program still sets up (before ``Resilient``
    exists), are failures to recover from, not a reason for the default event handler to abort."""
    res, results = run_docs_app(tmp_path, backend, 6, 2, ["kill:rank=4,time=0", "kill:rank=5,time=0.001"],
                                setup_s=1.0)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr[-3000:]}"
    assert "default event handler" not in res.stderr, res.stderr[-3000:]
    assert len(results) == 1 and results[0]["ok"] and results[0]["ranks"] == 6, res.stdout[-2000:]


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_partners_lost_before_any_checkpoint_past_init_start_again(tmp_path, backend: str) -> None:
    """Two partner-memory neighbours die before step 10's checkpoint: only version 0 exists and its
    copies of them are gone, but version 0 is what ``init`` makes, so the job starts again."""
    res, results = run_docs_app(tmp_path, backend, 6, 2, ["kill:rank=2+3,iter=5"])
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr[-3000:]}"
    assert len(results) == 1 and results[0]["ok"] and results[0]["ranks"] == 6, res.stdout[-2000:]
