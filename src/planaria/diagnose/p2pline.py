"""The peer and tag of a plain program's blocking point-to-point call, read from its source line.

Without planaria's runtime nobody records which rank a ``Recv`` waits for. The native stack says a
rank is in ``MPI_Recv`` at ``a.py:10``; that line usually names its peer in terms of the rank
(``comm.Recv(buf, source=1 - comm.rank, tag=7)``). This module parses the line with ``ast``, binds
the call's arguments to mpi4py's signature and evaluates them with what is known of that rank:
its rank and the job's size (the communicator is taken to be the world: the report says so),
integer literals, arithmetic, ``MPI.ANY_SOURCE``/``ANY_TAG``/``PROC_NULL`` and names assigned
once in the same scope. Any other name makes the value unknown (None): a guess would make a wrong
diagnosis. ``causes`` and ``finished`` turn the waits of all ranks into root causes (wait cycles,
sends to self, tag and source mismatches, a skipped collective, waits for a finished rank), with
the file's sends and the ``if`` conditions around them telling which rank made which send.
"""
from __future__ import annotations

import ast
import importlib.util
import dataclasses
import functools
import inspect
import linecache
import operator
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planaria.diagnose.findings import SITE_RE, ran_past, short_site

#: native MPI function -> (kind, the mpi4py methods that block in it)
_NATIVE = {
    "MPI_Send": ("send", ("Send", "send")), "MPI_Ssend": ("send", ("Ssend", "ssend")),
    "MPI_Rsend": ("send", ("Rsend",)), "MPI_Bsend": ("send", ("Bsend", "bsend")),
    "MPI_Recv": ("recv", ("Recv", "recv")), "MPI_Mprobe": ("recv", ("recv", "Mprobe", "mprobe")),
    "MPI_Probe": ("recv", ("Probe", "probe")), "MPI_Mrecv": ("recv", ("recv",)),
    "MPI_Sendrecv": ("recv", ("Sendrecv", "sendrecv")),     # its receive is what waits
}
_PEER = {"send": "dest", "recv": "source"}
_BOTH = frozenset({"Sendrecv", "sendrecv"})
_CONST = {"ANY_SOURCE": -1, "ANY_TAG": -1, "PROC_NULL": -2}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift}


def _params(method: str, kind: str) -> tuple[str, str]:
    """The (peer, tag) parameters of ``method`` in its ``kind`` role (a Sendrecv has both)."""
    if method in _BOTH:
        return ("dest", "sendtag") if kind == "send" else ("source", "recvtag")
    return _PEER[kind], "tag"


@dataclass(frozen=True)
class P2P:
    """A blocking point-to-point call: ``send`` or ``recv``, the peer (-1: any source; None: not known), the tag."""

    kind: str
    peer: int | None
    tag: int | None
    method: str


def native_p2p(call: str) -> bool:
    """Whether a native frame name (``MPI_Recv``...) is a blocking point-to-point call this module reads."""
    return call.replace("PMPI_", "MPI_") in _NATIVE


def read(site: str, call: str, rank: int, size: int) -> P2P | None:
    """The call in native function ``call`` made at ``site`` (``path:line in f``) by ``rank``; None
    when the line holds no such mpi4py call (or cannot be read)."""
    kind, methods = _NATIVE.get(call.replace("PMPI_", "MPI_"), (None, ()))
    path, _, rest = site.partition(":")
    line = rest.split(" ", 1)[0]
    if kind is None or not line.isdigit():
        return None
    linecache.checkcache(path)
    node = _call_at(path, int(line), methods)
    if node is None:
        return None
    args = _bind(node)
    if args is None:
        return None
    recv = node.func.value if isinstance(node.func, ast.Attribute) else None
    method = node.func.attr if isinstance(node.func, ast.Attribute) else "?"
    pname, tname = _params(method, kind)
    env = _scope_of(path, site)
    peer = _value(args.get(pname), recv, rank, size, -1 if kind == "recv" else None, env)
    tag = _value(args.get(tname), recv, rank, size, -1 if kind == "recv" else 0, env)
    return P2P(kind, peer, tag, method)


