"""The picture of a diagnosis (``planaria diagnose --dot/--svg``): the wait-for graph and the merged
call tree of the stable threads, side by side in one Graphviz graph, root causes highlighted.

:func:`to_dot` builds the DOT text from a report alone (pure): the report's ``wait_graph``
(:mod:`planaria.diagnose.waitdraw`; a post-mortem or stacks-only report has none, and its root
causes, and for a post-mortem the failures they explain, are drawn instead) and
``hang_filter.tree`` (:func:`planaria.diagnose.stacktree.to_nodes`). Root-cause nodes are
filled red: the wait graph's nodes holding a root cause's rank, the call tree's frames at a root
cause's site. :func:`render_svg` runs Graphviz ``dot -Tsvg`` on it, bounded by a timeout.
"""
from __future__ import annotations

import shutil
import subprocess
import textwrap
from typing import Any

from planaria.diagnose.findings import clip, ranges, short_site
from planaria.diagnose.stacktree import dot_escape
from planaria.errors import PlanariaError

DOT_TIMEOUT = 60.0     # seconds dot may take (a picture of a few hundred nodes takes well under one)
WRAP = 44              # characters per label line
ROOT = 'style="filled,bold", fillcolor="#ffd6d6", color="#c00000", penwidth=2'
KIND_SHAPE = {"rank": "box", "ranks": "box3d", "collective": "hexagon", "cause": "box"}


class DotError(PlanariaError, RuntimeError):
    """Graphviz ``dot`` is missing, failed or did not finish in time (one line)."""


def _label(*parts: str) -> str:
    lines = [ln for part in parts if part for ln in textwrap.wrap(part, WRAP) or [""]]
    return "\\n".join(dot_escape(ln) for ln in lines)


def _cause_of(report: dict[str, Any]) -> dict[int, str]:
    """rank -> kind of the first root cause naming it."""
    out: dict[int, str] = {}
    for rc in report.get("root_causes") or []:
        for r in rc.get("rank_list") or []:
            out.setdefault(int(r), str(rc.get("kind")))
    return out


def _wait_lines(report: dict[str, Any]) -> list[str]:
    wg = report["wait_graph"]
    kinds = _cause_of(report)
    out = []
    for n in wg.get("nodes") or []:
        kind = kinds.get(int(n["ranks"])) if n.get("n_ranks") == 1 and str(n.get("ranks")).isdigit() else None
        head = (f"ROOT CAUSE: {kind}" if kind else "ROOT CAUSE") if n.get("root") else ""
        style = ROOT if n.get("root") else ('style=filled, fillcolor="#eef3ff"' if n["kind"] == "collective" else "")
        out.append(f'    w_{n["id"]} [shape={KIND_SHAPE.get(n["kind"], "box")}, '
                   f'label="{_label(head, n["label"], n.get("detail") or "")}"{", " + style if style else ""}];')
    for e in wg.get("edges") or []:
        out.append(f'    w_{e["from"]} -> w_{e["to"]} [label="{dot_escape(str(e.get("label") or ""))}"];')
    if wg.get("omitted"):
        out.append(f'    w_more [shape=note, label="{wg["omitted"]} more waiting ranks not drawn"];')
    return out


def _cause_lines(report: dict[str, Any]) -> list[str]:
    """Without a wait graph: the root causes, and the failed ranks each one explains (post-mortem)."""
    out: list[str] = []
    owner: dict[int, str] = {}
    for i, rc in enumerate(report.get("root_causes") or []):
        site = f"at {short_site(rc['site'])}" if rc.get("site") else ""
        label = _label("ROOT CAUSE: " + str(rc.get("kind")), f"rank(s) {rc.get('ranks')}", str(rc.get("reason") or ""), site)
        out.append(f'    c{i} [shape=box, label="{label}", {ROOT}];')
        for r in rc.get("rank_list") or []:
            owner.setdefault(int(r), f"c{i}")
    groups: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    for rank, c in sorted((report.get("consequences") or {}).items(), key=lambda kv: int(kv[0])):
        groups.setdefault((str(c.get("op") or c.get("by") or "?"), tuple(int(b) for b in c.get("blames") or ())),
                          []).append(int(rank))
    for k, ((op, blames), failed) in enumerate(groups.items()):
        out.append(f'    f{k} [shape=box3d, label="{_label(f"{len(failed)} rank(s): {clip(ranges(failed), 40)}", f"failed in {op}")}"];')
        for b in sorted({owner.get(b, f"r{b}") for b in blames}):
            if b.startswith("r"):
                out.append(f'    {b} [shape=box, label="rank {b[1:]}"];')
            out.append(f'    f{k} -> {b} [label="saw it fail"];')
    return out


