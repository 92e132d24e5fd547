"""Smoke test of ``python -m benchmarks``: tiny runs of the MPI benchmarks through its typer app."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from benchmarks.cli import app

pytestmark = pytest.mark.mpi


def _invoke(args: list[str]) -> dict:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_bench_overhead_rejects_an_unknown_call() -> None:
    from benchmarks import overhead
    with pytest.raises(ValueError, match="unknown call 'Nope'"):
        overhead.run([2], ["ulfm"], calls="Scan,Nope")
    with pytest.raises(ValueError, match="unknown case 'Bcast_1MiB' for --only"):
        overhead.run([2], ["ulfm"], calls="Scan", only="pingpong_8B,Bcast_1MiB")


@pytest.mark.timeout(120)
def test_bench_overhead_tiny() -> None:
    out = _invoke(["overhead", "--ranks", "2", "--backend", "ulfm,sim", "--iters", "20", "--sr-iters", "2",
                   "--blocks", "6", "--calls", "Scan,Ssend_Recv,Neighbor_alltoall", "--json"])
    assert out["benchmark"] == "overhead"
    cases = {(r["backend"], r["case"]) for r in out["rows"]}
    objects = [f"{c}_obj" for c in ("allreduce", "bcast", "allgather", "gather", "scatter", "alltoall")]
    assert cases == {(b, c) for b in ("ulfm", "sim") for c in ("allreduce_8B", "sendrecv_1MiB", "pingpong_8B",
                                                               "Scan_1MiB", "Ssend_Recv_1MiB", "Neighbor_alltoall_1MiB",
                                                               *objects)}
    for r in out["rows"]:
        assert r["ranks"] == 2
        for k in ("raw_ns_median", "planaria_ns_median", "ratio", "paired_ratio_median"):
            assert r[k] > 0, (k, r)
        if r["case"] in objects:
            assert r["goal"] is None                # the object forms on a small value: no goal
        elif r["backend"] == "ulfm":
            assert r["goal"] == (1.05 if r["case"].endswith("_1MiB") and r["case"] != "sendrecv_1MiB" else r["goal"])
            assert r["goal"] > 0 and isinstance(r["goal_met"], bool)
        else:
            assert r["goal"] is None


@pytest.mark.timeout(120)
def test_bench_failure_sim_4_ranks() -> None:
    out = _invoke(["failure", "--ranks", "4", "--backend", "sim", "--repeat", "1", "--json"])
    assert out["benchmark"] == "failure" and out["backend"] == "sim"
    (row,) = out["rows"]
    assert row["ranks"] == 4 and row["jobs"] == 1
    for k in ("detect_ms_median", "detect_ms_max", "recover_ms_median", "recover_ms_max",
              "kill_to_shrunk_ms_max", "launch_s_median"):
        assert row[k] > 0, (k, row)
    assert row["detect_ms_max"] >= row["detect_ms_median"]
    (job,) = row["runs"]
    assert job["survivors"] == 3 and job["new_size"] == 3
    assert sum(row["first_errors"].values()) == 3
    assert len(job["per_rank"]) == 3


@pytest.mark.timeout(120)
def test_bench_checkpoint_tiny() -> None:
    out = _invoke(["checkpoint", "--ranks", "4", "--sizes", "0.25", "--stores", "memory,xor,file",
                   "--reps", "1", "--warmup", "1", "--json"])
    assert out["benchmark"] == "checkpoint" and out["ranks"] == 4 and out["backend"] == "ulfm"
    assert {r["store"] for r in out["rows"]} == {"memory", "xor", "file"}
    assert len(out["load_before"]) == 3 and len(out["load_after"]) == 3
    for r in out["rows"]:
        assert r["size_mb"] == 0.25 and r["bit_exact"], r
        for k in ("save_s", "save_floor_s", "save_ratio", "restore_lost_s", "restore_all_s", "restore_floor_s",
                  "restore_ratio"):
            assert r[k] > 0, (k, r)
        assert r["save_ratio"] == pytest.approx(r["save_s"] / r["save_floor_s"])
        assert r["restore_ratio"] == pytest.approx(r["restore_lost_s"] / r["restore_floor_s"])
        assert r["restore_goal"] == 1.25 and isinstance(r["restore_goal_met"], bool)
        # the save goal applies to the memory stores from 32 MB on, to files at every size
        assert (r["save_goal"] is None) == (r["store"] != "file") and isinstance(r["save_goal_met"], (bool, type(None)))
        assert r["save_phases"] and r["save_floor_phases"] and r["restore_phases"] and r["restore_floor_phases"]
        names = [p[0] for p in r["breakdown"]["save"]]
        assert set(r["save_phases"]) <= set(names) and set(r["save_floor_phases"]) <= set(names)
        assert len(r["load_before"]) == 3
    forms = {r["store"]: r for r in out["rows"]}
    assert set(forms["xor"]["save_floor_forms"]) == {"collective", "p2p"}
    assert forms["file"]["save_floor_form"] == "overwrite" and set(forms["file"]["save_floor_forms"]) == {"overwrite", "new"}
    assert forms["file"]["restore_floor_form"] == "all" and set(forms["file"]["restore_floor_forms"]) == {"all", "alone"}
    assert {(g["store"], g["what"]) for g in out["goals"]} == {("memory", "restore"), ("xor", "restore"),
                                                              ("file", "save"), ("file", "restore")}
    assert out["all_met"] == all(g["met"] for g in out["goals"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend, store", [("ulfm", "memory"), ("sim", "memory"), ("ulfm", "file")])
def test_bench_recovery_tiny(backend: str, store: str) -> None:
    # 10 steps: the file store has deleted the version it restored (2) by the time the floor is measured
    out = _invoke(["recovery", "--ranks", "3", "--spares", "1", "--mb", "0.25", "--store", store,
                   "--repeat", "1", "--backend", backend, "--every", "2", "--kill-step", "3", "--steps", "10",
                   "--json"])
    assert out["benchmark"] == "recovery" and out["processes"] == 4
    assert out["all_ok"] and out["replaced"]
    (job,) = out["jobs"]
    assert job["ranks"] == 3 and job["version"] == 2 and job["steps_redone"] == 1
    assert len(job["per_rank"]) == 3
    assert sorted(p["role"] for p in job["per_rank"]) == ["recovered", "survivor", "survivor"]
    s = out["summary"]
    for k in ("detect_ms_median", "revoke_shrink_ms_max", "restore_ms_max", "kill_to_resumed_ms_max",
              "memcpy_GBps", "restore_lost_GBps"):
        assert s[k] > 0, (k, s)
    assert s["kill_to_resumed_ms_max"] >= s["kill_to_resumed_ms_median"]
    assert isinstance(out["goal"]["met"], bool)
    assert job["restore_floor_ms"] > 0 and job["goal"]["limit_ms"] > job["detect_survivors_ms_max"]


@pytest.mark.timeout(120)
def test_bench_recovery_with_detection_paused() -> None:
    from benchmarks import recovery
    with pytest.raises(ValueError, match="--detection-paused needs --launcher run"):
        recovery.run(3, 1, 0.25, launcher="mpiexec", detection_paused=True)
    out = _invoke(["recovery", "--ranks", "3", "--spares", "1", "--mb", "0.25", "--repeat", "1", "--every", "2",
                   "--kill-step", "3", "--steps", "10", "--detection-paused", "--json"])
    assert out["detection_paused"] is True and out["all_ok"] and out["replaced"]


@pytest.mark.timeout(120)
def test_bench_start_tiny() -> None:
    out = _invoke(["start", "--ranks", "2", "--repeat", "1", "--json"])
    assert out["benchmark"] == "start" and out["ranks"] == 2
    for mode in ("raw", "planaria"):
        m = out["median"][mode]
        assert 0 < m["ready_s"] <= m["wall_s"] and m["rank_cpu_s"] > 0, (mode, m)
        # the last rank past MPI init, then the rest of the way to the last communicator
        assert m["ready_s"] == pytest.approx(m["mpi_ready_s"] + m["after_mpi_s"]), (mode, m)
        assert m["after_mpi_s"] >= 0 and m["world_wall_s"] >= 0, (mode, m)
    assert out["ratio_ready"] == out["median"]["planaria"]["ready_s"] / out["median"]["raw"]["ready_s"]
    with pytest.raises(ValueError, match="--repeat must be at least 1"):
        from benchmarks import start
        start.run(2, 0, 10.0)
