"""The fragmented-program model ([Vlasenko 2022] §1): code fragments, single-assignment data fragments, CF specs.

A *code fragment* is a Python function decorated with :func:`atomic` (runs as a unit) or
:func:`sub` (structured: declares DFs and spawns CFs, loops included). Calling a code
fragment inside a running ``sub`` does not run it: it spawns a *computation fragment* (CF)
that the executor runs once every input DF has a value. Parameters annotated with
:class:`Name` are outputs (atomic) or passed-through DF names (sub); every other argument
that is a DF (or an expression over DFs) is an input, awaited and replaced by its value.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import linecache
import operator
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable
from planaria.errors import PlanariaError
from planaria.util.paths import shown


class Name:
    """Annotation for a parameter that names a DF (``def set_(x: Name, v: int)``): an output, not a value."""


class FragmentError(PlanariaError):
    """Misuse of the program model (spawning outside a sub, setting a non-output, ...)."""


class ProgramError(FragmentError):
    """The running program broke a rule of the model (a DF assigned twice) and the run was stopped.

    ``run`` raises it at every rank alike; uncaught under ``planaria run`` it ends each rank with
    one line and exit status 1 instead of a traceback."""

    exit_status = 1


# -- data fragments -------------------------------------------------------------------------
_OPS: dict[str, Callable[..., Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "neg": operator.neg,
}


class _Arith:
    """Arithmetic on DFs builds a lazy :class:`Expr` whose inputs are the DFs it mentions."""

    def _op(self, op: str, other: Any, swap: bool = False) -> Expr:
        return Expr(op, (other, self) if swap else (self, other))

    def __add__(self, o: Any) -> Expr: return self._op("+", o)
    def __radd__(self, o: Any) -> Expr: return self._op("+", o, True)
    def __sub__(self, o: Any) -> Expr: return self._op("-", o)
    def __rsub__(self, o: Any) -> Expr: return self._op("-", o, True)
    def __mul__(self, o: Any) -> Expr: return self._op("*", o)
    def __rmul__(self, o: Any) -> Expr: return self._op("*", o, True)
    def __truediv__(self, o: Any) -> Expr: return self._op("/", o)
    def __rtruediv__(self, o: Any) -> Expr: return self._op("/", o, True)
    def __floordiv__(self, o: Any) -> Expr: return self._op("//", o)
    def __mod__(self, o: Any) -> Expr: return self._op("%", o)
    def __pow__(self, o: Any) -> Expr: return self._op("**", o)
    def __neg__(self) -> Expr: return Expr("neg", (self,))


@dataclass(frozen=True, eq=False)
class DFRef(_Arith):
    """A data fragment as seen by one code fragment: id, declared name, and the local name it goes by here."""

    base: str                 # id of the declared DF (unique per declaration)
    decl: str                 # name at the declaration
    decl_in: str              # the sub that declared it
    index: tuple[Any, ...] = ()
    local: str = ""           # name in the current sub ("" = the declared name)

    @property
    def id(self) -> str:
        return self.base + "".join(f"[{i}]" for i in self.index)

    def __getitem__(self, i: Any) -> DFRef:
        if isinstance(i, (DFRef, Expr)):
            raise FragmentError("a DF index must be a plain value inside a sub (pass the DF to the sub as an input)")
        return DFRef(self.base, self.decl, self.decl_in, self.index + (i,), self.local)

    def named(self, local: str) -> DFRef:
        return DFRef(self.base, self.decl, self.decl_in, self.index, local)

    def info(self) -> dict[str, Any]:
        """How the trace names this DF: id, base, declared and local names, index."""
        return {"id": self.id, "base": self.base, "decl": self.decl, "decl_in": self.decl_in,
                "local": self.local or self.decl, "index": list(self.index)}

    def __repr__(self) -> str:
        return f"DF({self.local or self.decl}{''.join(f'[{i}]' for i in self.index)})"


@dataclass(frozen=True, eq=False)
class Expr(_Arith):
    """A lazy expression over DFs (``v1[i] + v2[i]``), evaluated once its DFs have values."""

    op: str
    args: tuple[Any, ...]

    def evaluate(self, value_of: Callable[[DFRef], Any]) -> Any:
        return _OPS[self.op](*(resolve(a, value_of) for a in self.args))


def refs_in(obj: Any) -> list[DFRef]:
    """Every DF mentioned by an argument (through expressions, lists, tuples, dict values)."""
    if isinstance(obj, DFRef):
        return [obj]
    if isinstance(obj, Expr):
        return [r for a in obj.args for r in refs_in(a)]
    if isinstance(obj, (list, tuple)):
        return [r for a in obj for r in refs_in(a)]
    if isinstance(obj, dict):
        return [r for a in obj.values() for r in refs_in(a)]
    return []


def resolve(obj: Any, value_of: Callable[[DFRef], Any]) -> Any:
    """Replace DFs and expressions in an argument by their values."""
    if isinstance(obj, DFRef):
        return value_of(obj)
    if isinstance(obj, Expr):
        return obj.evaluate(value_of)
    if isinstance(obj, list):
        return [resolve(a, value_of) for a in obj]
    if isinstance(obj, tuple):
        return tuple(resolve(a, value_of) for a in obj)
    if isinstance(obj, dict):
        return {k: resolve(v, value_of) for k, v in obj.items()}
    return obj


# -- code fragments -------------------------------------------------------------------------
_REGISTRY: dict[tuple[str, str], Code] = {}


def _lookup(module: str, qualname: str) -> Code:
    """Unpickle a code fragment by name (every rank imports the same program)."""
    if (module, qualname) not in _REGISTRY:
        __import__(module)
    return _REGISTRY[(module, qualname)]


class Code:
    """A code fragment: the function, its kind, which parameters are DF names, and where it is defined."""

    def __init__(self, fn: Callable[..., Any], kind: str) -> None:
        self.fn, self.kind = fn, kind
        try:
            self.sig = inspect.signature(fn, eval_str=True)
        except Exception:  # an annotation that does not evaluate here: keep the strings
            self.sig = inspect.signature(fn)
        self.params = list(self.sig.parameters)
        # all plain parameters: positional calls bind by zip, without inspect's general (slower) rules
        self._zip_bind = all(v.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for v in self.sig.parameters.values())
        self.names = {p for p, v in self.sig.parameters.items()
                      if v.annotation is Name or (isinstance(v.annotation, str)
                                                  and v.annotation.split(".")[-1] == "Name")}
        self.annotations = {p: v.annotation for p, v in self.sig.parameters.items()
                            if isinstance(v.annotation, type) and v.annotation is not Name}
        self.module, self.qualname = fn.__module__, fn.__qualname__
        code = fn.__code__
        self.file, self.line = shown(code.co_filename), code.co_firstlineno
        self.signature = f"{'sub' if kind == 'sub' else 'atomic'} {fn.__name__}({_params_text(self.sig)})"
        _REGISTRY[(self.module, self.qualname)] = self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_lookup, (self.module, self.qualname))

    def __call__(self, *args: Any, **kwargs: Any) -> CFSpec:
        ctx = current()
        if ctx is None:
            raise FragmentError(f"{self.qualname}(...) spawns a CF: call it inside a sub, or start with planaria.fragments.run({self.qualname})")
        frame = sys._getframe(1)
        return ctx.spawn(self, args, kwargs, shown(frame.f_code.co_filename), frame.f_lineno)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if self._zip_bind and not kwargs and len(args) == len(self.params):
            return dict(zip(self.params, args, strict=True))
        try:
            return dict(self.sig.bind(*args, **kwargs).arguments)
        except TypeError as e:
            raise FragmentError(f"{self.qualname}: {e}") from None

    def __repr__(self) -> str:
        return f"<{self.kind} {self.qualname}>"


def _params_text(sig: inspect.Signature) -> str:
    parts = []
    for p, v in sig.parameters.items():
        ann = v.annotation
        if ann is inspect.Parameter.empty:
            parts.append(p)
        else:
            parts.append(f"{p}: {getattr(ann, '__name__', str(ann))}")
    return ", ".join(parts)


def atomic(fn: Callable[..., Any]) -> Code:
    """Mark a function as an atomic code fragment: its ``Name`` parameters are outputs set with ``.set(v)``."""
    return Code(fn, "atomic")


def sub(fn: Callable[..., Any]) -> Code:
    """Mark a function as a structured code fragment: it declares DFs (``df``) and spawns CFs by calling code fragments."""
    return Code(fn, "sub")


@dataclass
class Frame:
    """One level of a CF's call history: the call expression, where it is, and the sub it calls into."""

    expr: str
    file: str
    line: int
    sig: str
    def_file: str
    def_line: int

    def as_dict(self) -> dict[str, Any]:
        return {"expr": self.expr, "file": self.file, "line": self.line, "sig": self.sig,
                "def_file": self.def_file, "def_line": self.def_line}


