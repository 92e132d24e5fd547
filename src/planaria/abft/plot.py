"""``planaria abft --plot``: a PNG of where the run located errors and which blocks it recovered,
drawn over the input DEM (shaded relief).

The content comes from :func:`planaria.abft.plotdata.plot_data` (pure, from the report); this
module reads a small overview of the DEM and draws. Large rasters are read in bands of rows and
sampled every ``step`` rows and columns (:func:`overview`), so the picture is at most about
``MAX_PX`` cells on a side whatever the raster's size; the marks are drawn in raster coordinates
with a fixed size in points, so a single located cell stays visible on a 16,000-row raster.
matplotlib is the optional ``plot`` extra: without it :func:`draw` raises a one-line RuntimeError.
"""
from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from planaria.abft.plotdata import PlotData
from planaria.util.fsutil import atomic_write

#: what to do when matplotlib is missing (the ``plot`` extra)
INSTALL_HINT = "pip install 'planaria[plot]'"
MAX_PX = 1000          # cells of the overview on its longer side
BAND_CELLS = 1 << 22   # cells read at a time while sampling the overview

#: band colours and legend texts by kind (plotdata.Band.kind)
BAND_STYLE = {
    "failed": ("tab:red", "no result (crash, timeout, read or memory error)"),
    "mismatch": ("tab:purple", "flagged, no row located"),
    "recomputed": ("tab:orange", "recovered: recomputed on the same worker"),
    "reassigned": ("tab:blue", "recovered: moved to another worker"),
}


