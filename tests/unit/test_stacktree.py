"""Merged call-prefix tree: node counts and rank sets against a direct prefix count, order independence,
text rendering, and Graphviz dot that is structurally valid (and accepted by ``dot`` when installed)."""
from __future__ import annotations

import random
import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planaria.diagnose.hangfilter import group, parse_rank_ranges, rank_ranges
from planaria.diagnose.stacktree import Node, build_tree, dot_escape, to_dot, to_text

FAST = settings(max_examples=120, deadline=None)

MAIN = ("app.py", 1, "main")
SOLVE = ("app.py", 20, "solve")
XCHG = ("app.py", 33, "exchange")
ALLRED = ("mpi.py", 7, "Allreduce")
RECV = ("mpi.py", 9, "Recv")


def _example() -> list[tuple]:
    return [
        ([MAIN, SOLVE, ALLRED], np.array([0, 1, 2, 4, 6, 7]), 6),
        ([MAIN, XCHG, RECV], np.array([3, 5]), 2),
        ([MAIN, SOLVE], [8], 1),
    ]


def test_tree_of_example() -> None:
    tree = build_tree(_example())
    assert tree.frame is None and tree.count == 9 and tree.ranks.tolist() == list(range(9))
    (main,) = tree.children
    assert main.frame == MAIN and main.count == 9
    solve, xchg = main.children                    # sorted by frame: line 20 before line 33
    assert (solve.frame, solve.count, rank_ranges(solve.ranks)) == (SOLVE, 7, "0-2,4,6-8")
    assert (xchg.frame, xchg.count, rank_ranges(xchg.ranks)) == (XCHG, 2, "3,5")
    assert solve.ending == 1 and solve.children[0].ending == 6 and main.ending == 0
    lines = to_text(tree).splitlines()
    assert lines[0] == "<all>  [0-8]  9 ranks, 9 threads"
    assert lines[1] == "  app.py:1 in main  [0-8]  9 ranks, 9 threads"
    assert lines[2] == "    app.py:20 in solve  [0-2,4,6-8]  7 ranks, 7 threads"
    assert lines[3] == "      mpi.py:7 in Allreduce  [0-2,4,6-7]  6 ranks, 6 threads"
    assert lines[5] == "      mpi.py:9 in Recv  [3,5]  2 ranks, 2 threads"
    assert len(lines) == 6


def test_tree_from_hang_classes() -> None:
    stacks = [[MAIN, SOLVE, ALLRED], [MAIN, XCHG, RECV]]
    samples = np.array([[0, 0], [0, 0], [1, 1], [0, 1]], dtype=np.int32)
    classes = group(samples, [0, 1, 2, 3], stacks=stacks)
    tree = build_tree(classes)
    assert tree.count == 3 and tree.ranks.tolist() == [0, 1, 2]
    leaves = {n.frame: (n.count, n.ranks.tolist()) for _, n in tree.walk() if not n.children}
    assert leaves == {ALLRED: (2, [0, 1]), RECV: (1, [2])}
    with pytest.raises(ValueError):
        build_tree(group(samples, [0, 1, 2, 3]))   # classes without stacks


@pytest.mark.parametrize("entries", [
    [("not a triple",)],
    [([MAIN], [0], -1)],
    [([MAIN], [-1], 1)],
    [([MAIN], [0.5], 1)],
    [([("a.py", "x", "f")], [0], 1)],
    [([("a.py", 1)], [0], 1)],
])
def test_build_tree_rejects_bad_entries(entries: list) -> None:
    with pytest.raises(ValueError):
        build_tree(entries)


def test_empty_tree() -> None:
    tree = build_tree([])
    assert tree.count == 0 and tree.children == [] and tree.ranks.size == 0
    assert to_text(tree) == "<all>  []  0 ranks, 0 threads\n"
    _check_dot(to_dot(tree), tree)


def test_long_rank_ranges_are_clipped() -> None:
    tree = build_tree([([MAIN], np.arange(0, 2000, 2), 1000)])
    line = to_text(tree, max_ranges=40).splitlines()[1]
    shown = line.split("[", 1)[1].split("]", 1)[0]
    assert shown.endswith(",...") and len(shown) <= 44 and "1000 ranks" in line
    assert rank_ranges(parse_rank_ranges(shown[:-4])) == shown[:-4]        # cut at a comma
    full = to_text(tree, max_ranges=None).splitlines()[1]
    assert "1998" in full and "..." not in full


