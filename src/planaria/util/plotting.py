"""matplotlib, an optional dependency (the ``plot`` extra): whether it is there, and pyplot without a display."""
from __future__ import annotations

from typing import Any

#: what to do when matplotlib is missing
INSTALL_HINT = "pip install 'planaria[plot]'"


def matplotlib_missing() -> str | None:
    """None when matplotlib can be imported, else one line naming the fix (checked before a run, so a
    long job does not end without its picture)."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        return f"matplotlib is not installed: {INSTALL_HINT}"
    return None


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (files, no display); RuntimeError (one line, naming
    the fix) without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(f"plotting needs matplotlib, which is not installed: {INSTALL_HINT}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
