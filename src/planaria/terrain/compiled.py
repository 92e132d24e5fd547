"""Compiled (numba) slope and cut-depth kernels, bit-identical to the numpy reference kernels.

Why numba: the numpy kernels (:func:`planaria.terrain.slope.slope_degrees_reference`,
:func:`planaria.terrain.cutdepth.cut_depth_reference`) make some twenty elementwise passes over
every tile; a compiled loop reads each input cell once per window and keeps the intermediate
values in registers, vectorised by LLVM. numba is on PyPI as a wheel for every platform numpy
is, needs no compiler on the user's machine, and caches its machine code on disk
(``cache=True``), so MPI ranks load it instead of compiling it each (a C extension would need a
build step, and numpy alone cannot avoid the passes).

Bit-exactness with the reference (same dtype in, same dtype out):

* every output cell goes through the same IEEE operations in the same order as in the numpy
  kernel: additions, multiplications by 2, the division by ``8 dx`` (not a multiplication by its
  reciprocal), ``sqrt``; cut depth's sums and minima in the same fixed order. No ``fastmath``
  (so no reassociation and no fused multiply-add), and numba's SVML vectorised maths is not
  used (``numba.config.USING_SVML`` is checked by the tests);
* ``arctan`` is *numpy's*: numpy's vectorised float64 ``arctan`` (SVML on AVX-512 machines)
  differs from the C library's ``atan`` in the last bit for about one value in a thousand, so
  the compiled loop writes ``sqrt(dz/dx^2 + dz/dy^2)`` for a band of rows into a cache-sized
  float64 buffer and ``numpy.arctan`` runs on that buffer in place, as in the reference; the
  next loop multiplies by ``180 / pi`` (what ``numpy.degrees`` computes), puts the fill value
  where the window touches NoData and rounds to the output dtype in one pass;
* a window touching an invalid cell (NaN, +-inf, or equal to ``nodata`` as numpy compares it:
  a Python float ``nodata`` is rounded to a float32 DEM's dtype first) gets the fill value, as in
  the reference; such windows' arithmetic is never stored, so the reference's zeroing of invalid
  cells is not needed;
* ``numpy.minimum(a, b)`` returns ``b`` unless ``a < b`` (also for -0.0 against 0.0): the
  compiled minimum is written the same way.

Inputs: float32 and float64 DEMs are used as they are; integer DEMs are converted to float64
first (as the reference does cell by cell) and float16 ones to float32 (exact); other dtypes
(long double) and output dtypes other than float32/float64 go to the reference kernel.

The first call of each (input dtype, output dtype) pair compiles the loops, or loads them from
numba's cache (``__pycache__`` beside this file, or numba's user-wide cache directory when
that is not writable, or ``NUMBA_CACHE_DIR``): :func:`warm_up` does that ahead of a timed run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from planaria.terrain.window import check_elevations, halo, output_dtype, output_plan

numba: ModuleType | None
try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; without it the reference kernels run
    numba = None

DEG = 180.0 / math.pi  # numpy.degrees(x) is x * (180 / pi) in double precision, bit for bit
BAND_CELLS = 1 << 16   # slope: cells of the float64 buffer numpy.arctan runs on (512 KiB, in L2 cache)
CHUNK_COLS = 512       # cut depth: output columns per chunk (two rows' sums and minima, 4 x 4 KiB, stay in L1)


def _jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``numba.njit`` with the machine code cached on disk; uncached when no cache directory is usable."""
    assert numba is not None, "the compiled loops are defined only when numba imports"
    opts = dict(nogil=True, error_model="numpy", boundscheck=False)
    try:
        return numba.njit(cache=True, **opts)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available": compile each time instead
        return numba.njit(**opts)(fn)


def available() -> bool:
    """True when the compiled kernels can run here (numba imports)."""
    return numba is not None


