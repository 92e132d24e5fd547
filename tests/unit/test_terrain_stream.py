"""planaria.terrain.stream and `planaria terrain`: a kernel over a DEM file, read and written in bands."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from planaria.terrain import dem_info, kernels, read_dem, read_dem_rows, write_dem_rows
from planaria.terrain.dem import RowReader
from planaria.terrain.stream import run_file

rasterio = pytest.importorskip("rasterio")


def _dem(tmp_path, dtype=np.float32, ext=".tif", nodata=-9999.0, rows=61, cols=47):
    rng = np.random.default_rng(11)
    z = 500 + rng.normal(0, 3, (rows, cols)).cumsum(axis=1)
    z[rng.random(z.shape) < 0.01] = nodata if nodata is not None else np.nan
    path = tmp_path / f"dem{ext}"
    # write_dem_rows keeps the dtype (a Dem holds integer data as float64)
    write_dem_rows(path, z.shape, dtype, [(0, z.astype(dtype))], nodata if ext != ".npy" else None, (30.0, 20.0))
    return path


@pytest.mark.parametrize("kernel", sorted(kernels))
@pytest.mark.parametrize("ext,dtype,requested,want", [
    (".tif", np.float32, None, np.float32),
    (".tif", np.float32, "float64", np.float64),
    (".tif", np.int16, None, np.float32),
    (".tif", np.float64, None, np.float64),
    (".npy", np.float32, None, np.float32),
])
@pytest.mark.parametrize("band", [1, 4, 13, 1000])
def test_bands_write_the_kernel_on_the_whole_raster(tmp_path, kernel, ext, dtype, requested, want, band):
    dem = _dem(tmp_path, dtype, ext, None if ext == ".npy" else -9999.0)
    assert dem_info(dem).stored_dtype == np.dtype(dtype).name
    out = tmp_path / f"out{ext}"
    res = run_file(kernel, dem, out, requested, rows_per_band=band)
    assert res["dtype"] == np.dtype(want).name and res["rows_per_band"] == band
    assert min(res["read_s"], res["compute_s"], res["write_s"]) >= 0
    got = read_dem(out)
    src = read_dem(dem)
    whole = kernels[kernel][0](src.data, src.cell_size, src.nodata, dtype=want)
    assert got.data.dtype == want and got.data.tobytes() == whole.tobytes()
    assert got.nodata == src.nodata and got.cell_size == src.cell_size
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([dem.name, out.name])  # no temporary file left


def test_row_reader_equals_read_dem_rows(tmp_path):
    dem = _dem(tmp_path)
    with RowReader(dem) as rd:
        for r0, r1 in [(0, 5), (5, 6), (30, 61), (61, 61)]:
            a, b = rd.rows(r0, r1), read_dem_rows(dem, r0, r1)
            assert a.data.tobytes() == b.data.tobytes() and a.nodata == b.nodata and a.cell_size == b.cell_size
        with pytest.raises(ValueError, match="outside"):
            rd.rows(60, 62)


def test_a_failure_midway_leaves_no_output(tmp_path):
    """A DEM that ends early fails in a later band: the output is not there, nor a temporary file."""
    dem = _dem(tmp_path, np.float32, ".npy", None)
    data = dem.read_bytes()
    dem.write_bytes(data[: len(data) - 47 * 4 * 10])  # the last 10 rows missing
    out = tmp_path / "out.npy"
    with pytest.raises(ValueError, match="truncated"):
        run_file("slope", dem, out, rows_per_band=8)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dem.npy"]


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "planaria.cli.main", "terrain", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.timeout(240)
def test_cli_writes_in_the_dem_type_and_float64_on_request(tmp_path):
    dem = _dem(tmp_path, rows=700, cols=33)
    src = read_dem(dem)
    for kernel in sorted(kernels):
        for dtype, want in (("auto", np.float32), ("float64", np.float64)):
            out = tmp_path / f"{kernel}-{dtype}.tif"
            res = _cli(kernel, "--dem", str(dem), "--out", str(out), "--dtype", dtype, "--json", cwd=tmp_path)
            assert res.returncode == 0, res.stderr
            rep = json.loads(res.stdout)
            assert rep["dtype"] == np.dtype(want).name and rep["shape"] == [700, 33]
            got = read_dem(out).data
            assert got.dtype == want
            assert got.tobytes() == kernels[kernel][0](src.data, src.cell_size, src.nodata, dtype=want).tobytes()


@pytest.mark.timeout(120)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    dem = _dem(tmp_path)
    for args, text in [
        (["--dem", str(tmp_path / "none.tif"), "--out", "o.tif"], "no such file"),
        (["--dem", str(dem), "--out", "o.tif", "--dtype", "int8"], "--dtype must be one of"),
        (["--dem", str(dem), "--out", "o.txt"], "unsupported DEM format"),
        (["--dem", str(dem), "--out", str(dem)], "is the input DEM"),
    ]:
        res = _cli("slope", *args, cwd=tmp_path)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and text in lines[0], res.stderr
    assert read_dem(dem).data.shape == (61, 47)
