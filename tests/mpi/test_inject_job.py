"""Every fault kind of the plan language, acting in real jobs under `planaria run`."""
from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from tests.mpi.mpijob import SCRIPTS, root_env

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


def run(tmp_path, kind: str, spec: str, backend: str = "ulfm", timeout: int = 60):
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", "2", "--backend", backend,
           "--inject", spec, "--timeout", str(timeout), "--", sys.executable, str(SCRIPTS / "inject_kinds.py"), kind]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30, env=env)


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_bitflip_changes_one_element(tmp_path, backend: str) -> None:
    res = run(tmp_path, "bitflip", "bitflip:rank=1,array=a,iter=3,index=7,bit=62", backend)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "SEEN changed=1" in res.stdout


def test_ioerror_hits_only_the_named_rank(tmp_path) -> None:
    res = run(tmp_path, "ioerror", "ioerror:rank=1,iter=0,path=planaria-io-*")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "SEEN rank=0 io=ok" in res.stdout and "SEEN rank=1 io=errno5" in res.stdout


@pytest.mark.parametrize("backend", ["ulfm", "sim"])
def test_drop_loses_messages(tmp_path, backend: str) -> None:
    res = run(tmp_path, "drop", "drop:src=0,dst=1,p=0.5,seed=4", backend)
    assert res.returncode == 0, res.stderr[-2000:]
    got = int(re.search(r"SEEN received=(\d+)", res.stdout).group(1))
    assert 0 < got < 10


def test_delay_slows_messages(tmp_path) -> None:
    res = run(tmp_path, "delay", "delay:src=0,dst=1,p=1,ms=50")
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r"SEEN received=(\d+) elapsed=([\d.]+)", res.stdout)
    assert int(m.group(1)) == 10 and float(m.group(2)) >= 0.5


def test_hang_keeps_the_rank_alive_until_the_timeout(tmp_path) -> None:
    t = time.time()
    res = run(tmp_path, "hang", "hang:rank=1,iter=20", timeout=8)
    assert res.returncode == 124, res.stderr[-2000:]
    assert time.time() - t < 30
    assert "injected hang at iteration 20" in res.stderr or "hang" in res.stderr.lower()
    # the diagnosis made before the timeout's kill names the planned hang as the cause, not the program
    import json
    (job,) = list((tmp_path / "jobs").iterdir())
    first = json.loads((job / "diag-1.json").read_text())["root_causes"][0]
    assert first["kind"] == "injected" and first["rank_list"] == [1], first
    assert "injected hang at iteration 20" in first["reason"]
