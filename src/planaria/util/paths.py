"""File names as the tools show them: normalized, so a program started as ``python tag/../x.py``
is reported at ``x.py``, not ``tag/../x.py`` (``os.path.normpath``; the name is not resolved
against the file system, so symbolic links stay as given)."""
from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=4096)
def shown(filename: str) -> str:
    """``filename`` without ``.``, ``..`` and doubled separators; pseudo-files (``<string>``) and
    empty names unchanged."""
    if not filename or filename.startswith("<"):
        return filename
    return os.path.normpath(filename)
