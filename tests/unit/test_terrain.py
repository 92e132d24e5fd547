"""planaria.terrain: Horn slope, cut depth, the row-slab contract and DEM I/O."""
from __future__ import annotations

import importlib.util
import math
import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planaria.terrain import Dem, cut_depth, halo, kernels, read_dem, slab_bounds, slope_degrees, write_dem

HAVE_RASTERIO = importlib.util.find_spec("rasterio") is not None

needs_rasterio = pytest.mark.skipif(not HAVE_RASTERIO, reason="rasterio is not installed (GeoTIFF I/O)")


def _bad(z, nodata):
    b = np.isnan(z)
    if nodata is not None:
        b |= z == nodata
    return b


def naive_slope(z, dx=1.0, dy=1.0, nodata=None):
    n, m = z.shape
    fill = np.nan if nodata is None else nodata
    out = np.full((n, m), fill)
    for r in range(1, n - 1):
        for c in range(1, m - 1):
            w = z[r - 1 : r + 2, c - 1 : c + 2]
            if _bad(w, nodata).any():
                continue
            (a, b, cc), (d, _, f), (g, h, i) = w
            p = ((cc + 2 * f + i) - (a + 2 * d + g)) / (8 * dx)
            q = ((g + 2 * h + i) - (a + 2 * b + cc)) / (8 * dy)
            out[r, c] = math.degrees(math.atan(math.sqrt(p * p + q * q)))
    return out


def naive_cut_depth(z, nodata=None, window=11):
    k = halo(window)
    n, m = z.shape
    fill = np.nan if nodata is None else nodata
    out = np.full((n, m), fill)
    for r in range(k, n - k):
        for c in range(k, m - k):
            w = z[r - k : r + k + 1, c - k : c + k + 1].astype(np.float64)
            if _bad(w, nodata).any():
                continue
            out[r, c] = w.mean() - w.min()
    return out


def random_dem(rng, n, m, holes=0.0, nodata=None, offset=0.0):
    z = offset + rng.normal(0.0, 10.0, size=(n, m)).cumsum(axis=1)
    if holes:
        mask = rng.random((n, m)) < holes
        z[mask] = np.nan if nodata is None else nodata
    return z


# ---------------------------------------------------------------- slope


