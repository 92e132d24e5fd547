"""The layer contract (``[tool.importlinter]`` in pyproject.toml, docs/architecture.md's layer table)
holds: ``lint-imports`` itself runs over the real package, imports inside functions included."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    found = str(exe) if exe.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is not installed; `pip install -e '.[test]'` installs it")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_lint_imports(), "--no-cache", "--no-logo", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_the_layer_contract_is_kept() -> None:
    res = _run()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    # the check is real: diagnose reads comm's flight record, so comm above diagnose is refused
    cfg = tmp_path / "contract.toml"
    cfg.write_text('[tool.importlinter]\nroot_package = "planaria"\n\n'
                   '[[tool.importlinter.contracts]]\nid = "upside-down"\nname = "upside down"\n'
                   'type = "layers"\ncontainers = ["planaria"]\nlayers = ["comm", "diagnose"]\n')
    res = _run(str(cfg))
    assert res.returncode != 0, res.stdout
    assert "planaria.diagnose is not allowed to import planaria.comm" in res.stdout
