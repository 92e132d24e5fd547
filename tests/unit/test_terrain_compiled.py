"""The compiled slope and cut-depth kernels against the numpy reference kernels, bit for bit."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planaria.terrain import compiled, cut_depth, slab_bounds, slope_degrees
from planaria.terrain.cutdepth import cut_depth_reference
from planaria.terrain.slope import slope_degrees_reference
from planaria.terrain.window import output_dtype

pytestmark = [pytest.mark.skipif(not compiled.available(), reason="numba is not installed"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]  # the reference warns

# the compiled loops explicitly: on these small DEMs the default choice (terrain.dispatch) is numpy
PAIRS = {"slope": (functools.partial(slope_degrees, method="compiled"), slope_degrees_reference),
         "cutdepth": (functools.partial(cut_depth, method="compiled"), cut_depth_reference)}
IN_DTYPES = [np.float32, np.float64, np.float16, np.int16, np.int32, np.uint16, np.int64]


def bits(a: np.ndarray) -> np.ndarray:
    """The array's bytes as unsigned integers, so that NaN payloads and signed zeros count."""
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bit_equal(got: np.ndarray, ref: np.ndarray, what: str = "") -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape, what
    diff = np.flatnonzero(bits(got) != bits(ref))
    assert diff.size == 0, f"{what}: {diff.size} cells differ, first at {np.unravel_index(diff[0], got.shape)}: " \
                           f"{got.flat[diff[0]]!r} vs {ref.flat[diff[0]]!r}"


def dem(rng: np.random.Generator, n: int, m: int, dtype, holes: float, nodata, scale: float = 10.0,
        special: bool = False) -> np.ndarray:
    """A random DEM of ``dtype`` with NoData holes (NaN or ``nodata``) and, with ``special``, infinities,
    signed zeros and flat patches."""
    z = rng.uniform(-2000, 6000) + rng.normal(0.0, scale, size=(n, m)).cumsum(axis=1)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        z = np.clip(np.round(z), info.min, info.max)
    z = z.astype(dtype)
    if holes:
        mask = rng.random((n, m)) < holes
        if nodata is not None:
            fits = not np.issubdtype(dtype, np.integer) or np.iinfo(dtype).min <= nodata <= np.iinfo(dtype).max
            z[mask] = nodata if fits else np.iinfo(dtype).max
        elif np.issubdtype(dtype, np.floating):
            z[mask] = np.nan
    if special and np.issubdtype(dtype, np.floating) and z.size:
        for v in (np.inf, -np.inf, -0.0, 0.0):
            k = int(rng.integers(z.size))
            z.flat[k] = v
        r, c = int(rng.integers(n)), int(rng.integers(m))
        z[r:r + 3, c:c + 12] = -0.0  # a flat patch of negative zeros next to the zeros above
    return z


def check_all(z: np.ndarray, nodata, cell=(30.0, 30.0)) -> None:
    for name, (fast, ref) in PAIRS.items():
        for out in (None, np.float32, np.float64):
            assert_bit_equal(fast(z, cell, nodata, dtype=out), ref(z, cell, nodata, dtype=out),
                             f"{name} {z.dtype}->{out} nodata={nodata}")


@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("nodata", [None, -9999.0, 0.1, 1e300])
def test_whole_rasters_bit_identical(dtype, nodata):
    rng = np.random.default_rng(abs(hash((np.dtype(dtype).name, nodata))) % 2**32)
    for n, m in [(40, 57), (13, 1100), (11, 11), (12, 12), (3, 3), (2, 30), (30, 2), (0, 5), (25, 1)]:
        nd = nodata
        if np.issubdtype(dtype, np.integer) and nodata is not None:
            nd = -9999.0 if np.iinfo(dtype).min < 0 else 65535.0
        check_all(dem(rng, n, m, dtype, 0.01, nd, special=True), nodata)
        check_all(dem(rng, n, m, dtype, 0.01, nd), nd)