if numba is not None:

    @_jit
    def _flag_row(zr, nd, use_nd, out):
        """``out[j]`` = 1 where ``zr[j]`` is NaN, infinite or (``use_nd``) equal to ``nd``."""
        for j in range(zr.shape[0]):
            v = zr[j]
            out[j] = 1 if (not np.isfinite(v)) or (use_nd and v == nd) else 0

    @_jit
    def _side(mid, first, last):
        """One side of Horn's window as the reference adds it: ``(2 mid + first) + last``."""
        s = mid * 2.0
        s = s + first
        return s + last

    @_jit
    def _lesser(a, b):
        """``numpy.minimum(a, b)``: ``b`` unless ``a < b`` (also for -0.0 against 0.0)."""
        return a if a < b else b

    @_jit
    def _slope_hyp(z, i0, i1, d8x, d8y, nd, use_nd, hyp, badw, ring):
        """Slab rows ``i0..i1-1`` (each with its row above and below in ``z``): hyp[k, j] =
        sqrt(dzdx^2 + dzdy^2), badw[k, j] = 1 where the 3x3 window touches an invalid cell
        (hyp then 0); columns 1..m-2."""
        m = z.shape[1]
        _flag_row(z[i0 - 1], nd, use_nd, ring[(i0 - 1) % 3])
        _flag_row(z[i0], nd, use_nd, ring[i0 % 3])
        for k in range(i1 - i0):
            i = i0 + k
            _flag_row(z[i + 1], nd, use_nd, ring[(i + 1) % 3])
            r0 = ring[0]
            r1 = ring[1]
            r2 = ring[2]
            bw = badw[k]
            for j in range(1, m - 1):
                bw[j] = (r0[j - 1] | r0[j] | r0[j + 1] | r1[j - 1] | r1[j] | r1[j + 1]
                         | r2[j - 1] | r2[j] | r2[j + 1])
            za = z[i - 1]
            zb = z[i]
            zc = z[i + 1]
            hr = hyp[k]
            for j in range(1, m - 1):
                a = np.float64(za[j - 1])
                b = np.float64(za[j])
                c = np.float64(za[j + 1])
                d = np.float64(zb[j - 1])
                f = np.float64(zb[j + 1])
                g = np.float64(zc[j - 1])
                h = np.float64(zc[j])
                ii = np.float64(zc[j + 1])
                # the reference's order: ((2F + C) + I) - ((2D + A) + G), then / (8 dx); likewise dz/dy
                p = _side(f, c, ii) - _side(d, a, g)
                p = p / d8x
                q = _side(h, g, ii) - _side(b, a, c)
                q = q / d8y
                p = p * p
                q = q * q
                p = p + q
                hr[j] = 0.0 if bw[j] else np.sqrt(p)

    @_jit
    def _slope_finish(hyp, badw, nrows, fill, out, o0):
        """out[o0 + k, j] = degrees(hyp[k, j]) rounded to out's dtype, or ``fill``; columns 1..m-2."""
        m = hyp.shape[1]
        for k in range(nrows):
            hr = hyp[k]
            bw = badw[k]
            orow = out[o0 + k]
            for j in range(1, m - 1):
                orow[j] = fill if bw[j] else hr[j] * DEG

    @_jit
    def _first_row(zr, n, s, lo):
        """Start column sums ``s`` and minima ``lo`` with the row ``zr`` (its first ``n`` columns)."""
        for j in range(n):
            v = np.float64(zr[j])
            s[j] = v
            lo[j] = v

    @_jit
    def _next_row(zr, n, s, lo):
        """Add the row ``zr`` to the column sums ``s`` and take it into the minima ``lo``."""
        for j in range(n):
            v = np.float64(zr[j])
            s[j] = s[j] + v
            lo[j] = _lesser(lo[j], v)

    @_jit
    def _vsum(z, top, w, c0, n, s, lo):
        """Column sums (rows ``top..top+w-1`` added top to bottom) and minima of columns ``c0..c0+n-1``."""
        _first_row(z[top, c0:c0 + n], n, s, lo)
        for dk in range(1, w):
            _next_row(z[top + dk, c0:c0 + n], n, s, lo)

    @_jit
    def _vsum2(z, top, w, c0, n, s, lo, s2, lo2):
        """:func:`_vsum` for the windows starting at rows ``top`` and ``top + 1`` at once: each input row the
        two share is loaded once for both (each sum still adds its own rows top to bottom)."""
        _first_row(z[top, c0:c0 + n], n, s, lo)
        zr = z[top + 1, c0:c0 + n]
        for j in range(n):
            v = np.float64(zr[j])
            s[j] = s[j] + v
            lo[j] = _lesser(lo[j], v)
            s2[j] = v
            lo2[j] = v
        for dk in range(2, w):
            zr = z[top + dk, c0:c0 + n]
            for j in range(n):
                v = np.float64(zr[j])
                s[j] = s[j] + v
                lo[j] = _lesser(lo[j], v)
                s2[j] = s2[j] + v
                lo2[j] = _lesser(lo2[j], v)
        _next_row(z[top + w, c0:c0 + n], n, s2, lo2)

    @_jit
    def _hpass(s, lo, vr, w, n_out, count, fill, oc, t, mn, hb):
        """The row sums ``s`` of ``w`` columns added left to right, / count, minus the minimum of ``lo`` over the
        same columns, into ``oc``; ``fill`` where a column's flag in ``vr`` is set."""
        for j in range(n_out):
            t[j] = s[j]
            mn[j] = lo[j]
            hb[j] = vr[j]
        for dk in range(1, w):
            for j in range(n_out):
                t[j] = t[j] + s[j + dk]
                mn[j] = _lesser(mn[j], lo[j + dk])
                hb[j] |= vr[j + dk]
        for j in range(n_out):
            oc[j] = fill if hb[j] else t[j] / count - mn[j]

    @_jit
    def _cut_depth_rows(z, i0, i1, h, nd, use_nd, count, fill, out, o0, ring, vor, vor2, hb, s, lo, s2, lo2,
                        t, mn):
        """Cut depth of slab rows ``i0..i1-1`` (each with ``h`` rows above and below in ``z``) into
        ``out[o0 + k, h:m-h]``: the window sum as the reference adds it (the 2h+1 rows top to
        bottom, then the columns of that row sum left to right), divided by ``count``, minus the
        window minimum; ``fill`` where the window touches an invalid cell. Two output rows at a
        time, their columns in chunks of ``len(t)`` outputs (the row sums stay in the L1 cache)."""
        m = z.shape[1]
        w = 2 * h + 1
        nr = w + 1  # ring of flag rows: the two windows of a pair span w + 1 rows
        c = m - 2 * h
        cw = t.shape[0]
        for r in range(i0 - h, i0 + h):
            _flag_row(z[r], nd, use_nd, ring[r % nr])
        i = i0
        while i < i1:
            pair = i + 1 < i1
            _flag_row(z[i + h], nd, use_nd, ring[(i + h) % nr])
            if pair:
                _flag_row(z[i + 1 + h], nd, use_nd, ring[(i + 1 + h) % nr])
            # flags shared by both windows (rows i-h+1 .. i+h), then each window's own outer row
            rk = ring[(i - h + 1) % nr]
            for j in range(m):
                vor[j] = rk[j]
            for r in range(i - h + 2, i + h + 1):
                rk = ring[r % nr]
                for j in range(m):
                    vor[j] |= rk[j]
            if pair:
                rk = ring[(i + 1 + h) % nr]
                for j in range(m):
                    vor2[j] = vor[j] | rk[j]
            rk = ring[(i - h) % nr]
            for j in range(m):
                vor[j] |= rk[j]
            orow = out[o0 + i - i0]
            for c0 in range(0, c, cw):
                n_out = min(cw, c - c0)
                n_in = n_out + 2 * h
                if pair:
                    _vsum2(z, i - h, w, c0, n_in, s, lo, s2, lo2)
                else:
                    _vsum(z, i - h, w, c0, n_in, s, lo)
                _hpass(s, lo, vor[c0:c0 + n_in], w, n_out, count, fill, orow[h + c0:h + c0 + n_out], t, mn, hb)
                if pair:
                    orow2 = out[o0 + i + 1 - i0]
                    _hpass(s2, lo2, vor2[c0:c0 + n_in], w, n_out, count, fill, orow2[h + c0:h + c0 + n_out],
                           t, mn, hb)
            i += 2


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def prepare(z: np.ndarray, nodata: float | None, dtype: np.dtype | type) -> tuple[np.ndarray, object, bool] | None:
    """``(z, nd, use_nd)`` for the compiled loops: ``z`` as C-ordered float32/float64 and the NoData
    value in that dtype, compared as numpy compares ``z == nodata``; None when the compiled kernels
    do not take this input or output dtype (the reference then runs)."""
    if numba is None or np.dtype(dtype) not in _FLOATS:
        return None
    dt = z.dtype
    use_nd = nodata is not None and not np.isnan(nodata)
    if np.issubdtype(dt, np.integer):
        # the reference converts each tile to float64 and compares the integers with a float nodata in float64
        return np.ascontiguousarray(z, dtype=np.float64), np.float64(nodata if use_nd else 0.0), use_nd
    if dt not in _FLOATS and dt != np.dtype(np.float16):
        return None
    nd = dt.type(0)
    if use_nd:
        with warnings.catch_warnings(), np.errstate(over="ignore"):
            warnings.simplefilter("ignore")
            nd = dt.type(nodata)  # the only value of this dtype that can compare equal to nodata
            use_nd = bool(np.array([nd], dtype=dt) == nodata)  # ... if numpy's comparison says it does
    if dt == np.dtype(np.float16):
        return np.ascontiguousarray(z, dtype=np.float32), np.float32(nd), use_nd
    return np.ascontiguousarray(z), nd, use_nd