def overview(dem: str | os.PathLike[str], max_px: int = MAX_PX,
             band_cells: int = BAND_CELLS) -> tuple[np.ndarray, int]:
    """Every ``step``-th row and column of the DEM as float64, NoData and non-finite cells as NaN;
    returns (array, step). Reads bands of about ``band_cells`` cells (an ``.npz`` whole: it has
    no row access), so the raster is never held whole."""
    from planaria.terrain import dem_info, read_dem
    from planaria.terrain.dem import RowReader

    info = dem_info(dem)
    h, w = info.shape
    step = max(1, math.ceil(max(h, w) / max_px))
    if str(dem).lower().endswith(".npz"):
        d = read_dem(dem)
        return _clean(d.data[::step, ::step], d.nodata), step
    per_band = max(step, (band_cells // max(w, 1)) // step * step)     # a multiple of step: rows stay aligned
    parts = []
    with RowReader(dem) as rd:
        for r0 in range(0, h, per_band):
            d = rd.rows(r0, min(h, r0 + per_band))
            parts.append(_clean(d.data[::step, ::step], d.nodata if d.nodata is not None else info.nodata))
    return np.concatenate(parts), step


def _clean(z: np.ndarray, nodata: float | None) -> np.ndarray:
    out = np.array(z, dtype=np.float64)
    if nodata is not None:
        out[out == nodata] = np.nan
    out[~np.isfinite(out)] = np.nan
    return out


def _relief(ax: Any, z: np.ndarray, shape: tuple[int, int]) -> None:
    """Elevation colours with hillshading, stretched over the raster's full extent."""
    from matplotlib.colors import LightSource
    h, w = shape
    extent = (0, w, h, 0)
    valid = np.isfinite(z)
    if not valid.any():
        return
    filled = np.where(valid, z, float(np.nanmean(z)))
    lo, hi = np.nanpercentile(z, [2, 98])
    ax.imshow(np.ma.masked_invalid(z), cmap="terrain", vmin=lo, vmax=hi if hi > lo else lo + 1,
              extent=extent, interpolation="nearest", aspect="auto")
    shade = LightSource(azdeg=315, altdeg=45).hillshade(filled, vert_exag=1.0)
    ax.imshow(np.ma.masked_where(~valid, shade), cmap="gray", alpha=0.35, extent=extent,
              interpolation="nearest", aspect="auto")


def _bands(ax: Any, data: PlotData) -> list[Any]:
    from matplotlib.patches import Patch, Rectangle
    w = data.shape[1]
    for r0, _ in data.blocks[1:]:
        ax.axhline(r0, color="white", lw=0.6, ls=":")
    seen: dict[str, Any] = {}
    for b in data.bands:
        color, text = BAND_STYLE[b.kind]
        bad = b.kind in ("failed", "mismatch")
        ax.add_patch(Rectangle((0, b.r0), w, b.r1 - b.r0, fill=False, edgecolor=color, lw=2.5 if not bad else 1.5,
                               hatch="//" if bad else None, ls="-" if not bad else "--"))
        ax.text(w * 0.99 if bad else w * 0.01, b.r0 + 0.5 * (b.r1 - b.r0), b.label, fontsize=7, va="center",
                ha="right" if bad else "left", color="black",
                bbox={"facecolor": "white", "alpha": 0.75, "edgecolor": color, "pad": 1.5})
        seen.setdefault(b.kind, Patch(fill=False, edgecolor=color, lw=2, hatch="//" if bad else None, label=text))
    return list(seen.values())


def _marks(ax: Any, data: PlotData) -> list[Any]:
    handles = []
    w = data.shape[1]
    for row in data.conflicts:
        ax.axhline(row + 0.5, color="magenta", lw=1.2, ls="--")
    if data.conflicts:
        from matplotlib.lines import Line2D
        handles.append(Line2D([], [], color="magenta", ls="--", label="conflict: both workers differ from the masters"))
    if data.injected:
        rows, cols, _ = zip(*data.injected, strict=True)
        handles.append(ax.scatter(np.add(cols, 0.5), np.add(rows, 0.5), s=220, facecolors="none",
                                  edgecolors="black", linewidths=1.5, label="injected fault (bit flip)", zorder=4))
    xs, ys = [], []
    for m in data.marks:
        if not m.cols:
            ax.hlines(m.row + 0.5, 0, w, color="red", lw=1.5, zorder=5)
        xs += [c + 0.5 for c in m.cols]
        ys += [m.row + 0.5] * len(m.cols)
        if m.n_cols > len(m.cols) and m.cols:
            ax.annotate(f"+{m.n_cols - len(m.cols)} more", (m.cols[-1] + 0.5, m.row + 0.5), fontsize=7,
                        xytext=(4, 4), textcoords="offset points", color="red")
    if data.marks:
        handles.append(ax.scatter(xs, ys, s=45, c="red", edgecolors="white", linewidths=0.8, zorder=5,
                                  label=f"located error ({len(data.marks)} row(s) differing from the masters' copy)"))
    return handles


def draw(data: PlotData, z: np.ndarray, step: int, path: str | os.PathLike[str], background: str = "input DEM") -> Path:
    """Write the PNG for ``data`` over the overview ``z`` (sampled every ``step`` cells) to ``path``
    atomically; RuntimeError (one line, naming the fix) without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(f"plotting needs matplotlib, which is not installed: {INSTALL_HINT}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h, w = data.shape
    fig_w = 10.0
    fig_h = min(12.0, max(4.0, 7.0 * h / max(w, 1))) + 1.6
    fig, ax = plt.subplots(figsize=(fig_w, fig_h), constrained_layout=True)
    _relief(ax, z, data.shape)
    handles = _bands(ax, data) + _marks(ax, data)
    ax.set_xlim(0, w)
    ax.set_ylim(h, 0)
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    ax.set_yticks([r0 for r0, _ in data.blocks] + [h])
    sampled = f", drawn every {step} cells" if step > 1 else ""
    ax.set_title(f"{data.title}\nover the {background}{sampled}; dotted lines: block boundaries", fontsize=9)
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)       # PNG whatever the name ends with
    plt.close(fig)
    return atomic_write(path, buf.getvalue())


def plot_run(report: dict[str, Any], dem: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """The picture of a finished run: its report over its input DEM, written to ``path``."""
    from planaria.abft.plotdata import plot_data
    data = plot_data(report)
    z, step = overview(dem)
    return draw(data, z, step, path)