@dataclass
class CFSpec:
    """One computation fragment: what to run, with which arguments, where it came from, what it reads and writes."""

    id: str
    code: Code
    args: dict[str, Any]
    stack: list[dict[str, Any]]          # call history, outermost first; the last entry is this CF's own call
    parent: str | None
    group: str                           # code-block group for the balancer: code + call site
    place: int | None = None             # placement recommendation (worker index)
    deletes: list[str] = field(default_factory=list)   # DFs to delete after this CF
    weight: float | None = None          # optional weight hint (not used by the balancer's estimates)
    prio: float = 0.0               # priority recommendation: higher starts first among ready CFs

    # -- recommendations, chainable on the value a code-fragment call returns ---------------
    def at(self, worker: int) -> CFSpec:
        """Recommend running this CF on worker ``worker`` (modulo the number of workers)."""
        self.place = int(worker)
        return self

    def priority(self, value: float) -> CFSpec:
        """Recommend starting this CF before ready CFs of lower priority (default 0), on its rank and
        when the balancer chooses which CFs to move (as Dask's ``submit(..., priority=)``)."""
        value = float(value)
        if value != value:
            raise FragmentError(f"priority of {self.expr} is not a number")
        self.prio = value
        return self

    def delete(self, *dfs: DFRef) -> CFSpec:
        """Recommend deleting these DFs once this CF has finished (the paper's ``@ { delete x; }``)."""
        self.deletes.extend(d.id for d in dfs)
        return self

    # -- inputs and outputs --------------------------------------------------------------------
    def input_refs(self) -> list[DFRef]:
        ins = self.__dict__.get("_ins")
        if ins is None:       # arguments never change after the spawn: compute once
            ins = self.__dict__["_ins"] = [r for p, a in self.args.items() if p not in self.code.names
                                           for r in refs_in(a)]
        return ins

    def output_refs(self) -> list[DFRef]:
        outs = self.__dict__.get("_outs")
        if outs is None:
            outs = self.__dict__["_outs"] = [r for p, a in self.args.items() if p in self.code.names
                                             for r in refs_in(a)]
        return outs

    @property
    def expr(self) -> str:
        return self.stack[-1]["expr"] if self.stack else self.code.qualname

    def record(self) -> dict[str, Any]:
        """The trace record of this CF's creation."""
        own = self.stack[-1] if self.stack else {}
        return {"k": "cf", "id": self.id, "code": self.code.qualname, "kind": self.code.kind,
                "expr": self.expr, "file": own.get("file", self.code.file), "line": own.get("line", self.code.line),
                "stack": self.stack, "parent": self.parent, "group": self.group,
                "in": [r.info() for r in self.input_refs()], "out": [r.info() for r in self.output_refs()]}


