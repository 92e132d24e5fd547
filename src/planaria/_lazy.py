"""numpy imported on its first use: ``pl.world()`` and a rank's runtime need it only once a call
handles a buffer, and its import is about 70 ms of CPU per rank at start (most of what planaria
adds to a rank's start). Not ``importlib.util.LazyLoader``: before Python 3.12 two threads that
touch a lazily loaded module first at once can see it half made, and a rank has several threads."""
from __future__ import annotations

from typing import Any


class _Numpy:
    """Stands for the ``numpy`` module: the first attribute read imports it (under the import lock,
    so threads are safe) and keeps that attribute here, so later reads cost a plain lookup."""

    def __getattr__(self, name: str) -> Any:
        import numpy

        value = getattr(numpy, name)
        setattr(self, name, value)
        return value


np: Any = _Numpy()