def _version(path: str) -> tuple[int, int]:
    """(mtime, size) of the file: what the parse caches are keyed by, besides the path."""
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def _parsed(path: str) -> tuple[ast.Module | None, dict[str, dict[str, ast.expr]]]:
    """The file's syntax tree and its scopes' names (``_scopes``), parsed once per version of the
    file (a diagnosis reads the same file for every rank; None when it does not parse)."""
    return _parsed_at(path, _version(path))


@functools.lru_cache(maxsize=64)
def _parsed_at(path: str, version: tuple[int, int]) -> tuple[ast.Module | None, dict[str, dict[str, ast.expr]]]:
    linecache.checkcache(path)
    try:
        tree = ast.parse("".join(linecache.getlines(path)))
    except (SyntaxError, ValueError):
        return None, {}
    return tree, _scopes(tree)


def _scope_of(path: str, site: str) -> dict[str, ast.expr] | None:
    """The names assigned once in the scope of ``site`` (``path:line in func``)."""
    return _parsed(path)[1].get(site.partition(" in ")[2] or "<module>")


def _call_at(path: str, line: int, methods: tuple[str, ...]) -> ast.Call | None:
    """The call of one of ``methods`` in the statement that starts at ``line`` (or spans it)."""
    for first in range(line, max(0, line - 6), -1):
        text = "".join(linecache.getline(path, n) for n in range(first, line + 6))
        tree, shift = None, 0
        for end in range(len(text), 0, -1):
            if text[end - 1] != "\n":
                continue
            code, shift = _dedent(text[:end])
            try:
                tree = ast.parse(code)
                break
            except SyntaxError:
                continue
        if tree is None:
            continue
        at = line - first + 1 + shift       # the line's number in the parsed text
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and n.func.attr in methods and n.lineno <= at <= (n.end_lineno or n.lineno)]
        if len(calls) == 1:
            return calls[0]
        if calls:
            return None         # two such calls on the line: which one blocks is not known
    return None


def _dedent(text: str) -> tuple[str, int]:
    """A statement cut out of an indented block, parseable alone (under an ``if True:``, which keeps
    its indentation), and how many lines were put before it."""
    first = text.lstrip("\n")
    indent = len(first) - len(first.lstrip())
    return ("if True:\n" + text, 1) if indent else (text, 0)


_SIG: dict[str, inspect.Signature] = {}


