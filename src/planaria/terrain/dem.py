"""The :class:`Dem` raster and its readers/writers.

Formats, chosen by extension:

* ``.npy`` -- the 2-D elevation array only (cell size (1, 1), no nodata).
* ``.npz`` -- key ``data`` (2-D array), optional ``nodata`` (scalar) and
  ``cell_size`` (two positive numbers, (dx, dy)).
* ``.tif`` / ``.tiff`` -- GeoTIFF, band 1, read and written through rasterio
  (imported lazily).  ``profile`` keeps the georeferencing (CRS, transform,
  ...) so that a DEM read and written back is placed where it was.

Windowed reads (:func:`read_dem_rows`, :func:`dem_info`): a parallel job reads only the rows
each rank needs.  GeoTIFF rows come through a rasterio window read, ``.npy`` rows through one
seek and one read at the offset the header gives (a Fortran-ordered ``.npy``, whose rows are
not contiguous, through a read-only memory map of which only the slice is copied).  ``.npz``
cannot be memory-mapped (its members are zip entries, possibly compressed): a row read of an
``.npz`` loads the whole array and keeps the slice, so use ``.npy`` or GeoTIFF for large DEMs.

Writes are atomic (temporary file in the same directory, fsync, rename).  :func:`write_dem_rows`
writes a raster given as row blocks, each as it comes (a GeoTIFF window, or appended to the
``.npy``), with GDAL's block cache held at ``GDAL_CACHE_MB`` meanwhile, so a large output is not
held in memory; :class:`RowReader` reads row windows with the file kept open.
Any unreadable or malformed input raises ValueError with one line naming the
file and the problem.
"""

from __future__ import annotations

import io
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import numpy as np

from planaria.util.fsutil import atomic_output, atomic_write, output_problem

_TIFF = (".tif", ".tiff")
GDAL_CACHE_MB = 64  # GDAL's block cache while a GeoTIFF is written in windows


@dataclass(eq=False)
class Dem:
    """A digital elevation model: ``data[row, col]``, row 0 at the north.

    ``cell_size`` is ``(dx, dy)``: dx along columns, dy along rows.  Integer
    data is converted to float64; float data keeps its dtype.  Instances
    compare by identity (the data is an array).
    """

    data: np.ndarray
    nodata: float | None = None
    cell_size: tuple[float, float] = (1.0, 1.0)
    profile: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        data = np.asarray(self.data)
        if data.ndim != 2:
            raise ValueError(f"DEM data must be 2-D, got shape {data.shape}")
        if not (np.issubdtype(data.dtype, np.integer) or np.issubdtype(data.dtype, np.floating)):
            raise ValueError(f"DEM data must be numeric, got dtype {data.dtype}")
        if not np.issubdtype(data.dtype, np.floating):
            data = data.astype(np.float64)
        self.data = data
        try:
            dx, dy = (float(v) for v in self.cell_size)
        except (TypeError, ValueError):
            raise ValueError(f"cell_size must be two numbers, got {self.cell_size!r}") from None
        if not (dx > 0 and dy > 0 and math.isfinite(dx) and math.isfinite(dy)):
            raise ValueError(f"cell_size must be positive and finite, got {self.cell_size!r}")
        self.cell_size = (dx, dy)
        if self.nodata is not None:
            self.nodata = float(self.nodata)

    @property
    def shape(self) -> tuple[int, int]:
        return self.data.shape


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _bad(path: Path, problem: str) -> ValueError:
    return ValueError(f"{path}: {' '.join(problem.split())}")


def check_output(path: str | os.PathLike[str]) -> Path:
    """``path`` as a raster to write, or a ValueError naming why it cannot be (format, directory)."""
    p = Path(path)
    ext = p.suffix.lower()
    if ext not in (".npy", ".npz", *_TIFF):
        raise _bad(p, f"unsupported DEM format {ext or '(no extension)'!r} (use .npy, .npz, .tif)")
    problem = output_problem(p)
    if problem:
        raise _bad(p, problem)
    return p