class Out:
    """What an atomic CF gets for a ``Name`` parameter: ``x.set(value)`` assigns the DF once."""

    __slots__ = ("ref", "_sink")

    def __init__(self, ref: DFRef, sink: dict[str, tuple[DFRef, Any]]) -> None:
        self.ref, self._sink = ref, sink

    def set(self, value: Any) -> None:
        self._sink[self.ref.id] = (self.ref, value)

    def __getitem__(self, i: Any) -> Out:
        return Out(self.ref[i], self._sink)

    def __repr__(self) -> str:
        return f"Out({self.ref!r})"


# -- the context a running sub spawns into ----------------------------------------------------
_tls = threading.local()


def current() -> SubContext | None:
    return getattr(_tls, "ctx", None)


_RECOMMENDATION = re.compile(r"\.(at|delete)\([^()]*(\([^()]*\)[^()]*)*\)$")


def source_line(file: str, line: int) -> str:
    """The stripped source text at file:line (the CF's expression)."""
    text = linecache.getline(file, line).strip()
    if "#" in text:
        import io
        import tokenize
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type == tokenize.COMMENT:
                    text = text[:tok.start[1]].rstrip()
                    break
        except (tokenize.TokenError, SyntaxError, IndentationError):
            pass
    text = text.rstrip(";")
    # the CF's expression without its recommendations (``f(x).at(2).delete(x)`` -> ``f(x)``)
    while True:
        m = _RECOMMENDATION.search(text)
        if not m:
            return text
        text = text[:m.start()]


