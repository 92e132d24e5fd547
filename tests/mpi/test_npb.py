"""NPB-like kernels and the detection on/off driver in real mpiexec jobs (class S, a few seconds each)."""
from __future__ import annotations

import json
import math

import pytest

from benchmarks import detect, npb
from tests.mpi.mpijob import mpiexec

pytestmark = [pytest.mark.mpi]

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def _result(res) -> dict:
    lines = res.lines("RESULT ")
    assert len(lines) == 1, f"exit {res.code}\n--- stdout\n{res.out}\n--- stderr\n{res.err[-3000:]}"
    return json.loads(lines[0][len("RESULT "):])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("nprocs,backend", [(4, "ulfm"), (2, "sim")])
def test_every_kernel_verifies_at_class_s(nprocs: int, backend: str) -> None:
    """One job runs all six kernels in sequence; each passes its own checks and the serial comparison."""
    res = mpiexec(nprocs, ["-m", "benchmarks.npb", "--kernel", "all", "--class", "S", "--backend", backend],
                  ft=(backend == "ulfm"), env={**ONE_THREAD, "PLANARIA_DETECT": "0"}, timeout=75)
    out = _result(res)
    assert res.code == 0, res.err[-3000:]
    assert out["ranks"] == nprocs and out["class"] == "S" and out["detect_env"] == "0"
    assert [k["kernel"] for k in out["kernels"]] == list(npb.KERNELS)
    for k in out["kernels"]:
        assert k["verified"], k
        assert k["time_s"] > 0 and k["calls_per_rank"] >= 1, k
        assert k["serial_checked"] is True
        checks = {name: v for name, v in k["detail"].items() if name.endswith("_match")}
        assert all(checks.values()), k
        if k["kernel"] not in ("is",):          # IS is checked by global order and key multiset instead
            assert checks, k
        if k["kernel"] == "ep":
            batches = (1 << k["params"]["m"]) // k["params"]["batch"]
            assert k["iters"] == len(range(0, batches, nprocs)), k       # rank 0's share, dealt round-robin
        else:
            assert k["iters"] == k["params"].get("niter", k["params"].get("cycles")), k


@pytest.mark.timeout(60)
def test_npb_rejects_a_rank_count_mg_cannot_use() -> None:
    res = mpiexec(3, ["-m", "benchmarks.npb", "--kernel", "mg", "--class", "S", "--backend", "ulfm"],
                  ft=True, env=ONE_THREAD, timeout=45)
    assert res.code == 2
    assert "mg class S" in res.err and "3 ranks" in res.err
    assert not res.lines("RESULT ")


@pytest.mark.timeout(120)
def test_detect_driver_pairs_launches_off_and_on() -> None:
    """Two kernels, two pairs each: launches alternate off,on / on,off and each saw its PLANARIA_DETECT."""
    out = detect.run(["halo", "ep"], ranks=2, klass="S", pairs=2, backend="ulfm", timeout=60)
    assert out["benchmark"] == "detect" and out["kernels"] == ["halo", "ep"]
    assert [(ln["pair"], ln["mode"]) for ln in out["launches"] if ln["kernel"] == "halo"] == \
        [(0, "off"), (0, "on"), (1, "on"), (1, "off")]
    for row in out["rows"]:
        mine = [ln for ln in out["launches"] if ln["kernel"] == row["kernel"]]
        assert len(mine) == 4 and all(ln["time_s"] > 0 for ln in mine)
        expect = sorted(next(a["time_s"] for a in mine if a["pair"] == i and a["mode"] == "on")
                        / next(a["time_s"] for a in mine if a["pair"] == i and a["mode"] == "off") for i in (0, 1))
        assert sorted(row["pair_ratios"]) == pytest.approx(expect)
        assert row["ratio_median"] == pytest.approx(sum(expect) / 2)
    assert out["overall"]["pairs"] == 4


