"""Continuing on fewer processes when spares run out: stores' recover_lost, the driver, the demo (real jobs)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.mpi.mpijob import SCRIPTS, mpiexec, root_env
from tests.mpi.mpijob import run_demo as demo

pytestmark = [pytest.mark.mpi]

BACKENDS = ["ulfm", "sim"]
STORES = str(SCRIPTS / "exhausted_stores.py")
APP = str(SCRIPTS / "exhausted_app.py")

# case -> (processes, world ranks expected to print OK); see exhausted_stores.py
STORE_CASES = {
    "memory": (5, [0, 1, 3, 4]),
    "memory_adjacent": (5, [0, 1, 4]),
    "memory_spare": (6, [0, 2, 4, 5]),
    "xor": (6, [0, 2, 3, 5]),
    "xor_two": (6, [1, 3, 4, 5]),
    "file": (4, [0, 2]),
    "multi": (6, [1, 3, 4, 5]),
}


def _detail(out: str, err: str) -> str:
    return f"\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-3000:]}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(STORE_CASES))
def test_recover_lost(case: str, backend: str, tmp_path) -> None:
    n, ok = STORE_CASES[case]
    res = mpiexec(n, [STORES, case, backend, str(tmp_path)], ft=(backend == "ulfm"), timeout=90)
    detail = _detail(res.out, res.err)
    assert "FAIL" not in res.out, detail
    assert res.ok_ranks(case) == ok, f"ranks reporting OK {res.ok_ranks(case)}, expected {ok}{detail}"
    assert res.code == 0, f"exit code {res.code}{detail}"


def run_app(tmp_path, backend: str, n: int, spares: int, kills: list[str], store: str = "memory",
            mode: str = "continue", steps: int = 40):
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(n), "--spares", str(spares),
           "--backend", backend, "--timeout", "90"]
    for k in kills:
        cmd += ["--inject", k]
    cmd += ["--", sys.executable, APP, str(steps), "5", store, mode]
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in res.stdout.splitlines() if "RESULT " in line]
    return res, results


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend,store", [("ulfm", "memory"), ("sim", "memory"), ("ulfm", "xor"),
                                           ("sim", "file")])
def test_no_spare_continue_on_fewer(tmp_path, backend: str, store: str) -> None:
    res, results = run_app(tmp_path, backend, 4, 0, ["kill:rank=2,iter=12"], store=store)
    detail = _detail(res.stdout, res.stderr)
    assert res.returncode == 0, detail
    assert sorted(r["world"] for r in results) == [0, 1, 3], detail
    assert all(r["ok"] and r["ranks"] == 3 for r in results), results
    assert {r["world"]: r["logical"] for r in results} == {0: 0, 1: 1, 3: 2}
    for r in results:
        (rec,) = r["recoveries"]
        assert rec["continued"] and rec["lost"] == [2] and rec["version"] == 10 and rec["ranks"] == 3


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", BACKENDS)
def test_continue_twice(tmp_path, backend: str) -> None:
    """After continuing on 3 ranks, the store works on them: a second loss continues on 2."""
    res, results = run_app(tmp_path, backend, 4, 0, ["kill:rank=2,iter=12", "kill:rank=0,iter=31"])
    detail = _detail(res.stdout, res.stderr)
    assert res.returncode == 0, detail
    assert sorted(r["world"] for r in results) == [1, 3], detail
    assert all(r["ok"] and r["ranks"] == 2 for r in results), results
    for r in results:
        assert [(x["lost"], x["version"], x["ranks"]) for x in r["recoveries"]] == [([2], 10, 3), ([0], 30, 2)]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", BACKENDS)
def test_spare_joins_when_too_few(tmp_path, backend: str) -> None:
    """Two ranks lost, one spare: the spare becomes a working rank too, the job goes on with 4 of 5."""
    res, results = run_app(tmp_path, backend, 5, 1, ["kill:rank=1,iter=12", "kill:rank=3,iter=12"])
    detail = _detail(res.stdout, res.stderr)
    assert res.returncode == 0, detail
    assert sorted(r["world"] for r in results) == [0, 2, 4, 5], detail
    assert all(r["ok"] and r["ranks"] == 4 for r in results), results
    by_world = {r["world"]: r for r in results}
    assert by_world[5]["role"] == "recovered" and by_world[5]["logical"] == 3
    assert all(r["recoveries"][-1]["continued"] for r in results)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_is_still_the_default_answer(tmp_path, backend: str) -> None:
    res, results = run_app(tmp_path, backend, 4, 0, ["kill:rank=2,iter=12"], mode="stop")
    stopped = sorted(int(line.split()[2].rstrip(":")) for line in res.stdout.splitlines() if "EXHAUSTED" in line)
    assert stopped == [0, 1, 3] and not results, _detail(res.stdout, res.stderr)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend,checkpoint", [("ulfm", "memory"), ("sim", "memory"), ("ulfm", "xor"),
                                                ("sim", "multi")])
def test_demo_continues_on_fewer_ranks(tmp_path, backend: str, checkpoint: str) -> None:
    res, report = demo(tmp_path, "--backend", backend, "--checkpoint", checkpoint, "--spares", "1",
                       "--when-exhausted", "continue",
                       "--inject", "kill:rank=1,iter=45", "--inject", "kill:rank=4,iter=110")
    assert res.returncode == 0, _detail(res.stdout, res.stderr)
    assert report["outcome"] == "finished" and report["bit_identical"] is True
    assert report["ranks"] == 6 and report["ranks_end"] == 5 and report["spares"] == 1
    assert [ev["lost"] for ev in report["failures"]] == [[1], [4]]
    assert [ev["version"] for ev in report["failures"]] == [40, 100]
    assert [bool(ev.get("continued")) for ev in report["failures"]] == [False, True]


@pytest.mark.timeout(180)
def test_demo_stop_reports_exhausted(tmp_path) -> None:
    res, report = demo(tmp_path, "--backend", "sim", "--spares", "0", "--when-exhausted", "stop",
                       "--inject", "kill:rank=1,iter=45")
    assert res.returncode == 3, _detail(res.stdout, res.stderr)
    assert report["outcome"] == "spares exhausted"