def _stub_signatures() -> dict[str, inspect.Signature]:
    """``mpi4py.MPI.Comm``'s method signatures, read from the type stubs mpi4py ships (``MPI.pyi``):
    importing ``mpi4py.MPI`` would initialize MPI in the process that analyses (the launcher)."""
    spec = importlib.util.find_spec("mpi4py")
    for where in (spec.submodule_search_locations or []) if spec else []:
        try:
            tree = ast.parse(Path(where, "MPI.pyi").read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        comm = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Comm"), None)
        if comm is not None:
            return {f.name: _signature(f.args) for f in comm.body if isinstance(f, ast.FunctionDef)}
    return {}


def _signature(a: ast.arguments) -> inspect.Signature:
    """The parameters (names, kinds, whether they have a default) of a stub's ``def``."""
    P = inspect.Parameter
    pos = a.posonlyargs + a.args
    firsts = len(pos) - len(a.defaults)
    params = [P(x.arg, P.POSITIONAL_ONLY if x in a.posonlyargs else P.POSITIONAL_OR_KEYWORD,
                default=P.empty if i < firsts else None) for i, x in enumerate(pos)]
    if a.vararg is not None:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    params += [P(x.arg, P.KEYWORD_ONLY, default=P.empty if d is None else None)
               for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg is not None:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def _bind(node: ast.Call) -> dict[str, ast.expr] | None:
    """The call's argument expressions by mpi4py's parameter names; None when they do not bind."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
    if not _SIG:
        _SIG.update(_stub_signatures() or {"": inspect.Signature()})
    sig = _SIG.get(name)
    if sig is None:
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return None
    try:
        bound = sig.bind(None, *node.args, **{k.arg: k.value for k in node.keywords if k.arg})
    except TypeError:
        return None
    out = dict(bound.arguments)
    out.pop(next(iter(sig.parameters)), None)
    return out


def _value(node: ast.expr | None, comm: ast.expr | None, rank: int, size: int, default: int | None,
           env: dict[str, ast.expr] | None = None) -> int | None:
    """An argument's value for this rank, ``default`` when it is left out, None when not known."""
    if node is None:
        return default
    try:
        got = _eval(node, comm, rank, size, env)
    except (LookupError, ZeroDivisionError):
        return None
    return None if isinstance(got, bool) else got


_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}


def _eval(e: ast.expr, comm: ast.expr | None, rank: int, size: int, env: dict[str, ast.expr] | None = None,
          depth: int = 0) -> Any:
    """An int (or, for a condition, a bool) from what is known of the rank; LookupError otherwise.
    ``env``: names assigned once in the scope (``right = (comm.rank + 1) % comm.size``), evaluated too."""
    if depth > 20:
        raise LookupError
    if isinstance(e, ast.Name) and env and e.id in env:
        return _eval(env[e.id], comm, rank, size, env, depth + 1)

    def ev(x: ast.expr) -> Any:
        return _eval(x, comm, rank, size, env, depth + 1)

    if isinstance(e, ast.Constant) and isinstance(e.value, int):
        return e.value
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        return -ev(e.operand)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return not ev(e.operand)
    if isinstance(e, ast.BinOp) and type(e.op) in _OPS:
        return int(_OPS[type(e.op)](ev(e.left), ev(e.right)))
    if isinstance(e, ast.IfExp):
        return ev(e.body) if bool(ev(e.test)) else ev(e.orelse)
    if isinstance(e, ast.BoolOp):
        vals = [bool(ev(v)) for v in e.values]
        return all(vals) if isinstance(e.op, ast.And) else any(vals)
    if isinstance(e, ast.Compare):
        left = ev(e.left)
        for op, right in zip(e.ops, e.comparators, strict=True):
            if isinstance(op, ast.In | ast.NotIn) and isinstance(right, ast.Tuple | ast.List | ast.Set):
                ok = left in [ev(x) for x in right.elts]
                ok = ok if isinstance(op, ast.In) else not ok
                r = left
            elif type(op) in _CMP:
                r = ev(right)
                ok = _CMP[type(op)](left, r)
            else:
                raise LookupError
            if not ok:
                return False
            left = r
        return True
    if isinstance(e, ast.Attribute):
        if e.attr in _CONST and isinstance(e.value, ast.Name) and e.value.id == "MPI":
            return _CONST[e.attr]
        if e.attr in ("rank", "size") and _is_comm(e.value, comm):
            return rank if e.attr == "rank" else size
    if (isinstance(e, ast.Call) and not e.args and not e.keywords and isinstance(e.func, ast.Attribute)
            and e.func.attr in ("Get_rank", "Get_size") and _is_comm(e.func.value, comm)):
        return rank if e.func.attr == "Get_rank" else size
    raise LookupError


#: the buffer whose size must agree on every rank, per count-checked collective
_COUNTED = {"Bcast": "buf", "Reduce": "sendbuf", "Allreduce": "sendbuf", "Gather": "sendbuf",
            "Allgather": "sendbuf", "Scatter": "recvbuf", "Alltoall": "sendbuf"}
#: numpy constructors whose first argument is the shape, and the item sizes of dtypes by name
_ARRAYS = frozenset({"ones", "zeros", "empty", "full"})
_ITEM = {"float": 8, "float64": 8, "double": 8, "f8": 8, "d": 8, "int": 8, "int64": 8, "i8": 8, "float32": 4,
         "single": 4, "f4": 4, "int32": 4, "i4": 4, "intc": 4, "uint32": 4, "int16": 2, "uint16": 2,
         "int8": 1, "uint8": 1, "byte": 1, "ubyte": 1, "bool": 1, "complex": 16, "complex128": 16,
         "complex64": 8}


def coll_bytes(site: str, ranks: list[int], size: int) -> tuple[str, dict[int, int]] | None:
    """The count-checked collective (``Allreduce``...) called at ``site`` and the bytes of its
    buffer for each of ``ranks`` whose size the source tells (``np.ones(n)`` with ``n`` known for
    that rank, ``[a, MPI.DOUBLE]``); None when the line holds no such call."""
    path, _, rest = site.partition(":")
    line = rest.split(" ", 1)[0]
    if not line.isdigit():
        return None
    linecache.checkcache(path)
    node = _call_at(path, int(line), tuple(_COUNTED))
    args = _bind(node) if node is not None else None
    if node is None or args is None:
        return None
    method = node.func.attr if isinstance(node.func, ast.Attribute) else "?"
    buf = args.get(_COUNTED[method])
    recv = node.func.value if isinstance(node.func, ast.Attribute) else None
    env = _scope_of(path, site)
    out: dict[int, int] = {}
    for r in ranks:
        try:
            n = _nbytes(buf, recv, r, size, env, 0) if buf is not None else None
        except (LookupError, ZeroDivisionError, TypeError, ValueError):
            n = None
        if isinstance(n, int) and n > 0:
            out[r] = n
    return method, out


def _nbytes(e: ast.expr, comm: ast.expr | None, rank: int, size: int, env: dict[str, ast.expr] | None,
            depth: int) -> int | None:
    """Bytes of a buffer expression for ``rank``: a numpy constructor, a name assigned once to one,
    or mpi4py's ``[data, datatype]``; None (or LookupError) when not known."""
    if depth > 20:
        raise LookupError
    if isinstance(e, ast.Name) and env and e.id in env:
        return _nbytes(env[e.id], comm, rank, size, env, depth + 1)
    if isinstance(e, ast.List | ast.Tuple) and len(e.elts) == 2:     # [data, MPI.DOUBLE]: the data's size
        return _nbytes(e.elts[0], comm, rank, size, env, depth + 1)
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _ARRAYS
            and isinstance(e.func.value, ast.Name) and e.func.value.id in ("np", "numpy") and e.args):
        return None
    shape = e.args[0]
    dims = shape.elts if isinstance(shape, ast.Tuple | ast.List) else [shape]
    count = 1
    for d in dims:
        count *= int(_eval(d, comm, rank, size, env))
    dt = next((k.value for k in e.keywords if k.arg == "dtype"), None)
    if dt is None and len(e.args) > (2 if e.func.attr == "full" else 1):
        dt = e.args[2 if e.func.attr == "full" else 1]
    if dt is None:
        item = 8 if e.func.attr != "full" else None      # full's dtype follows its fill value
    elif isinstance(dt, ast.Attribute):
        item = _ITEM.get(dt.attr)
    elif isinstance(dt, ast.Name):
        item = _ITEM.get(dt.id)
    elif isinstance(dt, ast.Constant) and isinstance(dt.value, str):
        item = _ITEM.get(dt.value)
    else:
        item = None
    return count * item if item else None


