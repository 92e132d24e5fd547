"""Cut depth: window mean minus window minimum of elevation.

For each cell, over the ``window`` x ``window`` (default 11x11) block of
elevations centred on it::

    cut_depth = mean(block) - min(block)

(the depth by which the cell's neighbourhood lies above its lowest point; >= 0).
Border policy as for slope: cells closer than 5 (= ``halo(window)``) to an
edge, and cells whose window touches nodata/NaN, get the fill value (``nodata``,
or NaN when it is None).

Determinism: the window sum is a separable box sum in float64 -- first the
``window`` input rows of the block added one after another (top to bottom),
then the ``window`` columns of that row-sum added left to right -- and the
minimum a separable sliding minimum in the same fixed order.  Each output value
thus depends only on the input rows of its own window, never on where a slab
starts, so the same row computed by two workers is bit-identical (a summed-area
table over a slab would not be: its rounding depends on the slab's origin).
Rounding: the sum of ``window**2`` float64 values in this order differs from an
exactly rounded mean by at most about ``window**2 * eps * max|z|``, i.e.
~3e-14 relative to the elevations for 11x11.  The result is rounded to the output dtype
(``dtype``, by default the input's float type) when stored.

:func:`cut_depth` runs the compiled loop of :mod:`planaria.terrain.compiled` where it pays (:mod:`planaria.terrain.dispatch`);
:func:`cut_depth_reference`, the numpy kernel, is the reference it is tested against bit for bit.
"""

from __future__ import annotations

import functools

import numpy as np

from planaria.terrain.dispatch import compiled_for
from planaria.terrain.window import halo, run_window_kernel

WINDOW = 11


def cut_depth(
    z: np.ndarray,
    cell_size: tuple[float, float] = (1.0, 1.0),
    nodata: float | None = None,
    rows: tuple[int, int] | None = None,
    dtype: np.dtype | type | None = None,
    window: int = WINDOW,
    *,
    method: str | None = None,
) -> np.ndarray:
    """Cut depth of ``z``; ``cell_size`` is accepted for a uniform kernel
    signature and not used.  ``rows`` as in :mod:`planaria.terrain.window`.

    ``method``: ``compiled``, ``numpy`` or ``auto`` (default, :mod:`planaria.terrain.dispatch`: compiled
    for large slabs or once loaded). Both give the same bits: the numpy kernel (``method="numpy"``, or
    :func:`cut_depth_reference`), which runs when the compiled loop does not take the dtypes."""
    h = halo(window)
    count = float(window * window)
    compiled = compiled_for(np.size(z), method)
    if compiled is not None:
        out = compiled.run(z, window, nodata, rows, dtype, compiled.cut_depth_rows, h, count)
        if out is not None:
            return out
    return _cut_depth_reference(z, nodata, rows, dtype, window, count)


#: the numpy cut-depth kernel (tiles of separable passes): the reference for :func:`cut_depth`
cut_depth_reference = functools.partial(cut_depth, method="numpy")


def _cut_depth_reference(z: np.ndarray, nodata: float | None, rows: tuple[int, int] | None,
                         dtype: np.dtype | type | None, window: int, count: float) -> np.ndarray:
    """The numpy cut-depth kernel (tiles of separable passes)."""
    def core(w: np.ndarray, h: int) -> np.ndarray:
        n, m = w.shape
        r = n - 2 * h
        c = m - 2 * h
        s = w[0:r].copy()
        lo = w[0:r].copy()
        for k in range(1, window):
            s += w[k : k + r]
            np.minimum(lo, w[k : k + r], out=lo)
        t = s[:, 0:c].copy()
        mn = lo[:, 0:c].copy()
        for k in range(1, window):
            t += s[:, k : k + c]
            np.minimum(mn, lo[:, k : k + c], out=mn)
        t /= count
        t -= mn
        return t

    return run_window_kernel(z, window, nodata, rows, core, dtype)