def read_dem(path: str | os.PathLike[str]) -> Dem:
    """Read a DEM from ``.npy``, ``.npz`` or GeoTIFF."""
    p = Path(path)
    ext = p.suffix.lower()
    if ext not in (".npy", ".npz", *_TIFF):
        raise _bad(p, f"unsupported DEM format {ext or '(no extension)'!r} (use .npy, .npz, .tif)")
    if not p.is_file():
        raise _bad(p, "no such file")
    if ext in _TIFF:
        return _read_tiff(p)
    try:
        loaded = np.load(p, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - any load failure is bad input
        raise _bad(p, f"cannot read {ext} file: {_one_line(exc)}") from None
    try:
        if ext == ".npy":
            if not isinstance(loaded, np.ndarray):
                raise _bad(p, "not a .npy array")
            return Dem(loaded)
        with loaded:
            if "data" not in loaded.files:
                raise _bad(p, f"missing key 'data' (keys: {', '.join(loaded.files) or 'none'})")
            data = loaded["data"]
            nodata = None
            if "nodata" in loaded.files:
                nd = loaded["nodata"]
                if nd.size != 1:
                    raise _bad(p, f"'nodata' must be a scalar, got shape {nd.shape}")
                nodata = float(nd.reshape(()))
            cell = (1.0, 1.0)
            if "cell_size" in loaded.files:
                cs = loaded["cell_size"]
                if cs.shape != (2,):
                    raise _bad(p, f"'cell_size' must hold two numbers, got shape {cs.shape}")
                cell = (cs[0], cs[1])
            return Dem(data, nodata, cell)
    except ValueError as exc:
        msg = str(exc)
        if msg.startswith(f"{p}:"):
            raise
        raise _bad(p, msg) from None


@dataclass(frozen=True)
class DemInfo:
    """What a DEM file holds, without its data: shape, dtype (as a :class:`Dem` holds it: integers
    become float64), nodata, cell size, GeoTIFF profile, and the dtype stored in the file."""

    shape: tuple[int, int]
    dtype: str
    nodata: float | None
    cell_size: tuple[float, float]
    profile: dict[str, Any] | None = None
    stored_dtype: str = ""


def _check_path(p: Path) -> str:
    ext = p.suffix.lower()
    if ext not in (".npy", ".npz", *_TIFF):
        raise _bad(p, f"unsupported DEM format {ext or '(no extension)'!r} (use .npy, .npz, .tif)")
    if not p.is_file():
        raise _bad(p, "no such file")
    return ext


def _npy_map(p: Path) -> np.ndarray:
    try:
        mm = np.load(p, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - any load failure is bad input
        raise _bad(p, f"cannot read .npy file: {_one_line(exc)}") from None
    _check_npy(p, getattr(mm, "shape", None), getattr(mm, "dtype", None))
    return mm


def _check_npy(p: Path, shape: Any, dtype: Any) -> None:
    if shape is None or len(shape) != 2:
        raise _bad(p, f"DEM data must be 2-D, got shape {shape}")
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
        raise _bad(p, f"DEM data must be numeric, got dtype {dtype}")


def _npy_header(p: Path) -> tuple[tuple[int, int], np.dtype, bool, int]:
    """Shape, dtype, Fortran order and data offset of a ``.npy`` file, from its header alone."""
    try:
        with open(p, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            offset = fh.tell()
    except Exception as exc:  # noqa: BLE001 - any header failure is bad input
        raise _bad(p, f"cannot read .npy file: {_one_line(exc)}") from None
    _check_npy(p, shape, dtype)
    return (int(shape[0]), int(shape[1])), dtype, bool(fortran), offset


def _npy_rows(p: Path, r0: int, r1: int) -> np.ndarray:
    """Rows ``[r0, r1)`` of a C-ordered ``.npy`` file, read with one seek and one read (no memory map:
    for a few rows, setting up and tearing down a map costs more than the read itself)."""
    shape, dtype, fortran, offset = _npy_header(p)
    if fortran:  # rows are not contiguous in the file: slice a memory map
        mm = _npy_map(p)
        _check_rows(p, r0, r1, mm.shape[0])
        return np.array(mm[r0:r1])
    _check_rows(p, r0, r1, shape[0])
    count = (r1 - r0) * shape[1]
    with open(p, "rb") as fh:
        fh.seek(offset + r0 * shape[1] * dtype.itemsize)
        data = np.fromfile(fh, dtype=dtype, count=count)
    if data.size != count:
        raise _bad(p, f"truncated .npy file: rows ({r0}, {r1}) need {count} values past row {r0}, got {data.size}")
    return data.reshape(r1 - r0, shape[1])


def dem_info(path: str | os.PathLike[str]) -> DemInfo:
    """Shape, dtype, nodata, cell size (and GeoTIFF profile) of a DEM file, reading no rows
    (except for ``.npz``, which is read whole)."""
    p = Path(path)
    ext = _check_path(p)
    if ext == ".npy":
        shape, dt, _, _ = _npy_header(p)
        dtype = dt if np.issubdtype(dt, np.floating) else np.dtype(np.float64)
        return DemInfo(shape, dtype.name, None, (1.0, 1.0), None, dt.name)
    if ext in _TIFF:
        return _with_tiff(p, lambda src, tr: DemInfo(
            (int(src.height), int(src.width)), _tiff_dtype(src), src.nodata, (abs(tr.a), abs(tr.e)),
            dict(src.profile), np.dtype(src.dtypes[0]).name))
    d = read_dem(p)
    with np.load(p, allow_pickle=False) as z:  # read_dem succeeded: a valid .npz with 'data'
        stored = z["data"].dtype.name
    return DemInfo(d.shape, d.data.dtype.name, d.nodata, d.cell_size, d.profile, stored)


def _tiff_dtype(src: Any) -> str:
    dt = np.dtype(src.dtypes[0])
    return dt.name if np.issubdtype(dt, np.floating) else "float64"


def read_dem_rows(path: str | os.PathLike[str], r0: int, r1: int) -> Dem:
    """Rows ``[r0, r1)`` of a DEM file (all columns) as a :class:`Dem` with the file's nodata,
    cell size and profile; only those rows are read, except from ``.npz`` (see the module doc)."""
    p = Path(path)
    ext = _check_path(p)
    if ext == ".npy":
        return Dem(_npy_rows(p, r0, r1))
    if ext in _TIFF:
        def window(src: Any, tr: Any) -> Dem:
            from rasterio.windows import Window
            _check_rows(p, r0, r1, src.height)
            data = src.read(1, window=Window(0, r0, src.width, r1 - r0))
            return Dem(data, src.nodata, (abs(tr.a), abs(tr.e)), dict(src.profile))
        return _with_tiff(p, window)
    d = read_dem(p)
    _check_rows(p, r0, r1, d.shape[0])
    return Dem(d.data[r0:r1].copy(), d.nodata, d.cell_size, d.profile)


class RowReader:
    """Rows of one DEM file, read window by window with the file kept open (GeoTIFF) between reads:
    ``with RowReader(path) as rd: rd.rows(r0, r1)`` gives what :func:`read_dem_rows` gives."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.ext = _check_path(self.path)
        self._src: Any = None

    def __enter__(self) -> RowReader:
        if self.ext in _TIFF:
            _with_tiff(self.path, lambda src, tr: None)  # readable, has a band, not rotated: or a one-line error
            self._src = _open_tiff(self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._src is not None:
            self._src.close()
            self._src = None

    def rows(self, r0: int, r1: int) -> Dem:
        """Rows ``[r0, r1)`` (all columns) as a :class:`Dem`."""
        if self._src is None:
            return read_dem_rows(self.path, r0, r1)
        from rasterio.windows import Window
        src = self._src
        _check_rows(self.path, r0, r1, src.height)
        try:
            data = src.read(1, window=Window(0, r0, src.width, r1 - r0))
        except Exception as exc:  # noqa: BLE001 - rasterio raises its own error types
            raise _bad(self.path, f"cannot read GeoTIFF rows ({r0}, {r1}): {_one_line(exc)}") from None
        tr = src.transform
        return Dem(data, src.nodata, (abs(tr.a), abs(tr.e)), dict(src.profile))


def _open_tiff(p: Path) -> Any:
    """An open rasterio dataset of ``p`` (already checked by :func:`_with_tiff`)."""
    import rasterio
    try:
        return rasterio.open(p)
    except Exception as exc:  # noqa: BLE001 - rasterio raises its own error types
        raise _bad(p, f"cannot read GeoTIFF: {_one_line(exc)}") from None


def _check_rows(p: Path, r0: int, r1: int, total: int) -> None:
    if not 0 <= r0 <= r1 <= total:
        raise _bad(p, f"rows ({r0}, {r1}) outside a raster of {total} rows")


def _with_tiff(p: Path, fn: Any) -> Any:
    """Open ``p`` with rasterio and return ``fn(src, transform)``; one-line ValueErrors."""
    try:
        import rasterio
    except ImportError:
        raise _bad(p, "reading GeoTIFF needs rasterio, which is not installed") from None
    try:
        with rasterio.open(p) as src:
            if src.count < 1:
                raise _bad(p, "GeoTIFF has no bands")
            tr = src.transform
            if tr.b != 0 or tr.d != 0:
                raise _bad(p, "rotated or sheared geotransforms are not supported")
            return fn(src, tr)
    except Exception as exc:  # noqa: BLE001 - rasterio raises its own error types
        if isinstance(exc, ValueError) and str(exc).startswith(f"{p}:"):
            raise
        raise _bad(p, f"cannot read GeoTIFF: {_one_line(exc)}") from None


def _read_tiff(p: Path) -> Dem:
    data, nodata, tr, profile = _with_tiff(p, lambda src, tr: (src.read(1), src.nodata, tr, dict(src.profile)))
    try:
        return Dem(data, nodata, (abs(tr.a), abs(tr.e)), profile)
    except ValueError as exc:
        raise _bad(p, str(exc)) from None


def write_dem(path: str | os.PathLike[str], dem: Dem) -> Path:
    """Write ``dem`` atomically; the format follows the extension."""
    p = Path(path)
    ext = p.suffix.lower()
    if ext == ".npy":
        buf = io.BytesIO()
        np.save(buf, dem.data, allow_pickle=False)
        return atomic_write(p, buf.getvalue())
    if ext == ".npz":
        # Any: numpy's stubs type savez's **kwds together with its allow_pickle flag (bool)
        arrays: dict[str, Any] = {
            "data": dem.data,
            "cell_size": np.asarray(dem.cell_size, dtype=np.float64),
        }
        if dem.nodata is not None:
            arrays["nodata"] = np.asarray(dem.nodata, dtype=np.float64)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return atomic_write(p, buf.getvalue())
    if ext in _TIFF:
        return _write_tiff(p, dem)
    raise _bad(p, f"unsupported DEM format {ext or '(no extension)'!r} (use .npy, .npz, .tif)")


def _write_tiff(p: Path, dem: Dem) -> Path:
    """A whole raster is one row block of the streamed writer."""
    return _write_tiff_rows(p, dem.data.shape, dem.data.dtype, [(0, dem.data)], dem.nodata, dem.cell_size,
                            dem.profile)


def write_dem_rows(
    path: str | os.PathLike[str],
    shape: tuple[int, int],
    dtype: np.dtype | type | str,
    row_blocks: Iterable[tuple[int, np.ndarray]],
    nodata: float | None = None,
    cell_size: tuple[float, float] = (1.0, 1.0),
    profile: dict[str, Any] | None = None,
) -> Path:
    """Write a raster given as row blocks ``(r0, rows)`` that tile ``[0, H)`` in order, atomically.

    ``.npy`` and GeoTIFF are streamed one block at a time (a block may be a memory map), so the
    raster is never held whole; ``.npz`` is concatenated in memory first (zip members cannot be
    streamed here).
    """
    p = Path(path)
    ext = p.suffix.lower()
    dt = np.dtype(dtype)
    rows_total, cols = (int(shape[0]), int(shape[1]))

    def blocks() -> Iterable[tuple[int, np.ndarray]]:
        nxt = 0
        for r0, rows in row_blocks:
            if r0 != nxt or rows.ndim != 2 or rows.shape[1] != cols:
                raise ValueError(f"{p}: row block at {r0} (shape {rows.shape}) does not continue at row {nxt} "
                                 f"of a {rows_total} x {cols} raster")
            nxt = r0 + rows.shape[0]
            yield r0, rows
        if nxt != rows_total:
            raise ValueError(f"{p}: row blocks end at row {nxt}, expected {rows_total}")

    if ext == ".npz":
        parts = [np.asarray(rows, dtype=dt) for _, rows in blocks()]
        data = np.concatenate(parts, axis=0) if parts else np.empty((0, cols), dt)
        return write_dem(p, Dem(data, nodata, cell_size, profile))
    if ext == ".npy":
        with atomic_output(p, suffix=".tmp.npy") as tmp, open(tmp, "wb") as fh:
            np.lib.format.write_array_header_1_0(
                fh, {"descr": np.lib.format.dtype_to_descr(dt), "fortran_order": False,
                     "shape": (rows_total, cols)})
            for _, rows in blocks():
                np.ascontiguousarray(rows, dtype=dt).tofile(fh)
        return p
    if ext in _TIFF:
        return _write_tiff_rows(p, (rows_total, cols), dt, blocks(), nodata, cell_size, profile)
    raise _bad(p, f"unsupported DEM format {ext or '(no extension)'!r} (use .npy, .npz, .tif)")


def _write_tiff_rows(p: Path, shape: tuple[int, int], dt: np.dtype, blocks: Iterable[tuple[int, np.ndarray]],
                     nodata: float | None, cell_size: tuple[float, float], profile: dict[str, Any] | None) -> Path:
    try:
        import rasterio
        from rasterio.errors import NotGeoreferencedWarning
        from rasterio.transform import Affine
        from rasterio.windows import Window
    except ImportError:
        raise _bad(p, "writing GeoTIFF needs rasterio, which is not installed") from None
    rows, cols = shape
    prof: dict[str, Any] = dict(profile or {})
    if "transform" not in prof:
        dx, dy = cell_size
        prof["transform"] = Affine(dx, 0.0, 0.0, 0.0, -dy, 0.0)
    prof.update(driver="GTiff", height=rows, width=cols, count=1, dtype=dt.name, nodata=nodata)
    if prof.get("tiled") and (rows < 16 or cols < 16):
        prof["tiled"] = False
        prof.pop("blockxsize", None)
        prof.pop("blockysize", None)
    try:
        with atomic_output(p, suffix=".tmp.tif") as tmp:
            # GDAL's block cache (5 % of the memory by default) would keep most of a large raster until
            # the file is closed; kept small, the blocks go to the file as the windows are written
            with rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_MB):
                with warnings.catch_warnings():
                    # a DEM read from .npy/.npz has no georeference; writing it without one is intended
                    warnings.simplefilter("ignore", NotGeoreferencedWarning)
                    dst_ctx = rasterio.open(tmp, "w", **prof)
                with dst_ctx as dst:
                    for r0, part in blocks:
                        dst.write(np.asarray(part, dtype=dt), 1, window=Window(0, r0, cols, part.shape[0]))
    except Exception as exc:
        if not isinstance(exc, (OSError, ValueError)):
            raise _bad(p, f"cannot write GeoTIFF: {_one_line(exc)}") from None
        raise
    return p