@dataclass(frozen=True)
class Line:
    """A point-to-point call in a file: where, the method, and the conditions that lead to it."""

    line: int
    func: str
    method: str
    node: ast.Call
    conds: tuple[tuple[ast.expr, bool], ...]      # (if-test, branch taken: True for its body)
    loop: int = 0                                  # line of the innermost for/while loop around it (0: none)
    loop_end: int = 0                              # and its last line
    env: dict[str, ast.expr] | None = field(default=None, compare=False)   # its scope's names assigned once

    @property
    def looped(self) -> bool:
        """Inside a loop: how often it ran is not known."""
        return self.loop > 0

    def runs(self, rank: int, size: int) -> bool | None:
        """Whether ``rank`` reaches this line's branch (None: a condition cannot be evaluated)."""
        try:
            return all(bool(_eval(t, None, rank, size, self.env)) is want for t, want in self.conds)
        except (LookupError, ZeroDivisionError):
            return None

    def args(self, rank: int, size: int, kind: str | None = None) -> tuple[int | None, int | None]:
        """(dest or source, tag) of this call made by ``rank``, in its ``kind`` role (``send``/``recv``)."""
        got = _bind(self.node) or {}
        kind = kind or ("send" if self.method in _SENDS else "recv")
        recv = self.node.func.value if isinstance(self.node.func, ast.Attribute) else None
        pname, tname = _params(self.method, kind)
        return (_value(got.get(pname), recv, rank, size, -1 if kind == "recv" else None, self.env),
                _value(got.get(tname), recv, rank, size, -1 if kind == "recv" else 0, self.env))


