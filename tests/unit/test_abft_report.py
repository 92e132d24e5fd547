"""The text report of ``planaria abft``: one fact per line, readable at 80 columns, workers by index."""
from __future__ import annotations

from pathlib import Path

import pytest

from planaria.cli.abft import _print

#: the report of a real run on 4 workers with --force silent:1 --force crash:2 (trimmed)
REPORT = {
    "errors": [{"round": 0, "block": 1, "worker": 3, "status": 1,
                "error": "mismatch: first row 30 differ from the masters' copy"},
               {"round": 0, "block": 2, "worker": 4, "status": 0, "error": "timeout/crash"}],
    "located": [3],
    "recoveries": [{"round": 0, "action": "recompute", "block": 1, "worker": 3, "source": None},
                   {"round": 0, "action": "exclude", "block": 2, "worker": 4, "source": None},
                   {"round": 0, "action": "reassign", "block": 2, "worker": 2, "source": 4}],
    "rounds": 2, "mode": "abft",
    "timings": {"compute": 0.23900266599991937, "verification": 0.00011386899996068678,
                "recovery": 0.00019939499998145038},
    "injected": [{"kind": "silent", "worker": 1, "rank": 3, "block": 1,
                  "where": {"copy": "first", "row": 30, "col": 58, "bit": 0}},
                 {"kind": "crash", "worker": 2, "rank": 4, "block": 2,
                  "where": {"phase": "before computing its first task"}}],
    "conflicts": [], "ok": True, "finisher": "primary", "digest": "cd33f311b310dc098049190c1ffc6807",
    "replica_agreed": True, "kernel": "slope", "workers": 4, "shape": [120, 80], "verified": True,
}


def _lines(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int,
           report: dict | None = None) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    _print(report or REPORT, Path("/data/out/slope.npz"))
    return capsys.readouterr().out.splitlines()


def test_report_fits_80_columns_one_fact_per_line(capsys, monkeypatch) -> None:
    lines = _lines(capsys, monkeypatch, 80)
    assert all(len(ln.rstrip()) <= 80 for ln in lines), lines
    for fact in ("N-ABFT slope on 4 workers (MPI ranks 2..5), 120 x 80 cells, mode abft",
                 "round 0: reassign block 2 on worker 0 (rank 2), from worker 2 (rank 4)",
                 "rounds 2, finished by the primary master, replica agreed: yes",
                 "time: compute 0.239 s, verification 0.0001 s, recovery 0.0002 s",
                 "injected silent on worker 1 (rank 3), block 1: copy first, row 30, col 58, bit 0",
                 "every block verified", "output: /data/out/slope.npz",
                 "digest: cd33f311b310dc098049190c1ffc6807"):
        assert fact in lines, (fact, lines)
    # the table names the worker by its index (what --force takes) and by its MPI rank
    row = next(ln for ln in lines if "transient" in ln)
    assert row.replace("│", " ").split()[:5] == ["0", "1", "1", "3", "transient"]


def test_a_narrow_terminal_wraps_between_words_with_indented_continuations(capsys, monkeypatch) -> None:
    lines = _lines(capsys, monkeypatch, 50)
    text = [ln for ln in lines if not ln.startswith(("┏", "┃", "┡", "│", "└", "blocks"))]
    assert all(len(ln.rstrip()) <= 50 for ln in text), text
    assert "time: compute 0.239 s, verification 0.0001 s," in text and "    recovery 0.0002 s" in text
    failed = dict(REPORT, ok=False, fatal="block 3: no live worker left (all excluded or dead)", digest=None)
    out = _lines(capsys, monkeypatch, 60, failed)
    assert any(ln.startswith("not verified: block 3: no live worker left") for ln in out), out
    assert not any(ln.startswith(("output:", "digest:")) for ln in out)
