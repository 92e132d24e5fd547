"""Modules loaded on first use, to keep a rank's start short.

numpy: ``pl.world()`` and a rank's runtime need it only once a call handles a buffer, and its
import is about 70 ms of CPU per rank at start. Not ``importlib.util.LazyLoader``: before Python 3.12 two threads that
touch a lazily loaded module first at once can see it half made, and a rank has several threads."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
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


def reexport(package: str, homes: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``package`` that imports the submodule named in
    ``homes[name]`` (relative, e.g. ``".rules"``) when ``name`` is first read, and keeps the name
    in ``namespace``: a package re-exports its parts without importing them all with itself."""
    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        namespace[name] = value
        return value
    return __getattr__