_SENDS = frozenset({"Send", "send", "Ssend", "ssend", "Bsend", "bsend", "Rsend", "Isend", "isend", "Issend",
                    "issend", "Ibsend", "ibsend", "Irsend", *_BOTH})
_RECVS = frozenset({"Recv", "recv", "Irecv", "irecv", *_BOTH})


def lines(path: str) -> list[Line]:
    """Every send and receive call of the file at ``path`` with the if-conditions around it
    (loops and other branches are not followed: their calls carry no condition)."""
    return list(_lines(path, _version(path)))


@functools.lru_cache(maxsize=64)
def _lines(path: str, version: tuple[int, int]) -> tuple[Line, ...]:
    tree, envs = _parsed(path)
    if tree is None:
        return ()
    out: list[Line] = []

    def walk(node: ast.AST, func: str, conds: tuple[tuple[ast.expr, bool], ...], looped: tuple[int, int]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            func, conds, looped = node.name, (), (0, 0)
        if isinstance(node, ast.For | ast.AsyncFor | ast.While):
            looped = (node.lineno, node.end_lineno or node.lineno)
        elif isinstance(node, ast.comprehension) and not looped[0]:
            line = getattr(node.target, "lineno", 1)
            looped = (line, line)
        if isinstance(node, ast.If):
            walk(node.test, func, conds, looped)
            for child in node.body:
                walk(child, func, (*conds, (node.test, True)), looped)
            for child in node.orelse:
                walk(child, func, (*conds, (node.test, False)), looped)
            return
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _SENDS | _RECVS):
            out.append(Line(node.lineno, func, node.func.attr, node, conds, *looped))
        elif isinstance(node, ast.Call) and _exits(node.func):
            out.append(Line(node.lineno, func, "exit", node, conds, *looped))
        for sub in ast.iter_child_nodes(node):
            walk(sub, func, conds, looped)

    walk(tree, "<module>", (), (0, 0))
    return tuple(dataclasses.replace(ln, env=envs.get(ln.func)) for ln in out)


def _scopes(tree: ast.Module) -> dict[str, dict[str, ast.expr]]:
    """Per scope (``<module>`` or a function's name): the names assigned exactly once there, by a plain
    assignment, with the expression assigned (``left, right = a, b`` too). A name assigned twice, in
    a loop header, by an import or augmented assignment is left out: its value at the wait is not known."""
    out: dict[str, dict[str, ast.expr]] = {}

    def scope(name: str, body: list[ast.stmt]) -> None:
        stores: dict[str, int] = {}
        values: dict[str, ast.expr] = {}
        todo: list[ast.AST] = list(body)
        while todo:
            node = todo.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                scope(node.name, node.body)
                stores[node.name] = stores.get(node.name, 0) + 1
                continue
            if isinstance(node, ast.ClassDef | ast.Lambda):
                continue
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                stores[node.id] = stores.get(node.id, 0) + 1
            elif isinstance(node, ast.alias):
                alias = (node.asname or node.name).split(".")[0]
                stores[alias] = stores.get(alias, 0) + 1
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                t, v = node.targets[0], node.value
                if isinstance(t, ast.Name):
                    values[t.id] = v
                elif (isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts)):
                    values.update({x.id: y for x, y in zip(t.elts, v.elts, strict=True) if isinstance(x, ast.Name)})
            todo.extend(ast.iter_child_nodes(node))
        out[name] = {k: v for k, v in values.items() if stores.get(k) == 1}

    scope("<module>", tree.body)
    return out


def _is_comm(e: ast.expr, comm: ast.expr | None) -> bool:
    """``e`` names a communicator whose rank is the process's: the call's own, a plain name
    (``comm``, ``world``), or ``MPI.COMM_WORLD``."""
    return ((comm is not None and ast.dump(e) == ast.dump(comm)) or isinstance(e, ast.Name)
            or (isinstance(e, ast.Attribute) and e.attr == "COMM_WORLD"))