def _tree_lines(report: dict[str, Any]) -> list[str]:
    nodes = (report.get("hang_filter") or {}).get("tree") or []
    sites = {str(rc["site"]) for rc in report.get("root_causes") or [] if rc.get("site")}
    out = []
    for n in nodes:
        site = n.get("site")
        if site is None:
            label = _label("<all threads>")
        else:
            where, _, func = str(site).rpartition(" in ")
            label = _label(func, short_site(where))
        style = f", {ROOT}" if site in sites else ""
        out.append(f'    t{n["id"]} [shape=box, label="{label}"{style}];')
        if n.get("parent") is not None:
            out.append(f'    t{n["parent"]} -> t{n["id"]} [label="{dot_escape(str(n["count"]) + ":[" + clip(str(n["ranks"]), 40) + "]")}"];')
    return out


def to_dot(report: dict[str, Any]) -> str:
    """The DOT text of a diagnosis report (see the module docstring)."""
    title = f"job {report.get('job') or '?'}: verdict {report.get('verdict')}"
    causes = [f"{i}. rank(s) {rc.get('ranks')}: {rc.get('kind')}" for i, rc in enumerate(report.get("root_causes") or [], 1)]
    out = ["digraph diagnosis {",
           f'  graph [label="{_label(title, *causes[:4])}", labelloc=t, fontname="Helvetica", fontsize=14, '
           'nodesep=0.3, ranksep=0.5];',
           '  node [fontname="Helvetica", fontsize=10];',
           '  edge [fontname="Helvetica", fontsize=9];']
    wait = _wait_lines(report) if report.get("wait_graph") else _cause_lines(report)
    if wait:
        head = "wait graph: an arrow points at what the waiter waits for" if report.get("wait_graph") \
            else "root causes and the failures they explain"
        out += ["  subgraph cluster_wait {", f'    label="{dot_escape(head)}"; color="#888888";', *wait, "  }"]
    tree = _tree_lines(report)
    if tree:
        out += ["  subgraph cluster_tree {",
                '    label="call tree of the threads whose stack never changed (count:[ranks])"; color="#888888";',
                *tree, "  }"]
    out.append("}")
    return "\n".join(out) + "\n"


def dot_missing() -> str | None:
    """None when Graphviz ``dot`` is on PATH, else one line naming the fix."""
    if shutil.which("dot") is None:
        return "Graphviz dot is not on PATH: install graphviz (apt-get install graphviz)"
    return None


def render_svg(dot_text: str, timeout: float = DOT_TIMEOUT) -> bytes:
    """The SVG ``dot -Tsvg`` makes of ``dot_text``; DotError (one line) when dot is missing, fails
    or runs longer than ``timeout`` seconds (it is killed then)."""
    exe = shutil.which("dot")
    if exe is None:
        raise DotError(str(dot_missing()))
    try:
        res = subprocess.run([exe, "-Tsvg"], input=dot_text.encode(), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DotError(f"dot did not finish in {timeout:g} s") from None
    except OSError as exc:
        raise DotError(f"cannot run {exe}: {exc}") from None
    if res.returncode != 0 or not res.stdout:
        err = " ".join(res.stderr.decode(errors="replace").split())[:300]
        raise DotError(f"dot failed (exit status {res.returncode}): {err}")
    return res.stdout
