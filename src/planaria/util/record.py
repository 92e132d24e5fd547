"""Classes of plain fields, as ``@dataclass`` makes them, without the dataclasses module.

``planaria run`` starts mpiexec as soon as it can; the dataclasses module (with ``inspect``,
``ast``, ``dis`` and ``tokenize``) and the code it writes for each class are about 8 ms of CPU
on that path. ``@record`` reads the class's annotated fields and their defaults and gives it an
``__init__`` (positional or keyword, in the fields' order), ``__repr__`` and ``__eq__`` like a
dataclass's; ``@record(frozen=True)`` also refuses assignments and hashes the fields.
``field(default_factory=...)`` makes a default anew for each instance. The type checker sees
them as dataclasses (``dataclass_transform``). It imports ``typing``, which a rank's start avoids:
the values every rank loads (the events') are :mod:`planaria.util.frozen` classes instead.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], T]) -> T:
    """A field whose default ``default_factory()`` makes for each instance."""
    return _Factory(default_factory)  # type: ignore[return-value]  # stands for the value until __init__


@overload
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(*, frozen: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(field,))
def record(cls: type[T] | None = None, /, *, frozen: bool = False) -> Any:
    """The class decorator (``@record`` or ``@record(frozen=True)``)."""
    def make(c: type[T]) -> type[T]:
        return _make(c, frozen)
    return make if cls is None else make(cls)


def _make(cls: type[T], frozen: bool) -> type[T]:
    names = tuple(cls.__dict__.get("__annotations__", {}))
    defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
    for n in defaults:
        delattr(cls, n)          # instances hold every field (a mutable default stays per instance)
    setter = object.__setattr__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}() takes {len(names)} positional arguments but {len(args)} were given")
        values = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names or key in values:
                why = "an unexpected" if key not in names else "multiple values for"
                raise TypeError(f"{cls.__name__}() got {why} argument {key!r}")
            values[key] = value
        for n in names:
            if n in values:
                value = values[n]
            elif n in defaults:
                d = defaults[n]
                value = d.make() if isinstance(d, _Factory) else d
            else:
                raise TypeError(f"{cls.__name__}() missing required argument: {n!r}")
            setter(self, n, value)

    def _values(self: Any) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in names)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(_values(self) == _values(other))

    def __repr__(self: Any) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"

    extra: dict[str, Any] = {"__init__": __init__, "__eq__": __eq__, "__repr__": __repr__,
                             "__match_args__": names, "__hash__": None}   # unhashable, as a dataclass with eq
    if frozen:
        def __setattr__(self: Any, name: str, value: Any) -> None:
            raise AttributeError(f"cannot assign to field {name!r}")

        def __hash__(self: Any) -> int:
            return hash(_values(self))
        extra.update(__setattr__=__setattr__, __hash__=__hash__)
    for name, value in extra.items():
        setattr(cls, name, value)
    return cls