def _exits(f: ast.expr) -> bool:
    """``sys.exit``, ``os._exit``, ``exit``, ``quit``: a call that ends the program."""
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return (f.value.id, f.attr) in (("sys", "exit"), ("os", "_exit"))
    return isinstance(f, ast.Name) and f.id in ("exit", "quit")


def finished(ended: list[int], where: dict[int, tuple[str, str]], size: int) -> list[dict[str, Any]]:
    """Root causes of waits for ranks that have ended (``ended``): a point-to-point wait whose
    source line names one of them, or collectives that every other rank waits in. Where the file
    has a call that ends the program (``sys.exit``...) on the ended rank's branch, before the wait,
    that is the site; else the wait."""

    out: list[dict[str, Any]] = []
    gone = set(ended)
    for r, (call, site) in sorted(where.items()):
        c = read(site, call, r, size) if native_p2p(call) else None
        if c is not None and c.peer in gone:
            f, end = c.peer, _exit_site(c.peer, site, size)
            out.append({"kind": "finished", "ranks": [f], "op": c.method, "site": end or site,
                        "reason": f"rank {f} has finished{_ended(end)} while rank {r} waits for it in {c.method} at "
                                  f"{short_site(site)}"})
            gone.discard(f)
    colls = {(call, site) for call, site in where.values() if not native_p2p(call)}
    if gone and len(colls) == 1 and len(where) + len(ended) == size:
        call, site = next(iter(colls))
        for f in sorted(gone):
            end = _exit_site(f, site, size)
            out.append({"kind": "finished", "ranks": [f], "op": call, "site": end or site,
                        "reason": f"rank {f} has finished{_ended(end)} while every other rank waits for it in "
                                  f"{call.replace('MPI_', '')} at {short_site(site)}"})
    return out


def _ended(end: str | None) -> str:
    return f" (the program-ending call on its branch: {short_site(end)})" if end else ""


def _exit_site(rank: int, wait: str, size: int) -> str | None:
    """The program-ending call on ``rank``'s branch of ``wait``'s file, before ``wait`` in its function."""
    path = wait.partition(":")[0]
    ends = [ln for ln in lines(path) if ln.method == "exit" and ln.runs(rank, size) is True
            and ran_past(wait, _at(path, ln))]
    return _at(path, ends[-1]) if len(ends) == 1 else None


# -- the root causes of point-to-point waits --------------------------------------------------
def _at(path: str, ln: Line) -> str:
    return f"{path}:{ln.line} in {ln.func}"


def causes(where: dict[int, tuple[str, str]], size: int) -> list[dict[str, Any]]:
    """Root causes of a hang of a plain program whose ranks all wait in MPI: ``where`` maps each
    rank that answered to (native MPI call, site). Each cause: kind, ranks, reason, op, site.

    A rank in a receive names its peer and tag on its source line (``read``); the file's sends show
    what that peer, which has run past them, sent. In that order: a rank that waits for itself; a
    message its peer sent with another tag (tag-mismatch), or another rank sent with its tag
    (source-mismatch), or that an earlier ANY_SOURCE receive of its own took (source-mismatch at
    that receive); then a wait cycle (deadlock), with collectives waiting for every rank not in them."""

    p2p = {r: got for r, (call, site) in where.items() if native_p2p(call)
           and (got := read(site, call, r, size)) is not None}
    out: list[dict[str, Any]] = []
    for r, c in sorted(p2p.items()):
        if c.peer == r:
            what = "sends to itself with no receive posted" if c.kind == "send" else "waits for a message from itself"
            out.append({"kind": "self-wait", "ranks": [r], "op": c.method, "site": where[r][1],
                        "reason": f"rank {r} {what} ({c.method} at {short_site(where[r][1])})"})
    for r, c in sorted(p2p.items()):
        if c.kind != "recv" or c.peer is None or c.peer < 0 or c.peer == r or c.peer not in where:
            continue
        found = _receive_cause(r, c, where, size)
        if found is not None:
            out.append(found)
    deadlock = _deadlock(where, p2p)
    if deadlock is not None:
        out.append(deadlock)
    return out


