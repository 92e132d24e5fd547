"""``planaria checkpoints`` on the job directory of a real ``planaria run`` job with ``Resilient`` and a
two-level store (partner memory at every checkpoint, files at every 2nd), and on the store directory
after a second job resumed from it: the levels count checkpoints the same way across the restart."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planaria.checkpoint.file import rank_file_name, vdir_name

pytestmark = pytest.mark.mpi

SCRIPTS = Path(__file__).parent / "scripts"
STEPS, EVERY = 24, 4          # checkpoints 0..6 at steps 0, 4, ... 24: the file level takes 0, 8, 16, 24


def _done(run: subprocess.CompletedProcess[str]) -> dict:
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(next(ln for ln in run.stdout.splitlines() if "DONE " in ln).split("DONE ", 1)[1])


def _planaria(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PLANARIA_HOME=str(home), COLUMNS="200")
    env.pop("PLANARIA_CONTROL_URI", None)
    return subprocess.run([sys.executable, "-m", "planaria.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.timeout(120)
def test_checkpoints_of_a_resilient_job(tmp_path):
    run = _planaria(tmp_path, "run", "-n", "2", "--timeout", "60", "--", sys.executable,
                    str(SCRIPTS / "ckpt_inventory_app.py"), str(STEPS), str(EVERY))
    done = _done(run)
    assert done["file_versions"] == [8, 16, 24] and done["resumed_from"] is None   # every 2nd checkpoint
    (job,) = list((tmp_path / "jobs").iterdir())

    res = _planaria(tmp_path, "checkpoints", job.name, "--verify", "--json")
    assert res.returncode == 0, res.stderr
    inv = json.loads(res.stdout)
    assert inv["job"] == job.name and inv["verified"] and inv["nranks"] == 2
    assert inv["restart"] == {"version": 24, "directory": str(job / "checkpoints"), "damaged_choice": False,
                              "unverified_choice": 24}
    (store,) = inv["stores"]
    assert store["multilevel"]["spacing"] == EVERY and store["multilevel"]["this"] == 2
    assert [(lv["kind"], lv["every"]) for lv in store["multilevel"]["levels"]] == [("memory", 1), ("file", 2)]
    assert [v["version"] for v in inv["versions"]] == [8, 16, 24]
    for v in inv["versions"]:
        assert v["complete"] and v["status"] == "complete" and v["level"] == 2 and v["nranks"] == 2
        sizes = [r["size"] for r in v["ranks"]]
        assert sizes[1] > sizes[0] and v["total_bytes"] == sum(sizes)
        assert [(r["rank"], r["status"], r["checksum_kind"]) for r in v["ranks"]] == [(0, "ok", "crc32"), (1, "ok", "crc32")]

    table = _planaria(tmp_path, "checkpoints", str(job))
    assert table.returncode == 0, table.stderr
    assert "level 1 (memory, every checkpoint) lives in the processes' memory: not visible on disk" in table.stdout
    assert "2: file, every 2nd" in table.stdout and "← restart" in table.stdout
    assert "a restart resumes from version 24" in table.stdout

    # a second job resumes from the first one's files and goes on to step 40: checkpoints 7..10
    again = _done(_planaria(tmp_path, "run", "-n", "2", "--timeout", "60", "--", sys.executable,
                            str(SCRIPTS / "ckpt_inventory_app.py"), "40", str(EVERY), str(job / "checkpoints")))
    assert again == {"file_versions": [24, 32, 40], "resumed_from": 24}
    res = _planaria(tmp_path, "checkpoints", str(job / "checkpoints"), "--json")
    assert res.returncode == 0, res.stderr
    inv = json.loads(res.stdout)
    assert inv["job"] is None and inv["nranks"] is None and not inv["verified"]
    assert [(v["version"], v["status"]) for v in inv["versions"]] == [(24, "complete"), (32, "complete"), (40, "complete")]
    assert inv["restart"]["version"] == 40

    path = job / "checkpoints" / vdir_name(40) / rank_file_name(1)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    bad = _planaria(tmp_path, "checkpoints", str(job), "--verify")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "version 40: rank 1 (rank00001.bin): crc32 checksum differs" in bad.stdout
    assert "a restart resumes from version 32" in bad.stdout
