"""Running a few lines in a fresh interpreter, for tests of what a module imports or sets up at import."""
from __future__ import annotations

import subprocess
import sys


def fresh_python(code: str, timeout: float = 60.0) -> list[str]:
    """The words ``code`` prints, run by a new interpreter (this one's); fails the test when it does."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()