def slope_rows(z: np.ndarray, nd: object, use_nd: bool, out: np.ndarray, a: int, b: int, s0: int, r0: int,
               fill: float, d8x: float, d8y: float) -> None:
    """Fill ``out`` rows for absolute rows ``[a, b)`` (columns 1..m-2) from the slab ``z`` starting at row ``s0``."""
    m = z.shape[1]
    band = max(1, min(b - a, BAND_CELLS // m))
    hyp = np.zeros((band, m))
    badw = np.zeros((band, m), np.uint8)
    ring = np.zeros((3, m), np.uint8)
    with np.errstate(all="ignore"):
        for ra in range(a, b, band):
            rb = min(ra + band, b)
            k = rb - ra
            _slope_hyp(z, ra - s0, rb - s0, d8x, d8y, nd, use_nd, hyp, badw, ring)
            hv = hyp[:k]
            np.arctan(hv, out=hv)
            _slope_finish(hv, badw, k, fill, out, ra - r0)


def cut_depth_rows(z: np.ndarray, nd: object, use_nd: bool, out: np.ndarray, a: int, b: int, s0: int, r0: int,
                   fill: float, h: int, count: float) -> None:
    """Fill ``out`` rows for absolute rows ``[a, b)`` (columns h..m-h-1) from the slab ``z`` starting at row ``s0``."""
    m = z.shape[1]
    w = 2 * h + 1
    ring = np.zeros((w + 1, m), np.uint8)
    vor, vor2 = np.zeros(m, np.uint8), np.zeros(m, np.uint8)
    cw = min(CHUNK_COLS, m - 2 * h)
    s, lo, s2, lo2 = (np.empty(cw + 2 * h) for _ in range(4))
    t, mn = np.empty(cw), np.empty(cw)
    hb = np.zeros(cw, np.uint8)
    _cut_depth_rows(z, a - s0, b - s0, h, nd, use_nd, count, fill, out, a - r0, ring, vor, vor2, hb, s, lo, s2, lo2,
                    t, mn)


#: the kernels' names (as in ``planaria.terrain.kernels``) -> (window, their rows loop, its parameters: 8 dx and
#: 8 dy for slope, the halo and the window's cell count for cut depth)
_LOOPS: dict[str, tuple[int, Callable[..., None], tuple[float, ...]]] = {
    "slope": (3, slope_rows, (8.0, 8.0)),
    "cutdepth": (11, cut_depth_rows, (halo(11), 121.0)),
}


def warm_up(kernel: str | None = None, z_dtype: np.dtype | str | None = None,
            out_dtype: np.dtype | str | None = None) -> None:
    """Compile, or load from numba's cache, the loops of ``kernel`` (default: both) for DEMs of
    ``z_dtype`` and outputs of ``out_dtype`` (default: float32 and float64 each), so that the first
    real call does not pay for it."""
    names = [kernel] if kernel else sorted(_LOOPS)
    zs: list[np.dtype] = [np.dtype(z_dtype)] if z_dtype is not None else list(_FLOATS)
    outs: list[np.dtype] = [np.dtype(out_dtype)] if out_dtype is not None else list(_FLOATS)
    for name in names:
        window, loop, params = _LOOPS[name]
        for zt in zs:
            z = np.arange((window + 2) * (window + 3), dtype=zt).reshape(window + 2, window + 3)
            for ot in outs:
                run(z, window, -1.0, None, ot, loop, *params)


def run(z: np.ndarray, window: int, nodata: float | None, rows: tuple[int, int] | None, dtype: np.dtype | type | None,
        fill_rows: Callable[..., None], *params: Any) -> np.ndarray | None:
    """The slab contract of :mod:`planaria.terrain.window` around a compiled loop: the border rows and
    columns get the fill value, ``fill_rows(z, nd, use_nd, out, a, b, s0, r0, fill, *params)`` the others
    (``slope_rows``, ``cut_depth_rows``). None when the compiled loops do not take this input or output dtype."""
    z = check_elevations(z)
    dtype = output_dtype(z.dtype, dtype)
    prep = prepare(z, nodata, dtype)
    if prep is None:
        return None
    zc, nd, use_nd = prep
    h = halo(window)
    m = z.shape[1]
    r0, r1, s0, a, b = output_plan(z.shape, window, rows)
    fill = np.nan if nodata is None else float(nodata)
    with np.errstate(over="ignore"):  # a nodata beyond float32's range is inf in a float32 output, as np.full gives it
        if b <= a or m < window:
            return np.full((r1 - r0, m), fill, dtype=dtype)
        out = np.empty((r1 - r0, m), dtype=dtype)
        out[: a - r0] = fill
        out[b - r0:] = fill
        out[:, :h] = fill
        out[:, m - h:] = fill
    fill_rows(zc, nd, use_nd, out, a, b, s0, r0, fill, *params)
    return out
