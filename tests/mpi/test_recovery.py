"""Recovery driver with spares, as real jobs under `planaria run` on both backends."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.mpi.mpijob import SCRIPTS, root_env

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(150)]


def run_app(tmp_path, backend: str, n: int, spares: int, kills: list[str], steps: int = 50,
            extra: tuple[str, ...] = (), step_sleep: float = 0.0, spare_poll: float | None = None):
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(n), "--spares", str(spares),
           "--backend", backend, "--timeout", "90"]
    for k in kills:
        cmd += ["--inject", k]
    cmd += ["--", sys.executable, str(SCRIPTS / "resilient_app.py"), str(steps), "5", *extra]
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    env["RESILIENT_APP_STEP_SLEEP"] = str(step_sleep)
    if spare_poll is not None:
        env["RESILIENT_APP_SPARE_POLL"] = str(spare_poll)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in res.stdout.splitlines() if "RESULT " in line]
    return res, results


def _working(res, results) -> dict:
    """The job ended with exit 0: its working ranks' results by logical rank."""
    assert res.returncode == 0, res.stderr[-3000:]
    return {r["logical"]: r for r in results if r["logical"] is not None}


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_spares_replace_two_failures(tmp_path, backend: str) -> None:
    # 10 ms per step: the spares (polling every 20 ms) have the checkpoint sizes before the kills
    res, results = run_app(tmp_path, backend, 6, 2, ["kill:rank=2,iter=12", "kill:rank=4,iter=31"],
                           step_sleep=0.01)
    working = _working(res, results)
    assert sorted(working) == list(range(6)), results
    assert all(r["ok"] for r in working.values()), results
    assert working[2]["world"] == 6 and working[2]["role"] == "recovered"
    assert working[4]["world"] == 7 and working[4]["role"] == "recovered"
    assert {working[k]["role"] for k in (0, 1, 3, 5)} == {"survivor"}
    # the job summary says so too: the spares (world ranks 6, 7) took over logical ranks 2 and 4
    (job,) = list((tmp_path / "jobs").iterdir())
    rows = {r["rank"]: r for r in json.loads((job / "summary.json").read_text())["ranks"]}
    assert (rows[6]["role"], rows[6].get("logical")) == ("recovered", 2), rows[6]
    assert (rows[7]["role"], rows[7].get("logical")) == ("recovered", 4), rows[7]
    assert rows[0]["role"] == "survivor"
    versions = [rec["version"] for rec in working[0]["recoveries"]]
    assert versions == [10, 30]
    # the spares had faulted in what a restore in a working rank's place allocates: the packed
    # state (x: 1000 float64, trace: 50 float64) received, the neighbour's copy, the output
    packed = (1000 + 50) * 8
    for k in (2, 4):
        assert working[k]["recoveries"][0]["warm_bytes"] == 3 * packed, working[k]["recoveries"]
    assert all(rec["warm_bytes"] == 0 for k in (0, 1, 3, 5) for rec in working[k]["recoveries"])
    # the message log recorded the failure errors of the program's calls (the step's allreduce),
    # one per failure a rank saw there as a working rank (the spare that took logical rank 4 saw
    # none); none of the recovery's own (its agreement, shrink, the spares' wait): its protocol
    for k, r in working.items():
        sites = [f["site"] for f in r["failures"]]
        assert all(s.endswith(" in step") for s in sites), (k, r["failures"])
        assert len(sites) == {2: 1, 4: 0}.get(k, 2), (k, r["failures"])


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_spares_wake_on_the_recovery_not_on_their_poll(tmp_path, backend: str) -> None:
    # spares that would test their receive only once a second: the working ranks' wake (through
    # the controller) brings the replacement into the recovery, and the unused spare out at the end
    res, results = run_app(tmp_path, backend, 4, 2, ["kill:rank=2,iter=12"], steps=30, step_sleep=0.01,
                           spare_poll=1.0)
    _woken_not_polled(_working(res, results), results)


