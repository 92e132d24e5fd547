"""Slope in degrees by Horn's 3x3 method, as ``gdaldem slope`` (scale 1).

For the window::

    a b c
    d e f
    g h i

with ``cell_size = (dx, dy)`` (dx along columns, dy along rows)::

    dz/dx = ((c + 2f + i) - (a + 2d + g)) / (8 dx)
    dz/dy = ((g + 2h + i) - (a + 2b + c)) / (8 dy)
    slope = degrees(atan(sqrt(dz/dx^2 + dz/dy^2)))

Edge policy (GDAL's default, without ``-compute_edges``): the one-cell border
gets the fill value, and so does every cell whose 3x3 window touches a nodata
(or NaN) cell.  The fill value is ``nodata``, or NaN when ``nodata`` is None.
(``gdaldem`` itself always writes -9999 as its output nodata.)

Arithmetic is float64 throughout; the result is rounded to the output dtype (``dtype``, by default
the input's float type: see :func:`planaria.terrain.window.output_dtype`) when stored.  ``gdaldem`` adds the window values in
float32, so on float DEMs with large elevations the two differ by up to ~1e-4
degrees; on integer (e.g. 16-bit) DEMs they agree to gdaldem's float32 output
rounding.

Each output value is computed from its own 9 inputs with a fixed sequence of
elementwise operations, so it does not depend on the slab it was computed in.
See :mod:`planaria.terrain.window` for the ``rows``/halo contract.

:func:`slope_degrees` runs the compiled loop of :mod:`planaria.terrain.compiled` where it pays (:mod:`planaria.terrain.dispatch`);
:func:`slope_degrees_reference`, the numpy kernel, is the reference it is tested against bit for bit.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from planaria.terrain.dispatch import compiled_for
from planaria.terrain.window import run_window_kernel

WINDOW = 3


def _check_cell_size(cell_size: tuple[float, float]) -> tuple[float, float]:
    try:
        dx, dy = (float(cell_size[0]), float(cell_size[1]))
    except (TypeError, IndexError, ValueError):
        raise ValueError(f"cell_size must be (dx, dy), got {cell_size!r}") from None
    if not (dx > 0 and dy > 0 and math.isfinite(dx) and math.isfinite(dy)):
        raise ValueError(f"cell_size must be positive and finite, got {cell_size!r}")
    return dx, dy


def slope_degrees(
    z: np.ndarray,
    cell_size: tuple[float, float] = (1.0, 1.0),
    nodata: float | None = None,
    rows: tuple[int, int] | None = None,
    dtype: np.dtype | type | None = None,
    *,
    method: str | None = None,
) -> np.ndarray:
    """Slope (degrees) of ``z``; with ``rows=(r0, r1)``, ``z`` is the slab
    ``slab_bounds(r0, r1, H, 3)`` and only those output rows are returned.

    ``method``: ``compiled``, ``numpy`` or ``auto`` (default, :mod:`planaria.terrain.dispatch`: compiled
    for large slabs or once loaded). Both give the same bits: the numpy kernel (``method="numpy"``, or
    :func:`slope_degrees_reference`), which runs when the compiled loop does not take the dtypes."""
    dx, dy = _check_cell_size(cell_size)
    compiled = compiled_for(np.size(z), method)
    if compiled is not None:
        out = compiled.run(z, WINDOW, nodata, rows, dtype, compiled.slope_rows, 8.0 * dx, 8.0 * dy)
        if out is not None:
            return out
    return _slope_reference(z, dx, dy, nodata, rows, dtype)


#: the numpy slope kernel (tiles of in-place elementwise passes): the reference for :func:`slope_degrees`
slope_degrees_reference = functools.partial(slope_degrees, method="numpy")


def _side(mid: np.ndarray, first: np.ndarray, last: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """One side of Horn's window, ``(2 mid + first) + last``, in place in a new array (or ``out``)."""
    s = np.multiply(mid, 2.0, out=out)
    s += first
    s += last
    return s


def _slope_reference(z: np.ndarray, dx: float, dy: float, nodata: float | None, rows: tuple[int, int] | None,
                     dtype: np.dtype | type | None) -> np.ndarray:
    """The numpy slope kernel (tiles of in-place elementwise passes)."""
    def core(w: np.ndarray, h: int) -> np.ndarray:
        n, m = w.shape
        r = n - 2
        c = m - 2
        A = w[0:r, 0:c]
        B = w[0:r, 1 : c + 1]
        C = w[0:r, 2 : c + 2]
        D = w[1 : r + 1, 0:c]
        F = w[1 : r + 1, 2 : c + 2]
        G = w[2 : r + 2, 0:c]
        H = w[2 : r + 2, 1 : c + 1]
        I = w[2 : r + 2, 2 : c + 2]  # noqa: E741 - the 3x3 window cells A..I as named in the slope formula
        # the same operations in the same order as
        #   dzdx = ((C + 2F + I) - (A + 2D + G)) / (8 dx),  dzdy likewise,
        #   degrees(arctan(sqrt(dzdx^2 + dzdy^2)))
        # but in place (addition and multiplication are commutative bit for bit)
        p = _side(F, C, I)
        q = _side(D, A, G)
        p -= q
        p /= 8.0 * dx
        _side(H, G, I, out=q)
        q -= _side(B, A, C)
        q /= 8.0 * dy
        p *= p
        q *= q
        p += q
        np.sqrt(p, out=p)
        np.arctan(p, out=p)
        np.degrees(p, out=p)
        return p

    return run_window_kernel(z, WINDOW, nodata, rows, core, dtype)
