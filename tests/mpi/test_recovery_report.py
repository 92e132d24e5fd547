"""What a ``Resilient`` program gets after each recovery, on one small real job (3 working ranks + 1
spare, rank 1 killed at step 12, checkpoints every 5 steps): the ``on_recovery`` callback on every
working rank, the merged ``recoveries`` of summary.json and ``--json``, the table on the console,
the role of the spare that took over (``planaria ps`` during the job, the end summary), and
``--plot``'s timeline; and a callback that raises."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpi.mpijob import SCRIPTS, root_env

pytestmark = pytest.mark.mpi

APP = SCRIPTS / "recovery_report_app.py"


def _run(home: Path, *args: str, spares: int = 1, mode: str = "ok") -> subprocess.CompletedProcess[str]:
    env = root_env()
    env["PLANARIA_HOME"] = str(home)
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "3", "--spares", str(spares), "--timeout", "60",
           "--inject", "kill:rank=1,iter=12", *args, "--", sys.executable, str(APP), "30", "5", mode]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env)


def _tagged(text: str, word: str) -> list[dict]:
    return [json.loads(line.split(f"{word} ", 1)[1]) for line in text.splitlines() if f"] {word} " in line]


@pytest.mark.timeout(120)
def test_callback_summary_table_role_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "timeline.png"
    res = _run(tmp_path, "--json", "--plot", str(png), mode="ps")
    assert res.returncode == 0, res.stderr[-3000:]
    # the callback ran once on every working rank after the recovery: the survivors 0 and 2 and the
    # spare (job rank 3) that took over logical rank 1, each told the same recovery
    calls = {c["world"]: c for c in _tagged(res.stderr, "CALLBACK")}
    assert sorted(calls) == [0, 2, 3], res.stderr[-3000:]
    for c in calls.values():
        assert (c["number"], c["lost"], c["replaced_by"], c["version"]) == (1, [1], [[1, 3]], 10), c
        assert c["total_s"] == pytest.approx(c["revoke_shrink_s"] + c["substitution_s"] + c["restore_s"])
        assert c["t_done"] >= c["t_detect"] and c["attempts"] == 1
    assert calls[0]["detected_at"] in (12, 13) and calls[3]["detected_at"] == -1
    assert (calls[3]["role"], calls[3]["logical"]) == ("recovered", 1)
    # ... and logical rank 0 then raised PLANARIA_EVENT_RECOVERED, which every rank's handler saw
    seen = {e["world"]: e for e in _tagged(res.stderr, "EVENT")}
    assert sorted(seen) == [0, 2, 3], res.stderr[-3000:]
    assert {(e["source"], e["number"], tuple(e["lost"]), e["version"]) for e in seen.values()} == {(0, 1, (1,), 10)}
    assert seen[3]["replaced_by"] == [[1, 3]] and seen[3]["affected"] == [3]
    # the records went to the controller at least TELL_AFTER s after each rank's first resumed step,
    # not while the other ranks may still be in it
    from planaria.recovery.driver import TELL_AFTER
    resumed = {r["world"]: r["t"] for r in _tagged(res.stderr, "RESUMED")}
    assert sorted(resumed) == [0, 2, 3], res.stderr[-3000:]
    (jobdir,) = list((tmp_path / "jobs").iterdir())
    told = {e["rank"]: e["t_recv"] for e in map(json.loads, (jobdir / "events.jsonl").read_text().splitlines())
            if e.get("type") == "recovery"}
    assert sorted(told) == [0, 2, 3], told
    assert all(told[w] - resumed[w] >= TELL_AFTER for w in resumed), (told, resumed)
    results = {r["world"]: r for r in _tagged(res.stderr, "RESULT")}
    assert all(r["ok"] for r in results.values()) and results[3]["role"] == "recovered", results

    # summary.json and --json: one merged entry, the phases the slowest rank's and their medians
    printed = json.loads(res.stdout)
    (job,) = list((tmp_path / "jobs").iterdir())
    summary = json.loads((job / "summary.json").read_text())
    assert printed["recoveries"] == summary["recoveries"]
    (rec,) = summary["recoveries"]
    assert (rec["number"], rec["lost"], rec["replaced_by"], rec["version"], rec["reported_by"]) == (1, [1], [[1, 3]],
                                                                                                     10, 3)
    assert rec["detected_at"] == min(c["detected_at"] for c in calls.values() if c["detected_at"] >= 0)
    assert rec["restore_s"] == max(c["restore_s"] for c in calls.values())
    assert rec["median"]["total_s"] == sorted(c["total_s"] for c in calls.values())[1]
    assert 0 < rec["detection_s"] < 5 and rec["t"] <= rec["t_end"] < summary["elapsed"]
    assert summary["checkpoints"]["count"] == 7            # versions 0, 5, ... 30 on each survivor
    assert summary["records"]["summary"] == str(job / "summary.json")
    rows = {r["rank"]: r for r in summary["ranks"]}
    assert (rows[3]["role"], rows[3]["logical"]) == ("recovered", 1)

    # planaria ps while the job ran, and the console at its end: the spare's new place
    ps = {ln.split()[3]: ln for ln in res.stderr.splitlines() if "] PS │" in ln and ln.split()[3].isdigit()}
    assert "spare→L1" in ps["3"] and "survivor" in ps["0"], res.stderr[-3000:]
    assert "spare→L1" in res.stderr[res.stderr.index("planaria job "):]
    table = res.stderr[res.stderr.index(f"1 recovery of job {job.name}"):]
    assert "revoke+" in table and "tries" in table and "checkpoints: 7 per rank" in table
    line = next(ln.split() for ln in table.splitlines() if ln.split()[:1] == ["1"] and len(ln.split()) == 11)
    assert line[:4] == ["1", "1", "3", str(rec["detected_at"])] and line[-2:] == ["10", "1"], line
    assert f"recoveries recorded in {job / 'summary.json'}" in res.stderr

    # --plot: a PNG, and the data behind it from the job record
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000
    from planaria.launch.timeline import job_timeline
    data = job_timeline(job)
    lanes = {ln["rank"]: ln for ln in data["ranks"]}
    assert sorted(lanes) == [0, 1, 2, 3] and data["recoveries"] == summary["recoveries"]
    assert lanes[1]["failed_at"] is not None and lanes[1]["failed_at"] < rec["t_end"]
    assert lanes[3]["role"] == "spare→L1" and lanes[3]["spare_until"] is not None
    assert [len(lanes[r]["recoveries"]) for r in (0, 1, 2, 3)] == [1, 0, 1, 1]
    phases = lanes[0]["recoveries"][0]["phases"]
    assert phases["revoke_shrink"][0] <= phases["substitution"][0] <= phases["restore"][0]
    assert [v for _, _, v in lanes[0]["checkpoints"]] == list(range(0, 31, 5))
    assert [v for _, _, v in lanes[3]["checkpoints"]] == list(range(15, 31, 5))   # from its takeover on
    assert lanes[3]["checkpoints"][0][0] >= lanes[3]["spare_until"]


@pytest.mark.timeout(120)
def test_a_raising_callback_stops_every_process_after_the_recovery(tmp_path: Path) -> None:
    res = _run(tmp_path, spares=2, mode="raise")
    assert res.returncode == 3, res.stderr[-3000:]
    stopped = sorted(int(ln.split("]")[0].lstrip("[").rstrip("!")) for ln in res.stderr.splitlines()
                     if "RecoveryCallbackFailed: on_recovery raised on logical rank(s) 0 after recovery 1: "
                        "ValueError: the callback's own bug" in ln and "planaria: rank" in ln)
    assert stopped == [0, 2, 3, 4], res.stderr[-3000:]      # the working ranks and the spare left
    assert "[0!] ValueError: the callback's own bug" in res.stderr          # its traceback, where it was raised
    (job,) = list((tmp_path / "jobs").iterdir())
    (rec,) = json.loads((job / "summary.json").read_text())["recoveries"]
    assert rec["replaced_by"] == [[1, 3]]


@pytest.mark.timeout(120)
def test_a_callback_on_one_rank_only_still_stops_every_process(tmp_path: Path) -> None:
    # the working ranks without a callback learn, in the recovery itself, that another rank has one,
    # and take part in the exchange that tells them it raised (none may resume alone)
    res = _run(tmp_path, mode="one")
    assert res.returncode == 3, res.stderr[-3000:]
    stopped = sorted(int(ln.split("]")[0].lstrip("[").rstrip("!")) for ln in res.stderr.splitlines()
                     if "RecoveryCallbackFailed: on_recovery raised on logical rank(s) 2 after recovery 1: "
                        "ValueError: the callback's own bug" in ln and "planaria: rank" in ln)
    assert stopped == [0, 2, 3], res.stderr[-3000:]
    assert not _tagged(res.stderr, "RESULT"), res.stderr[-3000:]       # no rank finished the run
