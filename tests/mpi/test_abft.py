"""`planaria abft` end to end on 4 workers + 2 masters: every fault kind ends in the serial result bit for bit."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planaria.util.env import PLANARIA_TERRAIN_KERNELS
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
          out: Path | None = None, job_timeout: float = 90,
          env_extra: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict, Path]:
    dem = tmp / "dem.npz"
    if not dem.exists():
        _dem(dem)
    out = out if out is not None else tmp / f"out-{kernel}.npz"
    out.unlink(missing_ok=True)
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp / "home")
    env["PYTHONPATH"] = str(REPO / "src")
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "planaria.cli.main", "abft", kernel, "--dem", str(dem), "-n", str(N),
           "--out", str(out), "--json", "--timeout", str(job_timeout), *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
    report = json.loads(res.stdout[res.stdout.index("{"):]) if "{" in res.stdout else {}
    return res, report, out


def _values_digest(out: Path) -> str:
    """The report's digest, recomputed from the output file's values."""
    import hashlib
    from planaria.terrain import read_dem
    a = np.ascontiguousarray(read_dem(out).data, dtype=np.float64)
    h = hashlib.blake2b(digest_size=16)
    h.update(a.dtype.str.encode())
    h.update(repr(tuple(a.shape)).encode())
    h.update(a.tobytes())
    return h.hexdigest()


def _assert_serial(tmp: Path, kernel: str, out: Path) -> None:
    from planaria.terrain import read_dem
    got = read_dem(out).data
    assert np.array_equal(got, _serial(tmp / "dem.npz", kernel), equal_nan=True)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernel", ["slope", "cutdepth"])
def test_clean_run_equals_serial(tmp_path, kernel: str) -> None:
    """With the compiled kernels forced: on this small DEM the other runs use the numpy ones."""
    res, rep, out = _abft(tmp_path, kernel, env_extra={PLANARIA_TERRAIN_KERNELS: "compiled"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["errors"] == [] and rep["recoveries"] == [] and rep["rounds"] == 1
    assert rep["replica_agreed"] is True
    assert rep["overhead"]["referee_rows"] == N - 1 and rep["overhead"]["referee_rows_recomputed"] == []
    assert rep["injected"] == [] and rep["conflicts"] == [] and rep["verified"] is True
    _assert_serial(tmp_path, kernel, out)
    assert rep["digest"] == _values_digest(out)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind,worker,kernel", [
    ("crash", 1, "slope"), ("silent", 0, "cutdepth"), ("nodata", 3, "slope"), ("readerror", 2, "cutdepth"),
    ("memory", 3, "slope"),
])
def test_forced_fault_is_located_and_recovered(tmp_path, kind: str, worker: int, kernel: str) -> None:
    png = tmp_path / "errors.png"
    plot = ["--plot", str(png)] if kind == "silent" else []     # one picture drawn: the rest check its data
    res, rep, out = _abft(tmp_path, kernel, "--force", f"{kind}:{worker}", *plot)   # a worker index, not an MPI rank
    rank = worker + 2
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"]
    _assert_serial(tmp_path, kernel, out)
    _assert_picture_data(json.loads(Path(f"{out}.abft.json").read_text()), kind, worker)
    if plot:
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, len(data)
        assert f"plot written to {png}" in res.stderr
    assert [(f["kind"], f["worker"], f["rank"]) for f in rep["injected"]] == [(kind, worker, rank)]
    blamed = {e["worker"]: e["status"] for e in rep["errors"] if e["round"] == 0}
    if kind in ("silent", "nodata"):
        assert blamed.get(rank) == 1 and rank in rep["located"]
        assert {"action": "recompute", "block": rank - 2, "worker": rank} in \
            [{k: a[k] for k in ("action", "block", "worker")} for a in rep["recoveries"]]
    else:
        assert blamed == {rank: 0}
        acts = [(a["action"], a["block"]) for a in rep["recoveries"]]
        assert ("exclude", rank - 2) in acts and ("reassign", rank - 2) in acts
        assert rep["final_owners"][str(rank - 2)] != rank


def _assert_picture_data(sidecar: dict, kind: str, worker: int) -> None:
    """``--plot``'s content, from the run's report: the located cell is the injected one, the
    recovered block's rows are the faulty worker's block."""
    from planaria.abft.plotdata import plot_data
    data = plot_data(sidecar)
    rank, (r0, r1) = worker + 2, sidecar["blocks"][worker]
    bands = sorted((b.kind, b.block, b.r0, b.r1) for b in data.bands)
    if kind == "silent":
        where = sidecar["injected"][0]["where"]
        assert [(m.row, m.cols, m.worker, m.copy) for m in data.marks] == \
            [(where["row"], (where["col"],), rank, where["copy"])]
        assert data.injected == [(where["row"], where["col"], rank)]
        assert bands == [("recomputed", worker, r0, r1)]
        assert "1 located error(s), 0 failed block(s), 1 block(s) recovered; verified" in data.title
    elif kind == "nodata":
        assert data.marks and {m.worker for m in data.marks} == {rank} and data.injected == []
        assert {m.row for m in data.marks} <= {r0, r1} and bands == [("recomputed", worker, r0, r1)]
    else:
        assert data.marks == [] and bands == [("failed", worker, r0, r1), ("reassigned", worker, r0, r1)]
        assert "0 located error(s), 1 failed block(s), 1 block(s) recovered" in data.title


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernel,seed", [("slope", 7), ("cutdepth", 3)])
def test_random_faults_end_correct(tmp_path, kernel: str, seed: int) -> None:
    res, rep, out = _abft(tmp_path, kernel, "--error-rate", "0.2", "--seed", str(seed))
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["errors"]  # these seeds give 1 (seed 7) and 3 (seed 3) faulty workers
    _assert_serial(tmp_path, kernel, out)


@pytest.mark.timeout(120)
def test_replica_takes_over_when_primary_dies(tmp_path) -> None:
    res, rep, out = _abft(tmp_path, "slope", "--inject", "kill:rank=0,iter=11", "--force", "silent:1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["finisher"] == "replica" and rep.get("takeover") is True
    _assert_serial(tmp_path, "slope", out)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["sim", "ulfm"])
def test_replica_keeps_a_result_that_overtakes_the_primarys_command(tmp_path, backend: str) -> None:
    """The primary recomputes worker 3's silently wrong block and dies; its mirror of that command
    reaches the replica 0.3 s after the command itself (delay 0->1), so the worker's new result
    arrives first. The replica once dropped it as stale, waited for it in vain, excluded the live
    worker (rank 5) as timed out and never stopped it: the job hung until its --timeout (sim)."""
    res, rep, out = _abft(tmp_path, "cutdepth", "--backend", backend, "--inject",
                          "kill:rank=0,iter=11;delay:src=0,dst=1,p=1,ms=300", "--force", "silent:3",
                          job_timeout=60, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["job_exit"] == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["finisher"] == "replica" and rep.get("takeover") is True
    assert [e for e in rep["errors"] if e["status"] == 0] == [], rep["errors"]
    assert rep["dead_workers"] == [] and rep["excluded"] == []
    _assert_serial(tmp_path, "cutdepth", out)
    assert rep["digest"] == _values_digest(out)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["sim", "ulfm"])
def test_a_live_worker_given_up_on_is_still_stopped(tmp_path, backend: str) -> None:
    """Every message of worker 3 (rank 5) to the masters is lost: the masters time it out, exclude it and
    reassign its block, and must still send it ``stop``, or it waits for a command forever (it did,
    under sim, until the job's --timeout)."""
    res, rep, out = _abft(tmp_path, "cutdepth", "--backend", backend, "--inject", "drop:src=5,dst=0+1,p=1",
                          job_timeout=60, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["job_exit"] == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["excluded"] == [5] and rep["final_owners"]["3"] != 5
    assert [(e["worker"], e["error"]) for e in rep["errors"]] == [(5, "timeout/crash")]
    _assert_serial(tmp_path, "cutdepth", out)


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
    res, _, _ = _abft(tmp_path, "slope", env_extra={PLANARIA_TERRAIN_KERNELS: "fast"})
    assert res.returncode == 2 and res.stderr.strip() == (
        f"planaria abft: {PLANARIA_TERRAIN_KERNELS} must be one of auto, compiled, numpy, got 'fast'"), res.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dtype", ["auto", "float64"])
def test_plain_mode_on_geotiff_equals_serial(tmp_path, dtype: str) -> None:
    """Plain mode (no check rows) on a float32 GeoTIFF: windowed reads, streamed GeoTIFF output, the
    serial raster; float32 by default, float64 with --dtype float64."""
    pytest.importorskip("rasterio")
    from planaria.terrain import Dem, read_dem, write_dem
    d = read_dem(_dem(tmp_path / "dem.npz"))
    write_dem(tmp_path / "dem.tif", Dem(d.data.astype(np.float32), d.nodata, d.cell_size))
    out = tmp_path / "plain.tif"
    env = root_env()
    env["PLANARIA_HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(REPO / "src")
    cmd = [sys.executable, "-m", "planaria.cli.main", "abft", "slope", "--dem", str(tmp_path / "dem.tif"), "-n", str(N),
           "--out", str(out), "--json", "--timeout", "90", "--mode", "plain", "--dtype", dtype]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = json.loads(res.stdout[res.stdout.index("{"):])
    assert rep["mode"] == "plain" and rep["overhead"]["verification_rows"] == 0 and rep["overhead"]["referee_rows"] == 0
    assert rep["verified"] is False
    got = read_dem(out)
    src = read_dem(tmp_path / "dem.tif")
    assert got.cell_size == src.cell_size and got.nodata == src.nodata
    want = np.float32 if dtype == "auto" else np.float64
    assert got.data.dtype == want
    from planaria.terrain import kernels
    serial = kernels["slope"][0](src.data, cell_size=src.cell_size, nodata=src.nodata, dtype=want)
    assert got.data.tobytes() == serial.tobytes()
    assert not list(tmp_path.glob("*.parts"))


@pytest.mark.timeout(120)
def test_duplicate_mode_detects_a_silent_fault_and_equals_serial(tmp_path) -> None:
    res, rep, out = _abft(tmp_path, "cutdepth", "--mode", "duplicate", "--force", "silent:2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and rep["mode"] == "duplicate" and rep["overhead"]["tasks"] == 2 * N
    # worker 4 computes block 2 (task 2) and block 1's second copy (task N+1); its first task is faulty
    first = {e["block"] for e in rep["errors"] if e["round"] == 0}
    assert first == {2, N + 2} and all(e["status"] == 1 for e in rep["errors"])
    _assert_serial(tmp_path, "cutdepth", out)
    from planaria.abft.plotdata import plot_data
    bands = {(b.kind, b.block) for b in plot_data(rep).bands}     # no row located: the block's rows are marked
    assert ("mismatch", 2) in bands and ("recomputed", 2) in bands and {b for _, b in bands} == {2}


@pytest.mark.timeout(120)
def test_bench_reports_cpu_per_rank_and_none_for_a_dead_worker(tmp_path) -> None:
    """--bench: every rank's CPU seconds of the timed region; a crashed worker is None and the sums are withheld."""
    dem = _dem(tmp_path / "dem.npz")
    report = tmp_path / "report.json"
    for force in ([], ["--force", "crash:1"]):   # worker 1 is rank 3
        report.unlink(missing_ok=True)
        res = mpiexec(N + 2, ["-m", "planaria.abft.masterworker", "--kernel", "slope", "--dem", str(dem),
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



# ---------------------------------------------------------------- issue 27: two faulty workers, report, bad input

def _report_faults(rep: dict) -> list[tuple[str, int]]:
    return [(f["kind"], f["worker"]) for f in rep["injected"]]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("kernel", ["slope", "cutdepth"])
def test_issue_command_with_neighbouring_silent_faults_equals_the_clean_run(tmp_path, kernel: str) -> None:
    """Failure 4 as reported: --error-rate 0.5 --seed 29 on 4 workers gives workers 2 and 3 a silent fault; the
    output must be the clean run's (it differed in one cell of row 90), and the digests must be equal."""
    res0, clean, out0 = _abft(tmp_path, kernel, out=tmp_path / "clean.npz")
    assert res0.returncode == 0 and clean["ok"], res0.stderr[-3000:]
    res, rep, out = _abft(tmp_path, kernel, "--error-rate", "0.5", "--seed", "29")
    assert res.returncode == 0, res.stderr[-3000:]
    from planaria.terrain import read_dem
    assert read_dem(out).data.tobytes() == read_dem(out0).data.tobytes()
    _assert_serial(tmp_path, kernel, out)
    assert rep["ok"] and {e["worker"] for e in rep["errors"]} == {4, 5}          # ranks of workers 2 and 3
    assert _report_faults(rep) == [("silent", 2), ("silent", 3)], rep["injected"]
    assert rep["digest"] == clean["digest"] == _values_digest(out)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("a,kernel", [(0, "slope"), (1, "cutdepth"), (2, "slope")])
def test_every_adjacent_pair_corrupting_its_shared_row_alike_is_recovered(tmp_path, a: int, kernel: str) -> None:
    """Workers a and a+1 flip the same bit of the same cell of the row they both compute (seed parity makes
    a take its check row and a+1 its first row): V's two rows agree, the masters' referee row does not."""
    res, rep, out = _abft(tmp_path, kernel, "--seed", str(a % 2), "--force", f"silent:{a}", "--force", f"silent:{a + 1}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert rep["ok"] and _report_faults(rep) == [("silent", a), ("silent", a + 1)]
    w1, w2 = (f["where"] for f in rep["injected"])
    assert (w1["copy"], w2["copy"]) == ("check", "first") and w1["row"] == w2["row"]
    assert (w1["col"], w1["bit"]) == (w2["col"], w2["bit"])
    assert [c["boundary"] for c in rep["conflicts"]] == [a]
    assert {e["worker"] for e in rep["errors"] if e["round"] == 0} == {a + 2, a + 3}
    _assert_serial(tmp_path, kernel, out)


@pytest.mark.timeout(150)
def test_a_pair_of_blocks_apart_is_recovered(tmp_path) -> None:
    res, rep, out = _abft(tmp_path, "cutdepth", "--seed", "0", "--force", "silent:0", "--force", "silent:3")
    assert res.returncode == 0 and rep["ok"], res.stderr[-3000:]
    assert {e["worker"] for e in rep["errors"] if e["round"] == 0} == {2, 5}
    _assert_serial(tmp_path, "cutdepth", out)


@pytest.mark.timeout(150)
def test_infinite_cells_are_nodata_and_the_ranks_print_no_warning(tmp_path) -> None:
    from planaria.terrain import Dem, read_dem, write_dem
    d = read_dem(_dem(tmp_path / "dem.npz"))
    z = d.data.copy()
    z[30, 30], z[70, 10], z[100, 60] = np.inf, -np.inf, np.inf
    write_dem(tmp_path / "dem.npz", Dem(z, nodata=d.nodata, cell_size=d.cell_size))
    res, rep, out = _abft(tmp_path, "cutdepth", "--error-rate", "0.5", "--seed", "3")
    assert res.returncode == 0 and rep["ok"], res.stderr[-3000:]
    assert "Warning" not in res.stderr and "warn" not in res.stderr.lower(), res.stderr[-3000:]
    got = read_dem(out).data
    assert got[30, 30] == d.nodata and got[71, 11] == d.nodata
    _assert_serial(tmp_path, "cutdepth", out)


@pytest.mark.timeout(60)
def test_inject_garbage_and_bad_force_give_one_line_and_exit_2(tmp_path) -> None:
    for args, word in ((("--inject", "garbage"), "garbage"), (("--inject", "kill:rank=9"), "rank"),
                       (("--force", "silent:4"), "0..3"), (("--force", "silent:-1"), "0..3")):
        res, _, _ = _abft(tmp_path, "slope", *args)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and word in lines[0], (args, res.stderr)
        assert lines[0].startswith("planaria abft: ")


@pytest.mark.timeout(60)
def test_out_equal_to_dem_is_refused_and_the_input_untouched(tmp_path) -> None:
    import os
    dem = _dem(tmp_path / "dem.npz")
    before = (dem.read_bytes(), dem.stat().st_mtime_ns)
    (tmp_path / "sub").mkdir()
    os.symlink(dem, tmp_path / "link.npz")
    for out in (dem, tmp_path / "sub" / ".." / "dem.npz", tmp_path / "link.npz"):
        env = root_env()
        env["PLANARIA_HOME"] = str(tmp_path / "home")
        env["PYTHONPATH"] = str(REPO / "src")
        cmd = [sys.executable, "-m", "planaria.cli.main", "abft", "slope", "--dem", str(dem), "-n", str(N),
               "--out", str(out), "--timeout", "60"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=50, env=env, cwd=tmp_path)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and "input DEM" in lines[0], (out, res.stderr)
    assert (dem.read_bytes(), dem.stat().st_mtime_ns) == before
    assert not list(tmp_path.glob("*.abft.json")) and not list(tmp_path.glob("*.parts"))