def test_slope_matches_direct_formula_on_random_dems():
    rng = np.random.default_rng(1)
    for n, m, dx, dy in [(7, 9, 1.0, 1.0), (12, 5, 30.0, 30.0), (9, 11, 2.0, 5.0)]:
        z = random_dem(rng, n, m)
        np.testing.assert_allclose(slope_degrees(z, (dx, dy)), naive_slope(z, dx, dy), rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("a,b", [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (0.3, -0.7), (-2.0, 5.0)])
def test_plane_has_constant_slope(a, b):
    rows, cols = np.mgrid[0:8, 0:10].astype(np.float64)
    z = a * cols + b * rows
    s = slope_degrees(z)
    expect = math.degrees(math.atan(math.hypot(a, b)))
    np.testing.assert_allclose(s[1:-1, 1:-1], expect, atol=1e-12)


def test_cell_size_orientation_dx_along_columns_dy_along_rows():
    a, b, dx, dy = 0.4, -1.5, 2.0, 7.0
    rows, cols = np.mgrid[0:6, 0:9].astype(np.float64)
    z = a * (cols * dx) + b * (rows * dy)  # x runs along columns, y along rows
    s = slope_degrees(z, cell_size=(dx, dy))
    np.testing.assert_allclose(s[1:-1, 1:-1], math.degrees(math.atan(math.hypot(a, b))), atol=1e-12)
    # swapping the cell size gives a different (wrong) slope
    wrong = slope_degrees(z, cell_size=(dy, dx))
    assert not np.allclose(wrong[1:-1, 1:-1], s[1:-1, 1:-1])
    # a pure east-west ramp only depends on dx
    ew = 3.0 * cols
    np.testing.assert_allclose(
        slope_degrees(ew, cell_size=(1.5, 100.0))[1:-1, 1:-1], math.degrees(math.atan(3.0 / 1.5)), atol=1e-12
    )


def test_slope_border_policy():
    z = np.arange(30.0).reshape(5, 6)
    s = slope_degrees(z)
    assert np.isnan(s[0]).all() and np.isnan(s[-1]).all()
    assert np.isnan(s[:, 0]).all() and np.isnan(s[:, -1]).all()
    assert np.isfinite(s[1:-1, 1:-1]).all()
    s2 = slope_degrees(z, nodata=-9999.0)
    assert (s2[0] == -9999.0).all() and (s2[:, -1] == -9999.0).all()
    # too small for any full window: everything is border
    assert np.isnan(slope_degrees(np.ones((2, 5)))).all()
    assert np.isnan(slope_degrees(np.ones((5, 2)))).all()
    assert slope_degrees(np.ones((0, 4))).shape == (0, 4)


@pytest.mark.parametrize("nodata", [None, -9999.0])
def test_slope_nodata_propagates_to_every_touching_window(nodata):
    z = np.random.default_rng(2).random((8, 8)) * 100
    z[4, 3] = np.nan if nodata is None else nodata
    s = slope_degrees(z, nodata=nodata)
    fill = _bad(s, nodata)
    assert fill[3:6, 2:5].all()
    inner = np.ones_like(fill)
    inner[1:-1, 1:-1] = False
    inner[3:6, 2:5] = True
    assert (fill == inner).all()
    np.testing.assert_array_equal(s, naive_slope(z, nodata=nodata))


def test_nan_counts_as_nodata_even_with_a_nodata_value():
    z = np.ones((5, 5))
    z[2, 2] = np.nan
    s = slope_degrees(z, nodata=-1.0)
    assert (s[1:4, 1:4] == -1.0).all()


def test_slope_dtype_and_bad_arguments():
    z = np.ones((4, 4), dtype=np.int16)
    assert slope_degrees(z).dtype == np.float32  # integer DEMs: float32 by default, as gdaldem writes
    assert slope_degrees(z, dtype=np.float64).dtype == np.float64
    assert slope_degrees(z.astype(np.float64)).dtype == np.float64
    with pytest.raises(ValueError, match="cell_size"):
        slope_degrees(z, cell_size=(0, 1))
    with pytest.raises(ValueError, match="2-D"):
        slope_degrees(np.ones(5))


# ---------------------------------------------------------------- cut depth


@pytest.mark.parametrize("nodata", [None, -32768.0])
def test_cut_depth_matches_naive_float64_reference(nodata):
    rng = np.random.default_rng(3)
    z = random_dem(rng, 24, 19, holes=0.004, nodata=nodata, offset=1500.0)
    got = cut_depth(z, nodata=nodata)
    ref = naive_cut_depth(z, nodata=nodata)
    assert (_bad(got, nodata) == _bad(ref, nodata)).all()
    ok = ~_bad(ref, nodata)
    assert ok.any()
    np.testing.assert_allclose(got[ok], ref[ok], rtol=1e-9, atol=1e-9 * np.abs(z[~_bad(z, nodata)]).max())
    assert (got[ok] >= 0).all()


def test_cut_depth_border_is_five_cells_and_flat_is_zero():
    z = np.full((14, 13), 7.25)
    c = cut_depth(z)
    assert np.isnan(c[:5]).all() and np.isnan(c[-5:]).all()
    assert np.isnan(c[:, :5]).all() and np.isnan(c[:, -5:]).all()
    assert (c[5:9, 5:8] == 0.0).all()
    assert np.isnan(cut_depth(np.ones((10, 30)))).all()


def test_cut_depth_other_window():
    z = random_dem(np.random.default_rng(4), 9, 9)
    np.testing.assert_allclose(cut_depth(z, window=5), naive_cut_depth(z, window=5), rtol=1e-12, equal_nan=True)
    with pytest.raises(ValueError, match="odd"):
        cut_depth(z, window=4)


def test_kernels_registry():
    assert kernels["slope"] == (slope_degrees, 3)
    assert kernels["cutdepth"] == (cut_depth, 11)
    assert halo(3) == 1 and halo(11) == 5


# ---------------------------------------------------------------- row slabs


def _slab_rows(name, z, nodata, r0, r1, cell=(1.0, 1.0)):
    fn, window = kernels[name]
    s0, s1 = slab_bounds(r0, r1, z.shape[0], window)
    return fn(z[s0:s1].copy(), cell, nodata, rows=(r0, r1))


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(sorted(kernels)),
    n=st.integers(0, 40),
    m=st.integers(1, 24),
    seed=st.integers(0, 2**32 - 1),
    holes=st.sampled_from([0.0, 0.02]),
    nodata=st.sampled_from([None, -9999.0]),
    cuts=st.lists(st.floats(0, 1), max_size=5),
)
def test_rows_from_slab_are_bit_identical_to_whole_raster(name, n, m, seed, holes, nodata, cuts):
    rng = np.random.default_rng(seed)
    z = random_dem(rng, n, m, holes=holes, nodata=nodata, offset=float(rng.uniform(-500, 4000)))
    cell = (float(rng.uniform(0.5, 40)), float(rng.uniform(0.5, 40)))
    fn, _ = kernels[name]
    whole = fn(z, cell, nodata)
    assert whole.shape == z.shape
    bounds = sorted({0, n, *(int(c * n) for c in cuts)})
    parts = []
    for r0, r1 in zip(bounds[:-1], bounds[1:], strict=True):
        part = _slab_rows(name, z, nodata, r0, r1, cell)
        assert part.shape == (r1 - r0, m)
        assert np.array_equal(part, whole[r0:r1], equal_nan=True), (r0, r1)
        parts.append(part)
    if parts:
        assert np.array_equal(np.concatenate(parts), whole, equal_nan=True)
    # one single redundant row, as two neighbouring workers compute it
    if n:
        r = int(rng.integers(0, n))
        assert np.array_equal(_slab_rows(name, z, nodata, r, r + 1, cell), whole[r : r + 1], equal_nan=True)


