"""``planaria abft --plot`` refused before the run: without matplotlib (the optional ``plot`` extra)
and with a picture that could not be written; one line, exit 2, nothing launched."""
from __future__ import annotations

import sys

import numpy as np
import pytest


def _abft(monkeypatch, capsys, tmp_path, *args: str) -> tuple[int, str, str]:
    """``planaria abft slope`` on a small DEM through the console-script entry point, in this process."""
    from planaria.cli import main
    dem = tmp_path / "dem.npy"
    np.save(dem, np.arange(64 * 48, dtype=np.float32).reshape(64, 48))
    monkeypatch.setenv("PLANARIA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "argv", ["planaria", "abft", "slope", "--dem", str(dem), "-n", "2",
                                      "--out", str(tmp_path / "out.npy"), *args])
    with pytest.raises(SystemExit) as info:
        main.main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.mark.timeout(30)
def test_plot_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # "import matplotlib" raises ImportError
    png = tmp_path / "errors.png"
    code, out, err = _abft(monkeypatch, capsys, tmp_path, "--plot", str(png))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err == f"planaria abft: --plot {png}: matplotlib is not installed: pip install 'planaria[plot]'\n"
    assert not png.exists() and not (tmp_path / "home").exists() and not (tmp_path / "out.npy").exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where,problem", [("missing/errors.png", "directory {d}/missing does not exist"),
                                           (".", "is a directory")])
def test_plot_that_cannot_be_written_is_refused_before_the_run(monkeypatch, capsys, tmp_path, where, problem):
    png = tmp_path / where
    code, out, err = _abft(monkeypatch, capsys, tmp_path, "--plot", str(png))
    assert code == 2 and out == ""
    assert err == f"planaria abft: --plot {png}: {problem.format(d=tmp_path)}\n"
    assert not (tmp_path / "home").exists()


@pytest.mark.timeout(30)
def test_plot_draw_without_matplotlib_raises_one_line(monkeypatch, tmp_path):
    from planaria.abft.plot import draw
    from planaria.abft.plotdata import PlotData
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(RuntimeError, match=r"pip install 'planaria\[plot\]'"):
        draw(PlotData(shape=(2, 2), title=""), np.zeros((2, 2)), 1, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ext", ["npy", "tif"])
def test_overview_samples_every_step_cells_band_by_band(tmp_path, ext):
    """The picture's background: every step-th cell of the file, read in bands, NoData as NaN."""
    from planaria.abft.plot import overview
    from planaria.terrain import Dem, write_dem
    z = np.arange(1003 * 701, dtype=np.float32).reshape(1003, 701)
    z[5 * 11, 3 * 11] = np.nan
    z[7 * 11, 2 * 11] = -9999.0
    path = write_dem(tmp_path / f"dem.{ext}", Dem(z, nodata=-9999.0 if ext == "tif" else None))
    got, step = overview(path, max_px=100, band_cells=701 * 30)     # 22 rows a band: 46 bands
    want = z[::11, ::11].astype(np.float64)
    if ext == "tif":
        want[want == -9999.0] = np.nan
    assert step == 11 and got.shape == (92, 64)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.isnan(got[5, 3]) and np.isnan(got[7, 2]) == (ext == "tif")
