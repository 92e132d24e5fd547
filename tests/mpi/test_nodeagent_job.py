"""``planaria run --node-agents``: a real ULFM job whose ranks reach the controller through the
node agent their host's first rank started (planaria.runtime.nodelink)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpi.mpijob import SCRIPTS, root_env

pytestmark = [pytest.mark.mpi]


@pytest.mark.timeout(90)
def test_a_resilient_job_through_node_agents(tmp_path: Path) -> None:
    """A rank killed, its spare takes over: the failure event reaches every survivor through the
    node agent, the table has every rank, and the node agent ends with the job."""
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path)
    env["PLANARIA_FINALIZE_TIMEOUT"] = "3"
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "run", "-n", "3", "--spares", "1",
                          "--timeout", "50", "--node-agents", "--inject", "kill:rank=1,iter=10", "--",
                          sys.executable, str(SCRIPTS / "events_app.py"), "resilient", "40"],
                         capture_output=True, text=True, timeout=80, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    out = [json.loads(ln.split("RESULT ", 1)[1]) for ln in res.stdout.splitlines() if "RESULT " in ln]
    working = [r for r in out if r["logical"] is not None]
    assert sorted(r["logical"] for r in working) == [0, 1, 2], out
    for r in working:
        assert ["PMIX_ERR_PROC_ABORTED_BY_SIG", [1]] in r["events"], r
    (jd,) = (tmp_path / "jobs").iterdir()
    evs = [json.loads(x) for x in (jd / "events.jsonl").read_text().splitlines() if x.strip()]
    assert [e["node"] for e in evs if e["type"] == "node-hello"] == [socket.gethostname()]
    assert sorted(e["rank"] for e in evs if e["type"] == "hello") == [0, 1, 2, 3]
    summary = json.loads((jd / "summary.json").read_text())
    assert [r["rank"] for r in summary["ranks"] if r["state"] == "failed"] == [1], summary["ranks"]
    left = subprocess.run(["pgrep", "-f", "--", f"nodeagent .*--secret-file {jd / 'secret'}"],
                          capture_output=True, text=True, timeout=10)
    assert left.returncode == 1, f"node agent still running: {left.stdout}{left.stderr}"   # 1: none found


@pytest.mark.timeout(120)
def test_a_hang_is_diagnosed_through_the_node_agents(tmp_path: Path) -> None:
    """With node agents the global diagnosis asks every rank through its node agent (the control
    plane's routes, not each rank's own endpoint), and the first root cause is still right."""
    from benchmarks import diagnose_accuracy as da
    corpus = Path(__file__).resolve().parents[1] / "diagnosis_corpus"
    (case,) = [c for c in da.load_cases(corpus) if c.name == "deadlock_ring3"]
    row = da.run_case(case, "ulfm", corpus, timeout=15.0, home=tmp_path, grace=25, run_args=["--node-agents"])
    assert row["result"] == "right", row
    job = Path(row["job"])
    states = sorted(job.glob("diag-*.state"))
    assert states, "no diagnosis was written"
    from planaria.diagnose.state import read_state
    coll = read_state(states[0]).get("collect") or {}
    assert coll.get("behind_nodes") == case.n and coll.get("direct") == 0, coll
    assert coll["nodes"]["nodes"] == 1 and coll["nodes"]["answered"] == 1, coll