@pytest.mark.timeout(120)
def test_detect_within_one_job_times_blocks_in_abba_order() -> None:
    """--within-job: one launch per kernel, blocks of iterations alternate off,on / on,off, every run verified."""
    out = detect.run(["halo"], ranks=2, klass="S", pairs=6, backend="ulfm", timeout=60, within=True, block_s=0.002)
    assert out["within_job"] is True and "launches" not in out
    assert [(b["pair"], b["mode"]) for b in out["blocks"]] == detect.schedule(6)
    assert all(b["time_s"] > 0 for b in out["blocks"])
    job = out["jobs"][0]
    assert job["warmup"]["verified"] and all(r["verified"] for r in job["runs"])
    assert sum(r["blocks"] for r in job["runs"]) == 12 and job["every"] >= 1
    row = out["rows"][0]
    assert len(row["pair_ratios"]) == 6 and row["ci_low"] <= row["ratio_median"] <= row["ci_high"]
    assert row["verdict"] in detect.VERDICTS


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("part", "title"), [("log", "message log off"), ("none", "A/A control")])
def test_detect_within_can_switch_one_part(part: str, title: str) -> None:
    """--within-job --part log: the blocks switch the message log only (none: nothing, the A/A
    control); the job reports what it switched."""
    out = detect.run(["halo"], ranks=2, klass="S", pairs=3, backend="ulfm", timeout=60, within=True,
                     block_s=0.002, part=part)
    assert out["part"] == part
    assert [(b["pair"], b["mode"]) for b in out["blocks"]] == detect.schedule(3)
    assert all(r["verified"] for r in out["jobs"][0]["runs"])
    assert title in detect.table(out).title


@pytest.mark.timeout(120)
def test_detect_within_pools_separate_jobs() -> None:
    """--within-job --jobs 2: two launches of the kernel, each timed and verified, pooled with the job as unit."""
    out = detect.run(["halo"], ranks=2, klass="S", pairs=4, backend="ulfm", timeout=60, within=True,
                     block_s=0.002, jobs=2)
    assert out["jobs_per_kernel"] == 2 and [j["job"] for j in out["jobs"]] == [0, 1]
    for n, job in enumerate(out["jobs"]):
        assert job["warmup"]["verified"] and all(r["verified"] for r in job["runs"])
        assert [(b["pair"], b["mode"]) for b in out["blocks"] if b["job"] == n] == detect.schedule(4)
    row = out["rows"][0]
    assert row["jobs"] == 2 and row["pairs"] == 8 and len(row["per_job"]) == 2
    assert sorted(row["pair_ratios"]) == sorted(r for j in row["per_job"] for r in j["pair_ratios"])
    assert row["ci_low"] <= row["ratio_median"] <= row["ci_high"]
    assert row["verdict"] == detect.verdict(row["ratio_median"], row["ci_high"], 8, jobs=2)


@pytest.mark.timeout(150)
def test_note_cost_times_both_notes_inside_the_kernel_under_planaria_run() -> None:
    """--note-cost: one job per note under planaria run, the flight record kept, each note timed in
    the kernel and in a loop; the C note where planaria run could build it, else the Python one twice."""
    from benchmarks import flightcost
    from planaria.comm import flight
    built = flight.note_build() is not None         # as a first job on this machine leaves it
    out = flightcost.run(["cg"], ranks=2, klass="S", pairs=1, backend="ulfm", timeout=60)
    assert [r["note"] for r in out["rows"]] == (["c", "python"] if built else ["python", "python"])
    for r in out["rows"]:
        assert r["kernel"] == "cg" and r["notes_per_s"] > 0 and r["ns_in_kernel_max"] >= r["ns_in_kernel"]
        assert all(math.isfinite(r[k]) for k in ("ns_in_kernel", "ns_hot", "share_of_rank_time"))
    # the Python note costs hundreds of ns even in a loop: above the clock's noise on a loaded machine
    # (the C note's tens of ns are not)
    py = out["rows"][-1]
    assert py["note"] == "python" and py["ns_hot"] > 0 and 0 < py["share_of_rank_time"] < 1


def test_note_cost_rejects_bad_options() -> None:
    from benchmarks import flightcost
    with pytest.raises(ValueError, match="pairs must be >= 1"):
        flightcost.run(["cg"], ranks=2, klass="S", pairs=0)
    with pytest.raises(ValueError):
        flightcost.run(["nope"], ranks=2, klass="S")