def test_slab_contract_rejects_wrong_slab_sizes():
    z = np.random.default_rng(5).random((30, 12))
    s0, s1 = slab_bounds(10, 15, 30, 11)
    assert (s0, s1) == (5, 20)
    assert slab_bounds(0, 3, 30, 11) == (0, 8)
    assert slab_bounds(27, 30, 30, 3) == (26, 30)
    with pytest.raises(ValueError, match="slab"):
        cut_depth(z[s0 : s1 + 1], rows=(10, 15))  # one row too many
    with pytest.raises(ValueError, match="slab"):
        cut_depth(z[s0 : s0 + 4], rows=(10, 15))  # does not even hold the rows
    with pytest.raises(ValueError):
        slab_bounds(5, 31, 30, 3)


# ---------------------------------------------------------------- I/O


def test_npy_and_npz_round_trip(tmp_path):
    z = random_dem(np.random.default_rng(6), 6, 7).astype(np.float32)
    write_dem(tmp_path / "a.npy", Dem(z))
    d = read_dem(tmp_path / "a.npy")
    assert d.data.dtype == np.float32 and np.array_equal(d.data, z)
    assert d.nodata is None and d.cell_size == (1.0, 1.0)
    dem = Dem(z, nodata=-9999.0, cell_size=(2.5, 4.0))
    write_dem(tmp_path / "a.npz", dem)
    back = read_dem(tmp_path / "a.npz")
    assert np.array_equal(back.data, z) and back.nodata == -9999.0 and back.cell_size == (2.5, 4.0)
    assert not list(tmp_path.glob(".*tmp"))  # no temporary files left behind
    ints = tmp_path / "i.npy"
    np.save(ints, np.arange(6, dtype=np.int16).reshape(2, 3))
    assert read_dem(ints).data.dtype == np.float64


@needs_rasterio
def test_geotiff_round_trip_keeps_georeferencing(tmp_path):
    import rasterio
    from rasterio.crs import CRS
    from rasterio.transform import Affine

    z = random_dem(np.random.default_rng(7), 20, 17, offset=300.0).astype(np.float32)
    z[3, 4] = -32768.0
    src = tmp_path / "src.tif"
    transform = Affine(30.0, 0.0, 500000.0, 0.0, -25.0, 4200000.0)
    with rasterio.open(src, "w", driver="GTiff", height=20, width=17, count=1, dtype="float32",
                       crs=CRS.from_epsg(32633), transform=transform, nodata=-32768.0) as dst:
        dst.write(z, 1)
    dem = read_dem(src)
    assert dem.cell_size == (30.0, 25.0) and dem.nodata == -32768.0
    assert np.array_equal(dem.data, z)
    out = tmp_path / "out.tif"
    write_dem(out, Dem(dem.data * 2, dem.nodata, dem.cell_size, dem.profile))
    with rasterio.open(out) as r:
        assert r.crs == CRS.from_epsg(32633) and r.transform == transform and r.nodata == -32768.0
        assert np.array_equal(r.read(1), z * 2)
    # without a profile the cell size becomes the transform
    write_dem(tmp_path / "plain.tif", Dem(z, None, (2.0, 3.0)))
    plain = read_dem(tmp_path / "plain.tif")
    assert plain.cell_size == (2.0, 3.0) and plain.nodata is None
    assert not list(tmp_path.glob(".*tmp*"))


