"""Neighbourhood terrain analysis on DEMs (numpy and compiled loops, no MPI).

* :mod:`planaria.terrain.dem` -- the :class:`Dem` raster and its readers/writers
  (``.npy``, ``.npz``, GeoTIFF through rasterio).
* :mod:`planaria.terrain.slope` -- Horn's 3x3 slope, as ``gdaldem slope``.
* :mod:`planaria.terrain.cutdepth` -- cut depth over an 11x11 window.
* :mod:`planaria.terrain.compiled` -- the numba loops both kernels run, bit-identical to their
  numpy reference kernels (``slope_degrees_reference``, ``cut_depth_reference``).

Kernels write the input's float type by default (float32 for float32 and integer DEMs, float64
for float64 ones; :func:`output_dtype`), float64 on request (``dtype=``).

Every kernel can compute a band of output rows from a slab of input rows that
includes a halo of :func:`halo` rows on each side (see
:mod:`planaria.terrain.window`).  A row's result depends only on the input rows
of its window, never on where the slab starts, so two workers computing the
same row get bit-identical results; redundant-row comparison (ABFT) relies on
this.

``kernels`` maps a kernel name to ``(function, window)``.
"""

from __future__ import annotations

from planaria.terrain.cutdepth import cut_depth
from planaria.terrain.dem import Dem, DemInfo, check_output, dem_info, read_dem, read_dem_rows, write_dem, write_dem_rows
from planaria.terrain.slope import slope_degrees
from planaria.terrain.window import halo, output_dtype, slab_bounds

kernels = {
    "slope": (slope_degrees, 3),
    "cutdepth": (cut_depth, 11),
}

__all__ = ["Dem", "DemInfo", "check_output", "dem_info", "read_dem_rows", "write_dem_rows", "cut_depth", "halo", "kernels", "output_dtype", "read_dem", "slab_bounds", "slope_degrees", "write_dem"]
