"""STAT-style merged call-prefix tree: stacks merged by common prefix, each node carrying the ranks and the
thread count that pass through it, rendered as indented text or Graphviz dot.

Input: entries ``(frames, ranks, count)`` — frames outermost first, each ``(filename, lineno, funcname)``;
ranks an integer array (or iterable) of world ranks; count the number of threads with that stack — or
:class:`~planaria.diagnose.hangfilter.HangClass` objects that carry their stack. To build the tree of
every thread's current stack (not only the stable ones), group a single sampling round:
``build_tree(group(samples[:, :1], thread_rank, stacks=stacks))``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planaria.diagnose.hangfilter import Frame, HangClass, frame_text, rank_ranges

ROOT_LABEL = "<all>"


@dataclass(eq=False)
class Node:
    """One call-prefix: ``frame`` (None at the root), the ranks and thread count passing through it."""

    frame: Frame | None
    ranks: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    count: int = 0
    children: list[Node] = field(default_factory=list)

    @property
    def label(self) -> str:
        return ROOT_LABEL if self.frame is None else frame_text(self.frame)

    @property
    def ending(self) -> int:
        """Threads whose stack ends at this node (count minus what passes on to the children)."""
        return self.count - sum(c.count for c in self.children)

    def walk(self) -> Iterable[tuple[int, Node]]:
        """(depth, node) pairs in depth-first pre-order, root at depth 0."""
        todo: list[tuple[int, Node]] = [(0, self)]
        while todo:
            depth, node = todo.pop()
            yield depth, node
            todo.extend((depth + 1, c) for c in reversed(node.children))


class _Building:
    __slots__ = ("frame", "parts", "count", "children")

    def __init__(self, frame: Frame | None) -> None:
        self.frame = frame
        self.parts: list[np.ndarray] = []
        self.count = 0
        self.children: dict[Frame, _Building] = {}


def _entries(items: Iterable[Any]) -> Iterable[tuple[Sequence[Sequence[Any]], np.ndarray, int]]:
    for it in items:
        if isinstance(it, HangClass):
            if it.stack is None:
                raise ValueError(f"{it!r} has no stack: pass stacks= to group() before building a tree")
            yield it.stack, it.ranks, it.count
        else:
            try:
                frames, ranks, count = it
            except (TypeError, ValueError):
                raise ValueError(f"tree entry must be (frames, ranks, count) or a HangClass, got {it!r}") from None
            yield frames, ranks, count


def _frame(f: Sequence[Any]) -> Frame:
    try:
        filename, lineno, func = f
        return (str(filename), int(lineno), str(func))
    except (TypeError, ValueError):
        raise ValueError(f"frame must be (filename, lineno, funcname), got {f!r}") from None


def build_tree(items: Iterable[Any]) -> Node:
    """Merge stacks by common prefix into one tree; children sorted by frame, so input order does not matter."""
    root = _Building(None)
    for frames, ranks, count in _entries(items):
        r = np.asarray(ranks).ravel()
        if r.size == 0 and r.dtype.kind == "f":
            r = r.astype(np.int64)
        if r.dtype.kind not in "iu":
            raise ValueError(f"ranks must be integers, got dtype {r.dtype}")
        if r.size and int(r.min()) < 0:
            raise ValueError(f"ranks must be >= 0, got {int(r.min())}")
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"thread count must be an integer >= 0, got {count!r}")
        node = root
        node.parts.append(r)
        node.count += int(count)
        for f in frames:
            fr = _frame(f)
            child = node.children.get(fr)
            if child is None:
                child = node.children[fr] = _Building(fr)
            child.parts.append(r)
            child.count += int(count)
            node = child
    return _finish(root)


def _finish(b: _Building) -> Node:
    ranks = np.unique(np.concatenate(b.parts)).astype(np.int64) if b.parts else np.empty(0, dtype=np.int64)
    kids = [_finish(b.children[k]) for k in sorted(b.children)]
    return Node(frame=b.frame, ranks=ranks, count=b.count, children=kids)


def _clip(text: str, limit: int | None) -> str:
    """Rank-range text cut at a comma to at most about ``limit`` characters ("..." marks the cut)."""
    if limit is None or len(text) <= limit:
        return text
    cut = text.rfind(",", 0, max(limit, 1))
    return (text[:cut] if cut > 0 else text.split(",", 1)[0]) + ",..."


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def to_text(tree: Node, max_ranges: int | None = 80) -> str:
    """Indented tree, one line per node: frame, ``[rank ranges]``, rank and thread counts."""
    lines = []
    for depth, node in tree.walk():
        rr = _clip(rank_ranges(node.ranks), max_ranges)
        counts = f"{_plural(int(node.ranks.size), 'rank')}, {_plural(node.count, 'thread')}"
        label = node.label.replace("\r", "\\r").replace("\n", "\\n")     # one line per node, always
        lines.append(f"{'  ' * depth}{label}  [{rr}]  {counts}")
    return "\n".join(lines) + "\n"


def dot_escape(text: str) -> str:
    """Text for a double-quoted Graphviz string: backslash, quote and line breaks escaped."""
    return (text.replace("\\", "\\\\").replace('"', '\\"')
            .replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n"))


def _node_label(node: Node) -> str:
    if node.frame is None:
        return dot_escape(ROOT_LABEL)
    filename, lineno, func = node.frame
    return dot_escape(func) + "\\n" + dot_escape(f"{filename}:{lineno}")


def to_dot(tree: Node, max_ranges: int | None = 60, name: str = "stacktree") -> str:
    """Graphviz dot: one box per node (function, file:line), edges labelled ``count:[rank ranges]`` as STAT."""
    ids: dict[int, str] = {}
    out = [f'digraph "{dot_escape(name)}" {{', '  node [shape=box, fontname="monospace"];']
    for _, node in tree.walk():
        nid = ids[id(node)] = f"n{len(ids)}"
        out.append(f'  {nid} [label="{_node_label(node)}"];')
    for _, node in tree.walk():
        for c in node.children:
            rr = _clip(rank_ranges(c.ranks), max_ranges)
            out.append(f'  {ids[id(node)]} -> {ids[id(c)]} [label="{dot_escape(f"{c.count}:[{rr}]")}"];')
    out.append("}")
    return "\n".join(out) + "\n"


def to_nodes(tree: Node, max_nodes: int | None = 200) -> list[dict[str, Any]]:
    """The tree as JSON-able rows in depth-first pre-order: ``id``, ``parent`` (None at the root),
    ``site`` (``file:line in func``, None at the root), ``ranks`` (range text), ``n_ranks`` and
    ``count`` (threads); at most ``max_nodes`` rows (pre-order: a row's parent is always kept)."""
    ids: dict[int, int] = {}
    parent: dict[int, int | None] = {id(tree): None}
    out: list[dict[str, Any]] = []
    for _, node in tree.walk():
        if max_nodes is not None and len(out) >= max_nodes:
            break
        ids[id(node)] = len(out)
        out.append({"id": len(out), "parent": parent[id(node)],
                    "site": None if node.frame is None else frame_text(node.frame),
                    "ranks": rank_ranges(node.ranks), "n_ranks": int(node.ranks.size), "count": node.count})
        for c in node.children:
            parent[id(c)] = ids[id(node)]
    return out
