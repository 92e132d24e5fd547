"""The documentation site builds without a warning: ``mkdocs build --strict`` over docs/ and the
API reference generated from the docstrings (mkdocs.yml at the repository root).

A broken link or anchor between pages, a page missing from the nav, an API page naming an object
that does not exist, or a docstring the handler cannot parse fails this test with mkdocs' own
message.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: seconds; the build takes a few seconds, most of it reading the sources
BUILD_TIMEOUT = 120


@pytest.mark.timeout(BUILD_TIMEOUT + 30)
def test_docs_build_strict_without_warnings(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
           "--site-dir", str(tmp_path / "site")]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mkdocs build took more than {BUILD_TIMEOUT} s:\n{exc.stdout or ''}{exc.stderr or ''}")
    output = proc.stdout + proc.stderr
    if "No module named mkdocs" in output:
        pytest.fail("mkdocs is not installed: pip install -e '.[docs]' (the test extra includes it)")
    problems = [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0 and not problems, (
        f"mkdocs build --strict failed (exit {proc.returncode}):\n" + ("\n".join(problems) or output[-4000:]))
    assert (tmp_path / "site" / "api" / "planaria" / "index.html").is_file()
    assert (tmp_path / "site" / "bibliography" / "index.html").is_file()
