"""Neighbourhood terrain analysis on DEMs (pure numpy, no MPI).

* :mod:`planaria.terrain.dem` -- the :class:`Dem` raster and its readers/writers
  (``.npy``, ``.npz``, GeoTIFF through rasterio).
* :mod:`planaria.terrain.slope` -- Horn's 3x3 slope, as ``gdaldem slope``.
* :mod:`planaria.terrain.cutdepth` -- cut depth over an 11x11 window.

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
from planaria.terrain.window import halo, slab_bounds

kernels = {
    "slope": (slope_degrees, 3),
    "cutdepth": (cut_depth, 11),
}

__all__ = ["Dem", "DemInfo", "check_output", "dem_info", "read_dem_rows", "write_dem_rows", "cut_depth", "halo", "kernels", "read_dem", "slab_bounds", "slope_degrees", "write_dem"]