def _receive_cause(r: int, c: P2P, where: dict[int, tuple[str, str]], size: int) -> dict[str, Any] | None:
    """Why rank ``r``'s receive from ``c.peer`` (a rank that answered) does not match, from the
    sends of the file the ranks have run past: a skipped collective, a message an earlier
    ANY_SOURCE receive took, another tag, another source; None when none of these is sure."""
    if c.peer is None:
        return None
    site = where[r][1]
    path = site.partition(":")[0]
    calls = lines(path)

    def sent(q: int) -> list[tuple[Line, int | None]]:
        """(line, tag) of the sends to ``r`` rank ``q`` made (its branch, and it has run past them)."""
        found = []
        for ln in calls:
            if (ln.method in _SENDS and ln.runs(q, size) is True and q in where
                    and ran_past(where[q][1], _at(path, ln))):
                dest, tag = ln.args(q, size, "send")
                if dest == r:
                    found.append((ln, tag))
        return found

    got = [ln for ln in calls if ln.method in _RECVS and ln.runs(r, size) is True and ran_past(site, _at(path, ln))]
    sends = {q: sent(q) for q in where if q != r}
    skipped = _skipped(r, c, where, calls, sends.get(c.peer, []), path)
    if skipped is not None:
        return skipped
    if any(ln.looped for ln in got) or any(ln.looped for v in sends.values() for ln, _ in v):
        return None                     # counts of messages are not known: only the wait cycle
    wild = [ln for ln in got if ln.args(r, size, "recv")[0] == -1]

    def received(q: int) -> int:    # receives rank r has run past that name rank q
        return sum(1 for ln in got if ln.args(r, size, "recv")[0] == q)

    def fitting(q: int) -> list[tuple[Line, int | None]]:
        return [(ln, tag) for ln, tag in sends.get(q, []) if c.tag in (-1, tag)]

    extra = {q: len(fitting(q)) - received(q) for q in sends}   # fitting messages not taken by name
    if extra.get(c.peer, 0) > 0:
        late = [q for q in sends if q != c.peer and extra[q] > 0]
        if not (wild and late):
            return None
        ln = wild[0]                    # an earlier wildcard receive took the peer's message
        return {"kind": "source-mismatch", "ranks": [r], "op": ln.method, "site": _at(path, ln),
                "reason": f"receive from any source took the wrong message: rank {r}'s ANY_SOURCE "
                          f"receive at {short_site(_at(path, ln))} took rank {c.peer}'s message (tag "
                          f"{c.tag}), so its receive from rank {c.peer} at {short_site(site)} waits while "
                          f"rank {late[0]}'s (sent at {short_site(_at(path, fitting(late[0])[0][0]))}) "
                          "is left over"}
    other = [(ln, tag) for ln, tag in sends.get(c.peer, []) if c.tag not in (-1, tag)]
    if len(other) > received(c.peer) + len(wild):
        ln, tag = other[0]
        return {"kind": "tag-mismatch", "ranks": sorted({r, c.peer}), "op": c.method, "site": site,
                "reason": f"unmatched tag: rank {c.peer} sent tag {tag} to rank {r} at "
                          f"{short_site(_at(path, ln))}, rank {r} waits for tag {c.tag} from rank {c.peer} "
                          f"at {short_site(site)}"}
    for q in sorted(sends):
        if q != c.peer and extra[q] > len(wild):
            ln, tag = fitting(q)[0]
            return {"kind": "source-mismatch", "ranks": sorted({r, q}), "op": c.method, "site": site,
                    "reason": f"unmatched source: rank {q} sent to rank {r} (tag {tag}) at "
                              f"{short_site(_at(path, ln))}, rank {r} waits for a message from rank {c.peer} "
                              f"at {short_site(site)}"}
    return None