def test_nodata_compares_as_numpy_does():
    """A Python float nodata is rounded to a float32 DEM's dtype; a float64 scalar that float32 cannot
    hold never matches (numpy then compares in float64)."""
    z = np.full((8, 9), 0.1, np.float32)
    z[4, 4] = 7.0
    check_all(z, 0.1)
    check_all(z, np.float64(0.1))
    check_all(z, np.float32(0.1))
    check_all(z.astype(np.float16), 0.1)
    assert np.isnan(slope_degrees(z, nodata=0.1)).sum() < z.size
    assert (slope_degrees(z, nodata=0.1) == np.float32(0.1)).all()


def test_huge_elevations_overflow_alike():
    z = np.random.default_rng(3).uniform(-1.0, 1.0, size=(20, 30)) * 1.7e308
    check_all(z, None)
    check_all(z, -9999.0)
    check_all(z.T.copy(), None, cell=(1e-300, 1e300))


def test_strided_and_fortran_inputs():
    z = dem(np.random.default_rng(4), 40, 60, np.float64, 0.02, None)
    check_all(np.asfortranarray(z), None)
    check_all(z[::2, ::3], None)
    check_all(z[:, 5:50], None)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(PAIRS)),
    dtype=st.sampled_from(IN_DTYPES),
    out=st.sampled_from([None, np.float32, np.float64]),
    n=st.integers(0, 30),
    m=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    holes=st.sampled_from([0.0, 0.01, 0.2]),
    nodata=st.sampled_from([None, -9999.0, 0.0]),
    special=st.booleans(),
    scale=st.sampled_from([1e-6, 1.0, 100.0, 1e30]),
    cuts=st.lists(st.floats(0, 1), max_size=4),
)
def test_slabs_bit_identical_to_reference_and_to_the_whole(name, dtype, out, n, m, seed, holes, nodata, special,
                                                           scale, cuts):
    """Every slab a worker may be given (rows=), in every dtype: the compiled rows equal the reference's
    rows of the same slab and the compiled whole raster's rows."""
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer) and scale > 1e4:
        scale = 100.0
    z = dem(rng, n, m, dtype, holes, nodata if holes else None, scale, special)
    cell = (float(rng.uniform(0.1, 50)), float(rng.uniform(0.1, 50)))
    fast, ref = PAIRS[name]
    window = 3 if name == "slope" else 11
    with np.errstate(all="ignore"):
        whole = fast(z, cell, nodata, dtype=out)
        assert_bit_equal(whole, ref(z, cell, nodata, dtype=out), "whole")
        bounds = sorted({0, n, *(int(c * n) for c in cuts)})
        for r0, r1 in zip(bounds[:-1], bounds[1:], strict=True):
            s0, s1 = slab_bounds(r0, r1, n, window)
            slab = z[s0:s1].copy()
            got = fast(slab, cell, nodata, rows=(r0, r1), dtype=out)
            assert_bit_equal(got, ref(slab, cell, nodata, rows=(r0, r1), dtype=out), f"slab {r0}..{r1}")
            assert_bit_equal(got, whole[r0:r1], f"slab {r0}..{r1} against the whole")


def test_output_dtype_defaults():
    assert output_dtype(np.float32) == np.float32
    assert output_dtype(np.float64) == np.float64
    assert output_dtype(np.int16) == np.float32
    assert output_dtype(np.uint8) == np.float32
    assert output_dtype(np.float16) == np.float32
    assert output_dtype(np.float32, "float64") == np.float64
    with pytest.raises(ValueError, match="float"):
        output_dtype(np.float32, np.int32)
    z = np.ones((6, 6), np.float32)
    assert slope_degrees(z).dtype == np.float32 and cut_depth(z).dtype == np.float32
    assert slope_degrees(z, dtype=np.float64).dtype == np.float64
    # a float32 result is the float64 result rounded to float32
    z = dem(np.random.default_rng(9), 30, 40, np.float32, 0.01, None)
    for fast, _ in PAIRS.values():
        assert_bit_equal(fast(z), fast(z, dtype=np.float64).astype(np.float32))


def test_compiled_without_fast_maths():
    """The loops must round as numpy does: numba's SVML maths (changes the last bits) is off."""
    import numba
    assert not numba.config.USING_SVML
    compiled.warm_up()
    for fn in (compiled._slope_hyp, compiled._slope_finish, compiled._cut_depth_rows):
        assert not fn.targetoptions.get("fastmath"), fn