def _woken_not_polled(working: dict, results: list[dict]) -> None:
    """Logical rank 2 of 4 was lost: the spare that took it was woken and joined the recovery well
    within its 1 s poll, and the other spare was woken too (the recovery, then the release)."""
    assert sorted(working) == list(range(4)) and all(r["ok"] for r in working.values()), results
    taken = working[2]
    assert taken["role"] == "recovered" and taken["spare_wakes"] >= 1, taken
    survivors = [working[k]["recoveries"][0]["t_detect"] for k in (0, 1, 3)]
    late = taken["recoveries"][0]["t_detect"] - min(survivors)
    assert late < 0.5, f"the replacement joined {late:.3f} s after the first survivor"
    (unused,) = [r for r in results if r["logical"] is None]
    assert unused["spare_wakes"] >= 2, unused     # the recovery, then the release at the end


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_under_a_bare_mpiexec_spares_wake_on_the_recovery_too(backend: str) -> None:
    # no planaria run, so no controller: the working ranks wake the spares on this host through
    # the sockets the spares bound in the abstract namespace, named by the job and their rank
    from tests.mpi.mpijob import mpiexec
    env = {"PLANARIA_BACKEND": backend, "PLANARIA_SPARES": "2", "PLANARIA_INJECT": "kill:rank=2,iter=12",
           "RESILIENT_APP_STEP_SLEEP": "0.01", "RESILIENT_APP_SPARE_POLL": "1.0"}
    res = mpiexec(6, [str(SCRIPTS / "resilient_app.py"), "30", "5"], ft=backend == "ulfm", env=env, timeout=120)
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in res.out.splitlines() if "RESULT " in line]
    assert results, res.err[-3000:]
    _woken_not_polled({r["logical"]: r for r in results if r["logical"] is not None}, results)


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_a_spare_is_warm_for_a_failure_soon_after_the_start(tmp_path, backend: str) -> None:
    # a spare that would test its receive only once a second, and a kill 60 ms of steps after the
    # first checkpoint: the working ranks wake it with the sizes, so it has faulted them in
    res, results = run_app(tmp_path, backend, 4, 1, ["kill:rank=2,iter=12"], steps=20, step_sleep=0.005,
                           spare_poll=1.0)
    working = _working(res, results)
    assert working[2]["role"] == "recovered" and all(r["ok"] for r in working.values()), results
    packed = (1000 + 20) * 8          # x and trace (one float64 per step)
    assert working[2]["recoveries"][0]["warm_bytes"] == 3 * packed, working[2]["recoveries"]


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_spares_exhausted_stops_everywhere(tmp_path, backend: str) -> None:
    res, _ = run_app(tmp_path, backend, 4, 1, ["kill:rank=2,iter=12", "kill:rank=3,iter=31"])
    stopped = sorted(int(line.split()[2].rstrip(":")) for line in res.stdout.splitlines() if "EXHAUSTED" in line)
    assert stopped == [0, 1, 4], res.stdout[-3000:]


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_unused_spare_is_released(tmp_path, backend: str) -> None:
    res, results = run_app(tmp_path, backend, 3, 1, [], steps=20)
    assert res.returncode == 0, res.stderr[-3000:]
    spare = [r for r in results if r["world"] == 3]
    assert spare and spare[0]["role"] == "spare" and spare[0]["logical"] is None


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_failures_during_recovery_and_checkpoint_are_survived(tmp_path, backend: str) -> None:
    kills = ["kill:rank=2,iter=12", "kill:rank=5,phase=recover"]
    res, results = run_app(tmp_path, backend, 6, 3, kills + ["kill:rank=0,iter=33,phase=checkpoint"])
    working = _working(res, results)
    assert sorted(working) == list(range(6)) and all(r["ok"] for r in working.values()), results
    assert {working[k]["role"] for k in (0, 2, 5)} == {"recovered"}
    assert working[1]["recoveries"][0]["attempts"] >= 2      # the recovery itself was hit


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_failures_in_the_protected_epilogue_are_survived(tmp_path, backend: str) -> None:
    """Ranks 0 and 3 die on entering ``finish`` (after the last step): a spare takes each, ``finish`` reruns."""
    kills = ["kill:rank=0,phase=finish", "kill:rank=3,phase=finish"]
    res, results = run_app(tmp_path, backend, 5, 2, kills, steps=20, extra=("stop", "finish"))
    working = _working(res, results)
    assert sorted(working) == list(range(5)) and all(r["ok"] for r in working.values()), results
    assert {working[k]["role"] for k in (0, 3)} == {"recovered"}
    assert all(rec["version"] == 20 for rec in working[1]["recoveries"]), working[1]["recoveries"]


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_a_failure_while_the_last_checkpoint_completes_is_survived(tmp_path, backend: str) -> None:
    """Rank 2's copy for rank 3 is held back, so the ranks wait for the last checkpoint to be held
    everywhere before ``finish``; ranks 0 and 3 die in that wait. The job ends with the right
    result from the newest version held in full (step 20, or step 15 when the held-back copy had
    not arrived), every survivor restoring the same versions."""
    faults = ["kill:rank=0,phase=complete", "kill:rank=3,phase=complete", "delay:src=2,dst=3,p=1,ms=150"]
    res, results = run_app(tmp_path, backend, 5, 2, faults, steps=20, extra=("stop", "finish"))
    working = _working(res, results)
    assert sorted(working) == list(range(5)) and all(r["ok"] for r in working.values()), results
    assert {working[k]["role"] for k in (0, 3)} == {"recovered"}
    versions = {tuple(rec["version"] for rec in r["recoveries"]) for r in working.values() if r["role"] == "survivor"}
    assert len(versions) == 1, versions
    assert all(v in (15, 20) for v in next(iter(versions))), versions


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_the_epilogue_starts_once_the_last_checkpoint_is_complete(tmp_path, backend: str) -> None:
    """Rank 2's copy for rank 3 is held back at every save, so rank 0's save of step 20 returns
    long before ranks 2 and 3 hold that version. Rank 0 dying on entering ``finish`` must still
    find step 20 held everywhere: every recovery restores it, and no step runs twice."""
    faults = ["kill:rank=0,phase=finish", "kill:rank=3,phase=finish", "delay:src=2,dst=3,p=1,ms=150"]
    res, results = run_app(tmp_path, backend, 5, 2, faults, steps=20, extra=("stop", "finish"))
    working = _working(res, results)
    assert sorted(working) == list(range(5)) and all(r["ok"] for r in working.values()), results
    assert {working[k]["role"] for k in (0, 3)} == {"recovered"}
    versions = {k: [rec["version"] for rec in r["recoveries"]] for k, r in working.items()}
    assert all(v and set(v) == {20} for v in versions.values()), versions