def _deadlock(where: dict[int, tuple[str, str]], p2p: dict[int, P2P]) -> dict[str, Any] | None:
    """A wait cycle (collectives waiting for every rank not in them), or, peers unknown, every rank
    in a blocking point-to-point call; None otherwise."""
    cycle = _cycle(where, p2p)
    if cycle:
        first = min(r for r in cycle if r in p2p)
        ring = " -> ".join(map(str, [*cycle, cycle[0]]))
        return {"kind": "deadlock", "ranks": sorted(cycle), "op": p2p[first].method, "site": where[first][1],
                "reason": f"wait cycle {ring}: each waits for the next (deadlock); rank {first} in "
                          f"{p2p[first].method} at {short_site(where[first][1])}"}
    if where and all(native_p2p(call) for call, _ in where.values()):
        ranks = sorted(where)
        sites = sorted({s for _, s in where.values()}, key=lambda s: -sum(1 for _, t in where.values() if t == s))
        return {"kind": "deadlock", "ranks": ranks, "op": where[ranks[0]][0].replace("MPI_", ""),
                "site": sites[0], "reason": f"every rank waits in a blocking point-to-point call (mostly at "
                                            f"{short_site(sites[0])}): none can go on (deadlock)"}
    return None


def _skipped(r: int, c: P2P, where: dict[int, tuple[str, str]], calls: list[Line],
             sent: list[tuple[Line, int | None]], path: str) -> dict[str, Any] | None:
    """Rank ``r`` waits in a loop for its peer's message, the peer waits in a collective further
    down the same loop, having sent that message this step: had ``r`` been in the same step its
    receive would have matched. ``r`` went round the loop without the collective: it skipped it."""
    if c.peer is None:
        return None
    pcall, psite = where[c.peer]
    site = where[r][1]
    m, pm = SITE_RE.match(site), SITE_RE.match(psite)
    if native_p2p(pcall) or m is None or pm is None:
        return None
    own = [ln for ln in calls if ln.line == int(m[2]) and ln.method == c.method and ln.looped]
    if len(own) != 1:
        return None
    loop = own[0].loop, own[0].loop_end
    fits = [ln for ln, tag in sent if c.tag in (-1, tag) and (ln.loop, ln.loop_end) == loop]
    if not fits or not loop[0] <= int(pm[2]) <= loop[1] or not ran_past(psite, site):
        return None
    others = sorted(q for q, w in where.items() if w == (pcall, psite))
    coll = pcall.replace("MPI_", "")
    return {"kind": "collective-mismatch", "ranks": [r], "op": coll, "site": psite,
            "reason": f"rank {r} skipped {coll} at {short_site(psite)}, which rank(s) {_ranges(others)} wait in: it is "
                      f"already in the next step's {c.method} at {short_site(site)}, waiting for rank {c.peer}, which "
                      f"sent it this step's message at {short_site(_at(path, fits[0]))}"}


def _ranges(ranks: list[int]) -> str:
    from planaria.diagnose.hangfilter import rank_ranges
    return rank_ranges(ranks)


def _cycle(where: dict[int, tuple[str, str]], p2p: dict[int, P2P]) -> list[int] | None:
    """A wait cycle through at least one point-to-point wait: a rank in a receive or send waits for
    its peer; a rank in a collective waits for every rank that is not in the same call at the same line."""
    def nxt(r: int) -> list[int]:
        if r in p2p:
            peer = p2p[r].peer
            return [peer] if peer is not None and peer >= 0 and peer in where else []
        if native_p2p(where[r][0]):
            return []
        return [q for q in sorted(where) if where[q] != where[r]]

    done: set[int] = set()                  # explored: a depth-first search, each rank once
    for start in sorted(p2p):
        if start in done:
            continue
        path, on = [start], {start: 0}
        stack = [iter(nxt(start))]
        while stack:
            q = next(stack[-1], None)
            if q is None:
                stack.pop()
                done.add(path[-1])
                on.pop(path.pop(), None)
                continue
            if q in on:
                cyc = path[on[q]:]
                if len(cyc) > 1 and any(x in p2p for x in cyc):
                    return cyc
                continue
            if q in done:
                continue
            on[q] = len(path)
            path.append(q)
            stack.append(iter(nxt(q)))
    return None
