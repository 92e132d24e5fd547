"""Which implementation runs a kernel call: numba's compiled loops or the numpy reference kernels.

Both give the same bits (:mod:`planaria.terrain.compiled`). The compiled loops cost a process a
one-off load of about 0.6 s of CPU (numba and llvmlite, then the machine code from numba's
cache), while the numpy kernels run at 30-60 M cells/s with nothing to load. So a call runs
compiled when the loops are loaded already or its slab has at least :data:`MIN_CELLS` cells;
below that the numpy kernel ends before numba would have loaded. A small job (an ABFT master's
referee rows, a test DEM) then never imports numba. ``PLANARIA_TERRAIN_KERNELS`` (``auto``,
``compiled`` or ``numpy``) or a call's ``method`` overrides the choice.
"""
from __future__ import annotations

import os
import sys
from types import ModuleType

from planaria.util.env import PLANARIA_TERRAIN_KERNELS

#: slab cells from which loading the compiled loops pays: the numpy cut-depth kernel takes about
#: 0.25 s here, well under the load
MIN_CELLS = 8_000_000
METHODS = ("auto", "compiled", "numpy")
_COMPILED = "planaria.terrain.compiled"


def method_of(method: str | None = None) -> str:
    """``method`` if given, else ``PLANARIA_TERRAIN_KERNELS`` (default ``auto``); ValueError names a bad one."""
    m = method if method is not None else (os.environ.get(PLANARIA_TERRAIN_KERNELS) or "auto")
    if m not in METHODS:
        src = "method" if method is not None else PLANARIA_TERRAIN_KERNELS
        raise ValueError(f"{src} must be one of {', '.join(METHODS)}, got {m!r}")
    return m


def compiled_for(cells: int, method: str | None = None) -> ModuleType | None:
    """The compiled-loops module when a call over a slab of ``cells`` cells should run them; None for numpy."""
    m = method_of(method)
    if m == "numpy" or (m == "auto" and cells < MIN_CELLS and _COMPILED not in sys.modules):
        return None
    from planaria.terrain import compiled
    return compiled if compiled.available() else None


def worth_loading(cells: int) -> bool:
    """Whether a process whose kernel calls cover ``cells`` cells each should load the compiled loops up front."""
    m = method_of()
    return m == "compiled" or (m == "auto" and cells >= MIN_CELLS)
