"""The code checks a maintainer relies on: ruff, mypy, the layer contract and the function-size bound.

Each runs the real tool over the real tree, so a change that breaks one fails the suite.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "planaria"
BENCHMARKS = ROOT / "benchmarks"
MAX_LINES = 80
#: a function longer than MAX_LINES is allowed when this marker, followed by the reason, sits in the
#: comment lines right above its ``def`` (or its decorators)
MARKER = "# long function:"


def _tool(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; `pip install -e '.[test]'` installs it")
    return found


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_ruff_is_clean() -> None:
    res = _run([_tool("ruff"), "check", "--no-cache", "src", "tests", "benchmarks"])
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_is_clean() -> None:
    res = _run([_tool("mypy"), "--cache-dir", str(ROOT / ".mypy_cache")])
    assert res.returncode == 0, res.stdout + res.stderr


def _long_functions(path: Path, root: Path = ROOT) -> list[str]:
    lines = path.read_text().splitlines()
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
        if length <= MAX_LINES:
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        above = []
        i = first - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.append(lines[i].strip())
            i -= 1
        if not any(c.startswith(MARKER) and len(c) > len(MARKER) + 3 for c in above):
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {length} lines")
    return found


@pytest.mark.parametrize("tree", [SRC, BENCHMARKS], ids=["src", "benchmarks"])
def test_no_function_over_80_lines_without_a_reason(tree: Path) -> None:
    found = [f for p in sorted(tree.rglob("*.py")) for f in _long_functions(p)]
    assert not found, "\n".join(found)


def test_the_size_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    p = tmp_path / "m.py"
    p.write_text(f"def f():\n{body}\n")
    assert _long_functions(p, tmp_path)
    p.write_text(f"{MARKER} a table of cases reads best in one place\ndef f():\n{body}\n")
    assert not _long_functions(p, tmp_path)

