"""``planaria diagnose --dot/--svg`` on a state file: the picture names the ranks and sites the
diagnosis names, root causes highlighted; without Graphviz dot, --svg is one line and exit 2."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchmarks.synth import synthetic_state
from planaria.diagnose.state import write_state

SRC = Path(__file__).resolve().parents[2] / "src"
SVG = "{http://www.w3.org/2000/svg}"
ROOT_FILL = "#ffd6d6"


def svg_nodes(svg: bytes) -> dict[str, tuple[list[str], set[str]]]:
    """Node name -> (its text lines, the fill colours of its shapes), from dot's SVG (which must parse)."""
    out = {}
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if g.get("class") != "node":
            continue
        title = g.find(f"{SVG}title")
        texts = [t.text or "" for t in g.iter(f"{SVG}text")]
        fills = {s.get("fill") or "" for s in g if s.tag in (f"{SVG}polygon", f"{SVG}ellipse", f"{SVG}path")}
        out[title.text if title is not None else ""] = (texts, fills)
    return out


def _cli(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "planaria.cli.main", "diagnose", *args], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.fixture
def hung(tmp_path: Path) -> tuple[Path, dict]:
    """The state file of a 120-rank job hung in an Allreduce whose host cn00003's 6 ranks have no state."""
    state = synthetic_state(20, 6, scenario="collective", seed=4)
    write_state(tmp_path / "job.state", state)
    return tmp_path / "job.state", state["synth"]


@pytest.mark.timeout(60)
def test_svg_without_dot_is_refused_before_the_analysis(tmp_path: Path, hung: tuple[Path, dict]) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()                                   # a PATH on which there is no dot
    svg = tmp_path / "d.svg"
    res = _cli("--offline", str(hung[0]), "--svg", str(svg), path=str(empty))
    assert res.returncode == 2 and res.stdout == "", res.stderr
    assert res.stderr == (f"planaria diagnose: --svg {svg}: Graphviz dot is not on PATH: install graphviz "
                          f"(apt-get install graphviz)\n")
    assert not svg.exists()
    res = _cli("--offline", str(hung[0]), "--dot", str(tmp_path / "d.dot"), path=str(empty))   # --dot needs no dot
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "d.dot").read_text().startswith("digraph diagnosis {")


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not installed")
def test_svg_names_the_root_causes_and_the_collective(tmp_path: Path, hung: tuple[Path, dict]) -> None:
    svg, dot = tmp_path / "d.svg", tmp_path / "d.dot"
    res = _cli("--offline", str(hung[0]), "--svg", str(svg), "--dot", str(dot))
    assert res.returncode == 0, res.stderr
    truth = hung[1]
    ran = subprocess.run(["dot", "-Tsvg"], input=dot.read_bytes(), capture_output=True, timeout=30)
    assert ran.stdout == svg.read_bytes()                 # the SVG is the --dot text, drawn
    nodes = svg_nodes(svg.read_bytes())
    roots = {f"w_r{r}" for r in truth["root_ranks"]}
    for name in roots:
        texts, fills = nodes[name]
        assert texts[0] == "ROOT CAUSE: no-state" and texts[1] == f"rank {name[3:]}" and ROOT_FILL in fills, texts
        assert any(f"host {truth['faulty_host']} down" in t for t in texts), texts
    others = {k for k, (_, fills) in nodes.items() if ROOT_FILL in fills and k.startswith("w_")}
    assert others == roots                                # nothing else is marked a root cause
    texts, _ = nodes["w_g0"]
    assert texts[0].startswith("Allreduce #") and texts[0].endswith(" on world") and texts[1] == "114 of 120 members in it"
    tree = [" ".join(t) for k, (t, _) in nodes.items() if k.startswith("t")]
    assert "residual_norm solver.py:88" in tree, tree     # the call tree of the stable threads


@pytest.mark.timeout(60)
def test_svg_that_cannot_be_written_is_refused(tmp_path: Path, hung: tuple[Path, dict]) -> None:
    res = _cli("--offline", str(hung[0]), "--svg", str(tmp_path / "no-dir" / "d.svg"))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == f"planaria diagnose: --svg {tmp_path / 'no-dir' / 'd.svg'}: directory {tmp_path / 'no-dir'} does not exist\n"


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not installed")
def test_a_dot_failure_is_one_line() -> None:
    from planaria.diagnose.picture import DotError, render_svg
    with pytest.raises(DotError) as info:
        render_svg("digraph diagnosis { a -> ")          # cut short: dot refuses it
    assert str(info.value).startswith("dot failed (exit status 1): ") and "\n" not in str(info.value)
