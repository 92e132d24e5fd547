"""The fragments runtime's settings from the environment (set by ``planaria fragments`` or by hand).

A bad value must name its variable: a bare ``int('x')`` error from deep in ``fr.run`` does not
say which of a dozen variables was wrong.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Collection
from typing import TypeVar
from planaria.errors import BadInput

T = TypeVar("T", int, float)


class SettingError(BadInput):
    """An environment variable of the fragments runtime holds a value it cannot use."""


def number(name: str, kind: Callable[[str], T], default: T, minimum: T | None = None) -> T:
    """``kind(os.environ[name])``, or ``default`` when unset or empty; raises ``SettingError`` naming it."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    what = "an integer" if kind is int else "a number"
    try:
        value = kind(raw)
    except ValueError:
        raise SettingError(f"{name} must be {what}, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise SettingError(f"{name} must be {what} >= {minimum}, not {raw!r}")
    return value


def choice(name: str, allowed: Collection[str], default: str) -> str:
    """``os.environ[name]`` lower-cased if it is one of ``allowed``, ``default`` when unset or empty."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in allowed:
        raise SettingError(f"{name} must be one of {', '.join(allowed)}, not {raw!r}")
    return raw
