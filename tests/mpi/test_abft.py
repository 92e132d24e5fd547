"""`planaria abft` end to end on 4 workers + 2 masters: every fault kind ends in the serial result bit for bit."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.mpi.mpijob import REPO, mpiexec, root_env

pytestmark = [pytest.mark.mpi]

N = 4


def _dem(path: Path) -> Path:
    from planaria.terrain import Dem, write_dem
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:120, 0:80]
    z = 100 + 10 * np.sin(y / 9.0) + 5 * np.cos(x / 7.0) + rng.normal(0, 0.5, (120, 80))
    z[:, 40] = -9999.0          # a NoData column: every covered row sees NoData (wrong-NoData faults show)
    z[5, 5] = np.nan
    z[60:63, 20:22] = np.nan
    write_dem(path, Dem(z, nodata=-9999.0, cell_size=(10.0, 10.0)))
    return path


def _serial(dem: Path, kernel: str) -> np.ndarray:
    from planaria.terrain import kernels, read_dem
    d = read_dem(dem)
    return kernels[kernel][0](d.data, cell_size=d.cell_size, nodata=d.nodata)


def _abft(tmp: Path, kernel: str, *args: str, timeout: float = 100,
          out: Path | None = None) -> tuple[subprocess.CompletedProcess, dict, Path]:
    dem = tmp / "dem.npz"
    if not dem.exists():
        _dem(dem)
    out = out if out is not None else tmp / f"out-{kernel}.npz"
    out.unlink(missing_ok=True)
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp / "home")
    env["PYTHONPATH"] = str(REPO / "src")
    cmd = [sys.executable, "-m", "planaria.cli.main", "abft", kernel, "--dem", str(dem), "-n", str(N),
           "--out", str(out), "--json", "--timeout", "90", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
    report = json.loads(res.stdout[res.stdout.index("{"):]) if "{" in res.stdout else {}
    return res, report, out


def _assert_serial(tmp: Path, kernel: str, out: Path) -> None:
    from planaria.terrain import read_dem
    got = read_dem(out).data
    assert np.array_equal(got, _serial(tmp / "dem.npz", kernel), equal_nan=True)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernel", ["slope", "cutdepth"])
def test_clean_run_equals_serial(tmp_path, kernel: str) -> None:
    res, rep, out = _abft(tmp_path, kernel)
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["errors"] == [] and rep["recoveries"] == [] and rep["rounds"] == 1
    assert rep["replica_agreed"] is True
    assert rep["overhead"]["edge_rows_recomputed"] == 0   # every boundary matched: nothing for the masters to settle
    _assert_serial(tmp_path, kernel, out)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind,rank,kernel", [
    ("crash", 3, "slope"), ("silent", 2, "cutdepth"), ("nodata", 5, "slope"), ("readerror", 4, "cutdepth"),
    ("memory", 5, "slope"),
])
def test_forced_fault_is_located_and_recovered(tmp_path, kind: str, rank: int, kernel: str) -> None:
    res, rep, out = _abft(tmp_path, kernel, "--force", f"{kind}:{rank}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"]
    _assert_serial(tmp_path, kernel, out)
    blamed = {e["worker"]: e["status"] for e in rep["errors"] if e["round"] == 0}
    # the masters recompute an edge worker's covered row when its boundary cannot vouch for it
    # (rank 3 is worker 1: dead, it leaves boundary 0 without a verdict on worker 0)
    edge = {("crash", 3): 0, ("silent", 2): 0, ("nodata", 5): 3}.get((kind, rank))
    if edge is not None:
        assert edge in rep["overhead"]["edge_workers_recomputed"], rep["overhead"]
    if kind in ("silent", "nodata"):
        assert blamed.get(rank) == 1 and rank in rep["located"]
        assert {"action": "recompute", "block": rank - 2, "worker": rank} in \
            [{k: a[k] for k in ("action", "block", "worker")} for a in rep["recoveries"]]
    else:
        assert blamed == {rank: 0}
        acts = [(a["action"], a["block"]) for a in rep["recoveries"]]
        assert ("exclude", rank - 2) in acts and ("reassign", rank - 2) in acts
        assert rep["final_owners"][str(rank - 2)] != rank


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernel,seed", [("slope", 7), ("cutdepth", 3)])
def test_random_faults_end_correct(tmp_path, kernel: str, seed: int) -> None:
    res, rep, out = _abft(tmp_path, kernel, "--error-rate", "0.2", "--seed", str(seed))
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["errors"]  # these seeds give 1 (seed 7) and 3 (seed 3) faulty workers
    _assert_serial(tmp_path, kernel, out)


@pytest.mark.timeout(120)
def test_replica_takes_over_when_primary_dies(tmp_path) -> None:
    res, rep, out = _abft(tmp_path, "slope", "--inject", "kill:rank=0,iter=11", "--force", "silent:3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["finisher"] == "replica" and rep.get("takeover") is True
    _assert_serial(tmp_path, "slope", out)


@pytest.mark.timeout(60)
def test_bad_options_exit_2(tmp_path) -> None:
    res, _, _ = _abft(tmp_path, "slope", "--error-rate", "3")
    assert res.returncode == 2 and "--error-rate" in res.stderr
    res, _, _ = _abft(tmp_path, "slope", "--force", "crash:9")
    assert res.returncode == 2 and "--force" in res.stderr
    for out, problem in (("out.txt", "unsupported DEM format '.txt'"), ("missing-dir/out.npy", f"directory {tmp_path / 'missing-dir'} does not exist")):
        res, _, _ = _abft(tmp_path, "slope", out=tmp_path / out)
        assert res.returncode == 2, res.stderr[-3000:]
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"planaria abft: {tmp_path / out}: {problem}"), res.stderr
    assert not (tmp_path / "missing-dir").exists()


@pytest.mark.timeout(120)
def test_plain_mode_on_geotiff_equals_serial(tmp_path) -> None:
    """Plain mode (no check rows) on a GeoTIFF: windowed reads, streamed GeoTIFF output, same raster."""
    pytest.importorskip("rasterio")
    from planaria.terrain import Dem, read_dem, write_dem
    d = read_dem(_dem(tmp_path / "dem.npz"))
    write_dem(tmp_path / "dem.tif", Dem(d.data.astype(np.float32), d.nodata, d.cell_size))
    out = tmp_path / "plain.tif"
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(REPO / "src")
    cmd = [sys.executable, "-m", "planaria.cli.main", "abft", "slope", "--dem", str(tmp_path / "dem.tif"), "-n", str(N),
           "--out", str(out), "--json", "--timeout", "90", "--mode", "plain"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = json.loads(res.stdout[res.stdout.index("{"):])
    assert rep["mode"] == "plain" and rep["overhead"]["verification_rows"] == 0 and rep["overhead"]["edge_rows_recomputed"] == 0
    got = read_dem(out)
    src = read_dem(tmp_path / "dem.tif")
    assert got.cell_size == src.cell_size and got.nodata == src.nodata
    assert np.array_equal(got.data, _serial(tmp_path / "dem.tif", "slope"), equal_nan=True)
    assert not list(tmp_path.glob("*.parts"))


@pytest.mark.timeout(120)
def test_duplicate_mode_detects_a_silent_fault_and_equals_serial(tmp_path) -> None:
    res, rep, out = _abft(tmp_path, "cutdepth", "--mode", "duplicate", "--force", "silent:4")
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["mode"] == "duplicate" and rep["overhead"]["tasks"] == 2 * N
    # worker 4 computes block 2 (task 2) and block 1's second copy (task N+1); its first task is faulty
    first = {e["block"] for e in rep["errors"] if e["round"] == 0}
    assert first == {2, N + 2} and all(e["status"] == 1 for e in rep["errors"])
    _assert_serial(tmp_path, "cutdepth", out)


@pytest.mark.timeout(120)
def test_bench_reports_cpu_per_rank_and_none_for_a_dead_worker(tmp_path) -> None:
    """--bench: every rank's CPU seconds of the timed region; a crashed worker is None and the sums are withheld."""
    dem = _dem(tmp_path / "dem.npz")
    report = tmp_path / "report.json"
    for force in ([], ["--force", "crash:3"]):
        report.unlink(missing_ok=True)
        res = mpiexec(N + 2, ["-m", "planaria.abft.runtime", "--kernel", "slope", "--dem", str(dem),
                              "--out", str(tmp_path / "out.npz"), "--bench", "--report", str(report),
                              "--backend", "ulfm", *force], ft=True, env={"PYTHONPATH": str(REPO / "src")}, timeout=90)
        assert report.is_file(), res.err[-3000:]
        rep = json.loads(report.read_text())
        assert rep["ok"], rep
        cpu = rep["timings"]["cpu"]
        per = cpu["per_rank"]
        assert len(per) == N + 2
        if not force:
            assert all(c > 0 for c in per), cpu
            assert cpu["total"] == pytest.approx(sum(per)) and cpu["total"] >= cpu["workers_max"] > 0
            assert cpu["masters"] == pytest.approx(per[0] + per[1])
        else:
            assert per[3] is None and all(c > 0 for i, c in enumerate(per) if i != 3), cpu
            assert cpu["total"] is None and cpu["workers_max"] is None and cpu["masters"] > 0

