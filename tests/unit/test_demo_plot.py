"""``planaria demo --plot`` without matplotlib (the optional ``plot`` extra): one line naming the fix, exit 2."""
from __future__ import annotations

import sys

import pytest


def _demo(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``planaria demo ARGS`` through the console-script entry point, in this process."""
    from planaria.cli import main
    monkeypatch.setattr(sys, "argv", ["planaria", "demo", *args])
    with pytest.raises(SystemExit) as info:
        main.main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_plot_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    # an import blocker: None in sys.modules makes "import matplotlib" raise ImportError
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    png = tmp_path / "heat.png"
    code, out, err = _demo(monkeypatch, capsys, "--plot", str(png))
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"planaria demo: --plot {png}: matplotlib is not installed")
    assert "pip install 'planaria[plot]'" in err
    assert not png.exists()


def test_plot_report_without_matplotlib_raises_one_line(monkeypatch, tmp_path):
    from planaria.demo.plot import plot_report
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(RuntimeError, match=r"pip install 'planaria\[plot\]'"):
        plot_report({}, tmp_path / "x.png")