@functools.lru_cache(maxsize=4096)
def _call_frame(code: Code, file: str, line: int) -> dict[str, Any]:
    """The call-history entry of a call site, built once per site (a loop spawns from one line many
    times); the entries are shared and never modified."""
    return Frame(source_line(file, line) or f"{code.qualname}(...)", file, line, code.signature,
                 code.file, code.line).as_dict()


class SubContext:
    """Collects what one running sub declares and spawns; ids are unique per (rank, counter)."""

    def __init__(self, cf: CFSpec, ids: Callable[[], str], workers: int, rank: int) -> None:
        self.cf, self._ids, self.workers, self.rank = cf, ids, workers, rank
        self.spawned: list[CFSpec] = []
        self.declared: list[dict[str, Any]] = []
        self._seq = itertools.count()

    def __enter__(self) -> SubContext:
        self._prev = current()
        _tls.ctx = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _tls.ctx = self._prev

    def declare(self, name: str, file: str, line: int) -> DFRef:
        base = f"{self.cf.id}:{name}#{next(self._seq)}"
        ref = DFRef(base, name, self.cf.code.qualname)
        self.declared.append({"k": "df", "id": base, "name": name, "block": self.cf.id,
                              "sub": self.cf.code.qualname, "file": file, "line": line})
        return ref

    def spawn(self, code: Code, args: tuple[Any, ...], kwargs: dict[str, Any], file: str, line: int) -> CFSpec:
        bound = code.bind(args, kwargs)
        own = _call_frame(code, file, line)
        spec = CFSpec(self._ids(), code, bound, self.cf.stack + [own], self.cf.id,
                      f"{code.qualname}@{file}:{line}")
        self.spawned.append(spec)
        return spec


def df(name: str) -> DFRef:
    """Declare a data fragment in the running sub (single assignment; indexed elements exist once set)."""
    ctx = current()
    if ctx is None:
        raise FragmentError("df() declares a DF inside a running sub")
    frame = sys._getframe(1)
    return ctx.declare(name, shown(frame.f_code.co_filename), frame.f_lineno)


def dfs(names: str) -> tuple[DFRef, ...]:
    """Declare several DFs at once: ``x, y = dfs("x y")``."""
    ctx = current()
    if ctx is None:
        raise FragmentError("dfs() declares DFs inside a running sub")
    frame = sys._getframe(1)
    return tuple(ctx.declare(n, shown(frame.f_code.co_filename), frame.f_lineno) for n in names.replace(",", " ").split())


def workers() -> int:
    """Number of worker ranks of the running program (for placement recommendations)."""
    ctx = current()
    return ctx.workers if ctx is not None else 1


def type_ok(value: Any, expected: type) -> bool:
    """Whether a DF value may be used as ``expected``: exact class family; an int may serve as a float, never the reverse."""
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return True
    if expected is int and isinstance(value, bool):
        return True
    try:
        import numpy as np
        if expected is float and isinstance(value, np.floating):
            return True
        if expected is int and isinstance(value, np.integer):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(value, expected)
