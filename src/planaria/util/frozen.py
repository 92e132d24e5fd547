"""Small immutable value classes without the ``dataclasses`` module.

Every rank loads the event classes in ``world()``; ``dataclasses`` imports ``inspect``, ``ast``
and ``tokenize``, about 10 ms of CPU per rank, which 16 ranks on 2 cores turn into 0.08 s of a
job's start. A subclass lists its fields in ``__slots__`` (in its ``__init__``'s order) and sets
them with ``_set``; equality, hash, ``repr``, copying and pickling come from the fields, as a
frozen dataclass's do.
"""
from __future__ import annotations

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any



class Frozen:
    """Base of an immutable value class whose fields are its ``__slots__``."""

    __slots__: tuple[str, ...] = ()

    def _set(self, **values: Any) -> None:
        """Set fields (in ``__init__`` only)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (field name -> value), like ``dataclasses.replace``."""
        values = {name: getattr(self, name) for name in self.__slots__}
        values.update(changes)
        return type(self)(**values)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return type(self), self._values()