# --------------------------------------------------------------------------- random trees
_names = st.text(alphabet=st.sampled_from(list('ab"\\{}\n -<>;')), min_size=1, max_size=4)
_frames = st.tuples(st.sampled_from(["a.py", "b/c.py", 'q"x.py']), st.integers(1, 4), _names)
_entry = st.tuples(st.lists(_frames, max_size=4),
                   st.lists(st.integers(0, 40), min_size=1, max_size=8),
                   st.integers(0, 5))


def _path_of(tree: Node) -> dict[tuple, Node]:
    out: dict[tuple, Node] = {}

    def rec(node: Node, path: tuple) -> None:
        out[path] = node
        for c in node.children:
            rec(c, path + (c.frame,))
    rec(tree, ())
    return out


@FAST
@given(st.lists(_entry, max_size=8), st.randoms(use_true_random=False))
def test_tree_counts_and_ranks_match_prefixes(entries: list, rnd: random.Random) -> None:
    tree = build_tree(entries)
    paths = _path_of(tree)
    want_paths = {tuple(frames[:i]) for frames, _, _ in entries for i in range(len(frames) + 1)} | {()}
    assert set(paths) == want_paths
    for path, node in paths.items():
        through = [(r, c) for frames, r, c in entries if tuple(frames[:len(path)]) == path]
        assert node.count == sum(c for _, c in through)
        assert node.ranks.tolist() == sorted({x for r, _ in through for x in r})
        frames = [c.frame for c in node.children]
        assert frames == sorted(set(frames))
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    assert to_text(build_tree(shuffled)) == to_text(tree)
    text = to_text(tree)
    assert len(text.splitlines()) == len(paths)
    _check_dot(to_dot(tree, max_ranges=None), tree)


# --------------------------------------------------------------------------- dot checks
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|->|[{}\[\];,=]|[A-Za-z_][A-Za-z0-9_]*|\s+', re.S)


def _tokens(text: str) -> list[str]:
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m, f"unexpected dot text at {pos}: {text[pos:pos + 30]!r}"
        if not m.group().isspace():
            toks.append(m.group())
        pos = m.end()
    return toks


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), quoted[1:-1])


def _check_dot(dot: str, tree: Node) -> None:
    toks = _tokens(dot)
    assert toks[0] == "digraph" and toks[2] == "{" and toks[-1] == "}"
    depth = 0
    for t in toks:
        depth += (t == "{") - (t == "}")
        assert depth >= 0
    assert depth == 0
    declared: dict[str, str] = {}
    edges: list[tuple[str, str, str]] = []
    i = 3
    while i < len(toks) - 1:
        if toks[i + 1] == "->":
            assert toks[i + 3:i + 6] == ["[", "label", "="]
            edges.append((toks[i], toks[i + 2], _unescape(toks[i + 6])))
        elif toks[i] != "node":
            assert toks[i + 1:i + 4] == ["[", "label", "="]
            declared[toks[i]] = _unescape(toks[i + 4])
        i = toks.index(";", i) + 1
    nodes = [n for _, n in tree.walk()]
    assert len(declared) == len(nodes) and len(edges) == len(nodes) - 1
    for a, b, _ in edges:
        assert a in declared and b in declared
    labels = sorted(declared.values())
    want = sorted("<all>" if n.frame is None else f"{n.frame[2]}\n{n.frame[0]}:{n.frame[1]}" for n in nodes)
    assert labels == want
    edge_labels = sorted(lab for _, _, lab in edges)
    want_edges = sorted(f"{c.count}:[{rank_ranges(c.ranks)}]" for n in nodes for c in n.children)
    assert edge_labels == want_edges


def test_dot_escape() -> None:
    assert dot_escape('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not installed")
def test_graphviz_accepts_dot() -> None:
    entries = _example() + [([("we\"ird\\.py", 3, "f{}\n<x>")], [9], 1)]
    tree = build_tree(entries)
    res = subprocess.run(["dot", "-Tplain"], input=to_dot(tree), capture_output=True, text=True, timeout=20)
    assert res.returncode == 0, res.stderr
    assert sum(1 for line in res.stdout.splitlines() if line.startswith("node ")) == len(list(tree.walk()))
