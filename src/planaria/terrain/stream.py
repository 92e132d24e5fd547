"""A kernel over a DEM file in one process, window by window: read a band of rows (with its halo),
compute it, write it, so neither the DEM nor the result is ever held whole.

The input is read through :class:`planaria.terrain.dem.RowReader` (a rasterio window read with the
file kept open, or one read at the ``.npy`` header's offset); each band's rows go to
:func:`planaria.terrain.dem.write_dem_rows` as soon as they are computed, which writes them into
the output as a window (GeoTIFF, ``.npy``) of a temporary file that is fsynced and renamed over the
output at the end (atomic: a reader sees the old file or the whole new one). The output is in the
DEM's float type by default (:func:`planaria.terrain.window.output_dtype`), float64 on request.

A band's rows are bit-identical to the same rows of the kernel on the whole raster (the row-slab
contract of :mod:`planaria.terrain.window`), so the file equals what the in-memory kernel gives.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from planaria.terrain.dem import RowReader, check_output, dem_info, write_dem_rows
from planaria.terrain.dispatch import worth_loading
from planaria.terrain.window import output_dtype, slab_bounds

BAND_CELLS = 1 << 22  # output cells per band (16 MB of float32; 277 rows of a 15,120-cell row)


def band_rows(width: int, cells: int = BAND_CELLS) -> int:
    """Rows per band for rasters ``width`` cells wide."""
    return max(1, cells // max(width, 1))


def run_file(kernel: str, dem: str | os.PathLike[str], out: str | os.PathLike[str],
             dtype: np.dtype | type | str | None = None, rows_per_band: int | None = None) -> dict[str, Any]:
    """Run ``kernel`` (``slope`` or ``cutdepth``) over the DEM file ``dem`` into ``out``, band by band.

    Returns the shape, the output dtype and the seconds spent reading, computing and writing
    (``write``: everything else, including the final fsync and rename). ValueError (one line)
    for a bad kernel, file or dtype."""
    from planaria.terrain import kernels
    if kernel not in kernels:
        raise ValueError(f"unknown kernel {kernel!r} (expected {', '.join(sorted(kernels))})")
    fn, window = kernels[kernel]
    info = dem_info(dem)
    out_p = check_output(out)
    if Path(dem).resolve() == out_p.resolve():
        raise ValueError(f"{out}: is the input DEM; give another output file")
    out_dt = output_dtype(info.stored_dtype or info.dtype, dtype)
    height, width = info.shape
    step = rows_per_band or band_rows(width)
    # the whole raster, not one band, decides whether loading the compiled loops pays
    method = "compiled" if worth_loading(height * width) else None
    times = {"read": 0.0, "compute": 0.0}

    def bands() -> Iterator[tuple[int, np.ndarray]]:
        with RowReader(dem) as rd:
            for r0 in range(0, height, step):
                r1 = min(height, r0 + step)
                s0, s1 = slab_bounds(r0, r1, height, window)
                t0 = time.perf_counter()
                slab = rd.rows(s0, s1)
                t1 = time.perf_counter()
                vals = fn(slab.data, info.cell_size, info.nodata, rows=(r0, r1), dtype=out_dt, method=method)
                times["read"] += t1 - t0
                times["compute"] += time.perf_counter() - t1
                yield r0, vals

    t0 = time.perf_counter()
    write_dem_rows(out_p, info.shape, out_dt, bands(), nodata=info.nodata, cell_size=info.cell_size,
                   profile=info.profile)
    total = time.perf_counter() - t0
    return {"kernel": kernel, "shape": [height, width], "dtype": out_dt.name, "rows_per_band": step,
            "read_s": times["read"], "compute_s": times["compute"],
            "write_s": total - times["read"] - times["compute"], "total_s": total, "out": str(out_p)}
