"""Row-slab contract shared by the window kernels.

A kernel with an odd ``window`` (3 for slope, 11 for cut depth) needs
``h = halo(window) = (window - 1) // 2`` input rows above and below each output
row.  Cells closer than ``h`` to any raster edge get the fill value (the
nodata value, or NaN when there is none), as ``gdaldem`` does without
``-compute_edges``.

To compute only the output rows ``r0 .. r1-1`` (absolute row indices of the
full raster with ``H`` rows), pass ``rows=(r0, r1)`` and, as input, the slab of
full rows ``[s0, s1)`` with ``(s0, s1) = slab_bounds(r0, r1, H, window)``, i.e.
``s0 = max(r0 - h, 0)`` and ``s1 = min(r1 + h, H)``.  The kernel returns an
array of ``r1 - r0`` rows, bit-identical to rows ``r0 .. r1-1`` of the
whole-raster result.  The kernel recognises the bottom edge of the raster by
the slab being shorter than ``r1 + h - s0`` rows (it then knows
``H = s0 + len(slab)``); a slab that is longer, or too short to hold the
requested rows, is rejected with ValueError.

The work is done in tiles of about ``TILE_CELLS`` output cells (``TILE_COLS`` wide, wider when
fewer rows are asked for), each with its own halo, so that the float64 temporaries stay in cache; a cell sees the same operations in
the same order whatever the tiling, so results do not depend on it (nor on the slab).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# output cells per tile (the kernels' float64 temporaries of one tile fit in L2/L3 cache)
TILE_COLS = 1024
TILE_CELLS = 1 << 15


def halo(window: int) -> int:
    """Rows (and columns) of context needed on each side for an odd ``window``."""
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd integer, got {window}")
    return (window - 1) // 2


def slab_bounds(r0: int, r1: int, total_rows: int, window: int) -> tuple[int, int]:
    """Input rows ``[s0, s1)`` a kernel needs to compute output rows ``[r0, r1)``."""
    if not 0 <= r0 <= r1 <= total_rows:
        raise ValueError(f"rows ({r0}, {r1}) outside a raster of {total_rows} rows")
    h = halo(window)
    return max(r0 - h, 0), min(r1 + h, total_rows)


def invalid_mask(z: np.ndarray, nodata: float | None) -> np.ndarray:
    """True where ``z`` is not finite (NaN, +inf, -inf) or equal to ``nodata``.

    An infinite elevation is treated as NoData, like NaN: the windows touching it get the fill
    value, and no inf - inf reaches the arithmetic (nor a numpy warning)."""
    bad = ~np.isfinite(z)
    if nodata is not None and not np.isnan(nodata):
        bad |= z == nodata
    return bad


def output_dtype(input_dtype: np.dtype | type | str, requested: np.dtype | type | str | None = None) -> np.dtype:
    """The dtype a kernel writes: ``requested`` when given, else the input's float type: float64 for a
    float64 (or wider) DEM, float32 for float32, float16 and integer DEMs (16-bit elevation models are
    the common integer case; ``gdaldem`` writes float32 too, and float32 holds a slope or a cut depth
    to far better than a DEM's own accuracy)."""
    if requested is not None:
        dt = np.dtype(requested)
        if not np.issubdtype(dt, np.floating):
            raise ValueError(f"output dtype must be a float type, got {dt}")
        return dt
    dt = np.dtype(input_dtype)
    if np.issubdtype(dt, np.floating) and dt.itemsize >= 8:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def check_elevations(z: np.ndarray) -> np.ndarray:
    """``z`` as an array, or ValueError when it is not a 2-D real numeric array."""
    z = np.asarray(z)
    if z.ndim != 2:
        raise ValueError(f"expected a 2-D elevation array, got shape {z.shape}")
    if not np.issubdtype(z.dtype, np.number) or np.issubdtype(z.dtype, np.complexfloating):
        raise ValueError(f"expected a real numeric elevation array, got dtype {z.dtype}")
    return z


def output_plan(shape: tuple[int, int], window: int,
                rows: tuple[int, int] | None) -> tuple[int, int, int, int, int]:
    """``(r0, r1, s0, a, b)`` for a slab of ``shape`` under the contract: output rows ``[r0, r1)``, the
    slab's first absolute row ``s0``, and the rows ``[a, b)`` that get computed values (the others
    are border rows: fill). ValueError when the slab does not match ``rows``."""
    h = halo(window)
    n, m = shape
    total: int | None   # None: the slab's bottom edge is not the raster's
    if rows is None:
        r0, r1, s0, total = 0, n, 0, n
    else:
        r0, r1 = (int(rows[0]), int(rows[1]))
        if not 0 <= r0 <= r1:
            raise ValueError(f"bad output rows {rows}")
        s0 = max(r0 - h, 0)
        full = r1 + h - s0
        if n > full or n < r1 - s0:
            raise ValueError(
                f"slab of {n} rows does not match rows ({r0}, {r1}) with halo {h}: "
                f"expected {full} rows (fewer only at the bottom edge, at least {r1 - s0})"
            )
        total = s0 + n if n < full else None  # None: bottom edge not in sight
    a = max(r0, h)
    b = r1 if total is None else min(r1, total - h)
    return r0, r1, s0, a, b


def run_window_kernel(
    z: np.ndarray,
    window: int,
    nodata: float | None,
    rows: tuple[int, int] | None,
    core: Callable[[np.ndarray, int], np.ndarray],
    dtype: np.dtype | type | None = None,
) -> np.ndarray:
    """Apply ``core`` to every full window of ``z`` under the slab contract.

    ``core(zz, h)`` receives a float64 array with invalid cells already
    replaced by 0 and returns the ``(n - 2h, m - 2h)`` interior values.  Windows
    touching an invalid cell and the ``h``-cell border get the fill value.  The values are computed
    in float64 and rounded to ``dtype`` (default :func:`output_dtype` of ``z``'s) when stored.
    """
    z = check_elevations(z)
    h = halo(window)
    m = z.shape[1]
    r0, r1, s0, a, b = output_plan(z.shape, window, rows)
    fill = np.nan if nodata is None else float(nodata)
    out = np.full((r1 - r0, m), fill, dtype=output_dtype(z.dtype, dtype))
    if b <= a or m < window:
        return out
    # tiles of output cells, small enough for the temporaries to stay in cache; every cell
    # still sees the same operations in the same order, so tiling changes no bit. A band of
    # fewer rows than a tile holds (a single row, say) gets wider tiles, so fewer numpy calls
    tc = min(m - 2 * h, max(TILE_COLS, TILE_CELLS // (b - a)))
    tr = max(1, TILE_CELLS // tc)
    for ra in range(a, b, tr):
        rb = min(ra + tr, b)
        for ca in range(h, m - h, tc):
            cb = min(ca + tc, m - h)
            zz = z[ra - h - s0 : rb + h - s0, ca - h : cb + h]
            vals = _tile(zz, h, nodata, fill, core)
            out[ra - r0 : rb - r0, ca:cb] = vals
    return out


def _tile(zz: np.ndarray, h: int, nodata: float | None, fill: float,
          core: Callable[[np.ndarray, int], np.ndarray]) -> np.ndarray:
    """``core`` on one tile of input (with its halo); windows touching an invalid cell get ``fill``."""
    bad = invalid_mask(zz, nodata)
    zf = zz.astype(np.float64)  # a fresh copy: zeroed in place where invalid
    if bad.any():
        zf[bad] = 0.0
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            return core(zf, h)
    # finite elevations near the float64 limit may still overflow: the result is then inf (or NaN),
    # as IEEE arithmetic gives it, without a warning on every rank
    with np.errstate(over="ignore", invalid="ignore"):
        vals = core(zf, h)
    # any invalid cell in the window -> fill (separable OR, fixed order)
    badr = bad[: bad.shape[0] - 2 * h].copy()
    for k in range(1, 2 * h + 1):
        badr |= bad[k : k + badr.shape[0]]
    badw = badr[:, : bad.shape[1] - 2 * h].copy()
    for k in range(1, 2 * h + 1):
        badw |= badr[:, k : k + badw.shape[1]]
    np.copyto(vals, fill, where=badw)
    return vals
