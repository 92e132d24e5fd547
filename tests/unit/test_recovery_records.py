"""The job record's recoveries (``planaria.launch.recoveries``, pure) and ``planaria run --plot``
without matplotlib."""
from __future__ import annotations

import sys

import pytest

from planaria.launch import recoveries


def _rec(rank: int, **kw: object) -> dict:
    base = {"type": "recovery", "rank": rank, "number": 1, "lost": [1], "replaced_by": [[1, 3]], "version": 10,
            "detected_at": 12, "error": "ProcFailedError", "t_detect": 100.5, "t_done": 100.6, "attempts": 1,
            "ranks": 3, "revoke_shrink_s": 0.01, "substitution_s": 0.002, "restore_s": 0.003, "total_s": 0.015,
            "elapsed_s": 0.1}
    return base | kw


@pytest.mark.timeout(10)
def test_merge_takes_the_slowest_rank_and_the_first_detection() -> None:
    records = [_rec(0), _rec(2, detected_at=13, t_detect=100.4, restore_s=0.009, total_s=0.021, attempts=2),
               _rec(3, detected_at=-1, t_detect=100.45, error="RevokedError", t_done=100.7),
               _rec(0, number=2, lost=[0], replaced_by=[], continued=True, version=20),
               {"type": "checkpoints", "rank": 0, "times": [[99.0, 0.001, 0], [99.5, 0.003, 5]]},
               {"type": "checkpoints", "rank": 2, "times": [[99.0, 0.002, 0]]}, {"type": "hello", "rank": 0}]
    first, second = recoveries.merge(records, t0=99.0, kills=[98.0, 100.3])
    assert (first["number"], first["lost"], first["replaced_by"], first["version"]) == (1, [1], [[1, 3]], 10)
    assert first["detected_at"] == 12 and first["error"] == "ProcFailedError"      # a spare's -1 is no step
    assert first["restore_s"] == 0.009 and first["median"]["restore_s"] == 0.003 and first["attempts"] == 2
    assert first["t"] == pytest.approx(1.4) and first["t_end"] == pytest.approx(1.7)
    assert first["detection_s"] == pytest.approx(0.1) and first["reported_by"] == 3
    assert second["continued"] and second["replaced_by"] == [] and second["version"] == 20
    again = recoveries.merge(records + [_rec(0, restart=1, version=30)], t0=99.0)
    assert [(r["restart"], r["number"], r["version"]) for r in again] == [(0, 1, 10), (0, 2, 20), (1, 1, 30)]
    stats = recoveries.checkpoints(records)
    assert stats == {"count": 2, "median_s": 0.002, "max_s": 0.003}
    assert recoveries.checkpoint_line(stats) == "checkpoints: 2 per rank, median 2.0 ms, max 3.0 ms"


@pytest.mark.timeout(10)
def test_role_label_names_the_logical_rank_taken_over() -> None:
    assert recoveries.role_label("recovered", 2, 6) == "spare→L2"
    assert recoveries.role_label("survivor", 3, 3) == "survivor"
    assert recoveries.role_label("survivor", 1, 3) == "survivor→L1"       # after continuing on fewer ranks
    assert recoveries.role_label("spare", None, 4) == "spare" and recoveries.role_label(None, None) == ""


@pytest.mark.timeout(30)
def test_run_plot_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path) -> None:
    from planaria.cli import main
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # "import matplotlib" raises ImportError
    monkeypatch.setenv("PLANARIA_HOME", str(tmp_path))
    png = tmp_path / "timeline.png"
    monkeypatch.setattr(sys, "argv", ["planaria", "run", "-n", "1", "--plot", str(png), "--", "python", "-c", "0"])
    with pytest.raises(SystemExit) as info:
        main.main()
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err == f"planaria run: --plot {png}: matplotlib is not installed: pip install 'planaria[plot]'\n"
    assert not png.exists() and not (tmp_path / "jobs").exists()


@pytest.mark.timeout(10)
def test_the_recovered_event_code_is_planarias_own_and_not_a_fault() -> None:
    from planaria.events import codes
    assert codes.parse_code("PLANARIA_EVENT_RECOVERED") == codes.RECOVERED == codes.PLANARIA_BASE - 2
    assert codes.name_of(codes.RECOVERED) == "PLANARIA_EVENT_RECOVERED"
    assert codes.RECOVERED not in codes.FAULT_CODES and not codes.is_user(codes.RECOVERED)