def _one_line_error(path, match):
    with pytest.raises(ValueError) as info:
        read_dem(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg and match in msg, msg


def test_bad_files_give_one_line_value_errors(tmp_path):
    (tmp_path / "junk.npy").write_bytes(b"not numpy at all\n\nreally")
    _one_line_error(tmp_path / "junk.npy", "cannot read")
    np.save(tmp_path / "vec.npy", np.arange(4.0))
    _one_line_error(tmp_path / "vec.npy", "2-D")
    np.save(tmp_path / "str.npy", np.array([["a", "b"]]))
    _one_line_error(tmp_path / "str.npy", "numeric")
    np.savez(tmp_path / "nodata.npz", elevation=np.ones((2, 2)))
    _one_line_error(tmp_path / "nodata.npz", "'data'")
    np.savez(tmp_path / "cs.npz", data=np.ones((2, 2)), cell_size=np.array([1.0, -2.0]))
    _one_line_error(tmp_path / "cs.npz", "cell_size")
    np.savez(tmp_path / "cs3.npz", data=np.ones((2, 2)), cell_size=np.ones(3))
    _one_line_error(tmp_path / "cs3.npz", "cell_size")
    _one_line_error(tmp_path / "missing.npz", "no such file")
    (tmp_path / "dem.asc").write_text("1 2\n")
    _one_line_error(tmp_path / "dem.asc", "unsupported")
    with pytest.raises(ValueError, match="unsupported"):
        write_dem(tmp_path / "out.asc", Dem(np.ones((2, 2))))
    with pytest.raises(ValueError, match="cell_size"):
        Dem(np.ones((2, 2)), cell_size=(1.0, float("nan")))
    if HAVE_RASTERIO:
        (tmp_path / "bad.tif").write_bytes(b"II*\x00garbage\nmore")
        _one_line_error(tmp_path / "bad.tif", "cannot read GeoTIFF")


def test_check_output_names_why_a_raster_cannot_be_written(tmp_path):
    from planaria.terrain import check_output
    assert check_output(tmp_path / "out.tif") == tmp_path / "out.tif"
    for path, match in ((tmp_path / "out.txt", "unsupported DEM format '.txt'"),
                        (tmp_path / "no-such-dir" / "out.npy", "does not exist"),
                        (tmp_path, "unsupported DEM format '(no extension)'")):
        with pytest.raises(ValueError, match=re.escape(match)):
            check_output(path)
    (tmp_path / "d.npy").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        check_output(tmp_path / "d.npy")
    assert not (tmp_path / "no-such-dir").exists()


@pytest.mark.skipif(not HAVE_RASTERIO, reason="rasterio not installed")
def test_geotiff_without_georeference_is_written_without_warning(tmp_path):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_dem(tmp_path / "plain.tif", Dem(np.ones((4, 5))))
    assert read_dem(tmp_path / "plain.tif").data.shape == (4, 5)


# ---------------------------------------------------------------- gdaldem


@needs_rasterio
@pytest.mark.skipif(shutil.which("gdaldem") is None, reason="gdaldem (gdal-bin) is not installed")
@pytest.mark.parametrize("with_nodata", [False, True])
def test_slope_agrees_with_gdaldem(tmp_path, with_nodata):
    import rasterio

    # A 16-bit integer DEM, as in the paper's experiments: gdaldem adds the
    # window values in float32, which is exact for these integers, so the only
    # difference left is the rounding of its float32 output.  (On float DEMs of
    # large elevations gdaldem's float32 sums lose ~1e-4 degrees to ours.)
    rng = np.random.default_rng(8)
    z = np.round(random_dem(rng, 23, 19, offset=800.0)).astype(np.int16)
    nodata = None
    if with_nodata:
        nodata = -32768.0
        z[7, 9] = nodata
        z[15, 2] = nodata
    src = tmp_path / "dem.tif"
    write_dem(src, Dem(z, nodata, (30.0, 20.0)))
    out = tmp_path / "slope.tif"
    subprocess.run(["gdaldem", "slope", "-q", str(src), str(out)], check=True, timeout=60,
                   capture_output=True)
    with rasterio.open(out) as r:
        ref = r.read(1).astype(np.float64)
        gdal_nodata = r.nodata
    ours = slope_degrees(read_dem(src).data, (30.0, 20.0), nodata)
    ours_fill = _bad(ours, nodata)
    assert (ref[ours_fill] == gdal_nodata).all()
    assert (ref[~ours_fill] != gdal_nodata).all()
    np.testing.assert_allclose(ours[~ours_fill], ref[~ours_fill], atol=1e-4, rtol=0)


# ---------------------------------------------------------------- windowed reads


@pytest.mark.parametrize("ext", [".npy", ".npz", ".tif"])
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_windowed_reads_equal_slices_of_full_reads(tmp_path, ext, dtype):
    from planaria.terrain import dem_info, read_dem_rows

    if ext == ".tif" and not HAVE_RASTERIO:
        pytest.skip("rasterio is not installed (GeoTIFF I/O)")
    rng = np.random.default_rng(11)
    z = (random_dem(rng, 37, 23, offset=500.0)).astype(dtype)
    nodata = -9999.0 if ext != ".npy" else None
    if nodata is not None:
        z[4, 5] = nodata
    path = tmp_path / f"dem{ext}"
    write_dem(path, Dem(z, nodata, (30.0, 25.0) if ext != ".npy" else (1.0, 1.0)))
    full = read_dem(path)
    info = dem_info(path)
    assert info.shape == full.shape and info.nodata == full.nodata and info.cell_size == full.cell_size
    assert info.dtype == full.data.dtype.name
    for r0, r1 in [(0, 37), (0, 1), (5, 19), (36, 37), (20, 20)]:
        part = read_dem_rows(path, r0, r1)
        assert part.data.dtype == full.data.dtype and part.data.flags.writeable
        assert np.array_equal(part.data, full.data[r0:r1])
        assert part.nodata == full.nodata and part.cell_size == full.cell_size
    with pytest.raises(ValueError, match="outside a raster of 37 rows"):
        read_dem_rows(path, 30, 38)


@pytest.mark.parametrize("ext", [".npy", ".npz", ".tif"])
def test_write_dem_rows_equals_write_dem(tmp_path, ext):
    from planaria.terrain import write_dem_rows

    if ext == ".tif" and not HAVE_RASTERIO:
        pytest.skip("rasterio is not installed (GeoTIFF I/O)")
    z = random_dem(np.random.default_rng(5), 29, 18, offset=100.0)
    z[3, 3] = -9999.0
    whole, streamed = tmp_path / f"whole{ext}", tmp_path / f"streamed{ext}"
    write_dem(whole, Dem(z, -9999.0, (2.0, 3.0)))
    cuts = [0, 7, 8, 20, 29]
    write_dem_rows(streamed, z.shape, z.dtype, ((a, z[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)), -9999.0, (2.0, 3.0))
    a, b = read_dem(whole), read_dem(streamed)
    assert np.array_equal(a.data, b.data) and a.data.dtype == b.data.dtype
    if ext != ".npy":
        assert (a.nodata, a.cell_size) == (b.nodata, b.cell_size)
    with pytest.raises(ValueError, match="end at row 20"):
        write_dem_rows(tmp_path / f"short{ext}", z.shape, z.dtype, [(0, z[:20])], cell_size=(2.0, 3.0))
    assert not (tmp_path / f"short{ext}").exists() and not list(tmp_path.glob(".*tmp*"))


def test_npy_row_reads_fortran_order_big_endian_and_bad_files(tmp_path):
    from planaria.terrain import dem_info, read_dem_rows

    z = random_dem(np.random.default_rng(3), 17, 9, offset=50.0)
    for name, arr in [("f.npy", np.asfortranarray(z)), ("be.npy", z.astype(">f4")), ("i.npy", z.astype(np.int16))]:
        np.save(tmp_path / name, arr)
        info = dem_info(tmp_path / name)
        assert info.shape == (17, 9)
        part = read_dem_rows(tmp_path / name, 4, 11)
        assert np.array_equal(part.data, np.asarray(arr, dtype=part.data.dtype)[4:11]) and part.data.flags.writeable
    for name, match in [("junk.npy", "cannot read"), ("vec.npy", "2-D"), ("str.npy", "numeric")]:
        if name == "junk.npy":
            (tmp_path / name).write_bytes(b"not numpy at all\n\nreally")
        else:
            np.save(tmp_path / name, np.arange(4.0) if name == "vec.npy" else np.array([["a", "b"]]))
        for fn in (lambda p: dem_info(p), lambda p: read_dem_rows(p, 0, 1)):
            with pytest.raises(ValueError, match=match) as err:
                fn(tmp_path / name)
            assert "\n" not in str(err.value) and str(tmp_path / name) in str(err.value)
    full = (tmp_path / "f64.npy")
    np.save(full, z)
    cut = tmp_path / "cut.npy"
    cut.write_bytes(full.read_bytes()[:-8 * 9 * 3])       # the last three rows are missing
    assert np.array_equal(read_dem_rows(cut, 0, 14).data, z[:14])
    with pytest.raises(ValueError, match="truncated"):
        read_dem_rows(cut, 10, 17)
