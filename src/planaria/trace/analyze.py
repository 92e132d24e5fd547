"""Post-mortem analysis of fragmented-program traces ([Vlasenko 2022] §5, the ``luna_trace`` utility).

From the merged per-rank records: hung CFs (never finished) with expression, file:line and
call history; the DFs each awaits, as index ranges with local and declared names; where the
missing values probably should have been set (other elements of the same DF and the code that
wrote them); root causes (hung CFs that depend on no other hung CF) or dependency cycles;
DFs initialized more than once with all writers; type mismatches and exceptions in CFs.
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from planaria.graphs import cyclic_components
from planaria.trace.writer import read_traces


def analyze_dir(directory: str | os.PathLike[str], all_hung: bool = False,
                problems: list[str] | None = None) -> dict[str, Any]:
    """The report of the traces in ``directory`` (lines that are not records are named in ``problems``)."""
    return analyze(read_traces(directory, problems), all_hung=all_hung)


# -- helpers ------------------------------------------------------------------------------------
def _where(file: str | None, line: int | None) -> str:
    if not file:
        return "[?]"
    try:
        rel = os.path.relpath(file)
        file = file if rel.startswith("..") else rel
    except ValueError:
        pass
    return f"[{file}:{line}]"


def _stack_key(cf: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((f.get("file"), f.get("line")) for f in cf.get("stack") or [])


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """Sorted distinct integers as maximal runs of consecutive ones: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    out: list[tuple[int, int]] = []
    for v in sorted(set(values)):
        if out and out[-1][1] + 1 == v:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def _boxes(points: set[tuple[int, ...]]) -> list[tuple[tuple[int, int], ...]]:
    """A partition of ``points`` (integer tuples of one length) into boxes, one (lo, hi) per dimension.

    The points with first index v are split into boxes of the other dimensions; a box found for
    consecutive values of v becomes one box with the run of v in front. A full box stays one box.
    """
    if not next(iter(points)):
        return [()]
    rest: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    for p in points:
        rest[p[0]].add(p[1:])
    heads: dict[tuple[tuple[int, int], ...], list[int]] = defaultdict(list)
    for v, tails in rest.items():
        for box in _boxes(tails):
            heads[box].append(v)
    return [((lo, hi), *box) for box, vs in heads.items() for lo, hi in _runs(vs)]


def index_ranges(indices: list[list[Any]]) -> list[tuple[list[Any], list[Any]]]:
    """Compress index tuples into boxes ``(lo, hi)``: every index with lo[k] <= i[k] <= hi[k] in
    each dimension k is one of ``indices``, and each of them is in exactly one box.

    [[8], [9], [11]] -> [([8], [9]), ([11], [11])]; the 64 indices of p[0..3][0..3][0..3] -> one box.
    Indices that are not all integers stay single.
    """
    ints: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    other: list[list[Any]] = []
    for ix in indices:
        if ix and all(isinstance(i, int) and not isinstance(i, bool) for i in ix):
            ints[len(ix)].add(tuple(ix))
        else:
            other.append(list(ix))
    boxes = [box for pts in ints.values() for box in _boxes(pts)]
    out = [([lo for lo, _ in box], [hi for _, hi in box]) for box in sorted(boxes)]
    out.extend((ix, ix) for ix in other)
    return out


def _fmt_ix(name: str, ix: list[Any]) -> str:
    return name + "".join(f"[{i}]" for i in ix)


def _fmt_range(name: str, lo: list[Any], hi: list[Any]) -> str:
    """``x[8..9]``, ``p[0..3][2][0..1]``: the box from ``lo`` to ``hi``, one bracket per dimension."""
    if lo == hi:
        return _fmt_ix(name, lo)
    return name + "".join(f"[{a}]" if a == b else f"[{a}..{b}]" for a, b in zip(lo, hi, strict=True))


def _covers(out: dict[str, Any], df_id: str, base: str, index: list[Any]) -> bool:
    """Whether an output DF reference (possibly a whole indexed DF) covers the DF ``df_id``."""
    if out.get("id") == df_id:
        return True
    oix = out.get("index") or []
    return out.get("base") == base and len(oix) <= len(index) and list(index[:len(oix)]) == list(oix)


# -- the analysis ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Trace:
    """The merged records sorted by kind."""

    cfs: dict[str, dict[str, Any]] = field(default_factory=dict)            # CF id -> its record
    dfdecl: dict[str, dict[str, Any]] = field(default_factory=dict)         # DF id -> its declaration
    sets: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))          # DF -> sets
    set_by_base: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))   # base -> sets
    ended: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)                 # CF -> start time
    unfinished: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    exits: list[dict[str, Any]] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    deletes: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))


def _read(records: list[dict[str, Any]]) -> _Trace:
    """The records sorted by kind (``k``)."""
    t = _Trace()
    for r in records:
        k = r.get("k")
        if "rank" in r:
            t.ranks.add(r["rank"])
        if k == "cf":
            t.cfs[r["id"]] = r
        elif k == "df":
            t.dfdecl[r["id"]] = r
        elif k == "set":
            t.sets[r["df"]].append(r)
            t.set_by_base[r.get("base", r["df"])].append(r)
        elif k == "start":
            t.started[r["cf"]] = r.get("t", 0.0)
        elif k == "end":
            t.ended[r["cf"]] = r
        elif k == "unfinished":
            t.unfinished[r["cf"]] = r
        elif k == "error":
            t.errors.append(r)
        elif k == "exit":
            t.exits.append(r)
        elif k == "delete":
            t.deletes[r["df"]].append(r)
    return t


@dataclass(frozen=True)
class _Hung:
    """CFs created and never ended (dumped at exit, or lost with a killed rank), what each awaits,
    and which hung CF would write it."""

    ids: list[str]
    awaits: dict[str, list[str]]                         # CF -> awaited DF ids
    in_info: dict[str, dict[str, dict[str, Any]]]        # CF -> DF id -> its input description
    edges: dict[str, set[str]]                           # A -> B: A awaits a DF that B would write


def _hung(t: _Trace) -> _Hung:
    """The hung CFs and their dependency graph: A -> B when A awaits a DF that B would write."""
    ids = [c for c in t.cfs if c not in t.ended]
    awaits: dict[str, list[str]] = {}
    for c in ids:
        if c in t.unfinished:
            awaits[c] = list(t.unfinished[c].get("awaits") or [])
        else:
            awaits[c] = [i["id"] for i in t.cfs[c].get("in", []) if i["id"] not in t.sets]
    in_info = {c: {i["id"]: i for i in t.cfs[c].get("in", [])} for c in ids}
    edges: dict[str, set[str]] = {c: set() for c in ids}
    by_base: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for c in ids:
        for o in t.cfs[c].get("out", []):
            by_base[o.get("base", o["id"])].append((c, o))
    for a in ids:
        for d in awaits[a]:
            info = in_info[a].get(d, {})
            base, ix = info.get("base", d), info.get("index", [])
            for b, o in by_base.get(base, []):
                if b != a and _covers(o, d, base, ix):
                    edges[a].add(b)
    return _Hung(ids, awaits, in_info, edges)


def analyze(records: list[dict[str, Any]], all_hung: bool = False) -> dict[str, Any]:
    """The report as a dict (``text`` is added by :func:`render_text`)."""
    t = _read(records)
    hung = _hung(t)
    roots = [c for c in hung.ids if not hung.edges[c]]
    # edges never loop on a CF itself; the graph helper takes any sortable node (typed for ranks)
    adj: dict[Any, set[Any]] = {c: hung.edges[c] for c in hung.ids}
    cycles: list[list[Any]] = cyclic_components(adj)
    mismatches, exceptions = _errors(t)
    statuses = sorted({x["status"] for x in t.exits if x.get("status")})
    report = {
        "status": statuses[0] if len(statuses) == 1 else ("/".join(statuses) or "unknown"),
        "ranks": sorted(t.ranks), "ranks_without_exit": sorted(t.ranks - {x.get("rank") for x in t.exits}),
        "cfs": len(t.cfs), "finished": len(t.ended), "hung": len(hung.ids),
        "root_causes": _grouped(t, hung, roots),
        "all_hung": _grouped(t, hung, hung.ids) if all_hung else None,
        "cycles": [[{"cf": c, "expr": t.cfs[c].get("expr"), "file": t.cfs[c].get("file"),
                     "line": t.cfs[c].get("line")} for c in comp] for comp in cycles],
        "cycle_without_root": bool(hung.ids) and not roots and len(hung.ids) >= 2,
        "multiple_init": _multiple_init(t),
        "type_mismatches": mismatches,
        "exceptions": exceptions,
    }
    report["text"] = render_text(report)
    return report


def _frames(cf: dict[str, Any]) -> list[dict[str, Any]]:
    return list(cf.get("stack") or [])


def _writer_sites(t: _Trace, base: str) -> list[dict[str, Any]]:
    """The code that set other elements of DF ``base``, one entry per call site and history."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for s in t.set_by_base.get(base, []):
        w = t.cfs.get(s["cf"])
        if w is None:
            continue
        key = (w.get("file"), w.get("line")) + _stack_key(w)
        g = groups.setdefault(key, {"expr": w.get("expr"), "file": w.get("file"), "line": w.get("line"),
                                    "stack": _frames(w), "dfs": []})
        g["dfs"].append(s["df"])
    return list(groups.values())


def _awaited(t: _Trace, hung: _Hung, group_ids: list[str]) -> list[dict[str, Any]]:
    """The DFs the CFs ``group_ids`` await, as index ranges per declared DF."""
    aw: dict[tuple[str, str, str, str], list[list[Any]]] = defaultdict(list)
    for c in group_ids:
        for d in hung.awaits[c]:
            info = hung.in_info[c].get(d) or {"id": d, "base": d, "decl": d, "decl_in": "?", "local": d, "index": []}
            aw[(info.get("base", d), info.get("local", d), info.get("decl", d), info.get("decl_in", "?"))].append(
                info.get("index", []))
    awaited = []
    for (base, local, decl, decl_in), ixs in aw.items():
        rngs = index_ranges(ixs)
        decl_rec = t.dfdecl.get(base, {})
        awaited.append({
            "base": base, "local": local, "decl": decl, "decl_in": decl_in,
            "decl_file": decl_rec.get("file"), "decl_line": decl_rec.get("line"),
            "ranges": [{"from": lo, "to": hi, "local": _fmt_range(local, lo, hi), "decl": _fmt_range(decl, lo, hi)}
                       for lo, hi in rngs],
            "deleted": sorted(d for d in t.deletes if d == base or d.startswith(base + "[")),
            "maybe_set_at": _writer_sites(t, base),
        })
    return awaited


def _describe(t: _Trace, hung: _Hung, group_ids: list[str]) -> dict[str, Any]:
    """One entry for hung CFs of the same call site and history."""
    cf = t.cfs[group_ids[0]]
    return {"cfs": group_ids, "instances": len(group_ids), "code": cf.get("code"), "expr": cf.get("expr"),
            "loops": [{"loop": h, "line": ln} for h, ln in enclosing_loops(cf.get("file"), cf.get("line"))],
            "file": cf.get("file"), "line": cf.get("line"), "kind": cf.get("kind"),
            "stack": _frames(cf), "awaited": _awaited(t, hung, group_ids),
            "state": (t.unfinished.get(group_ids[0]) or {}).get(
                "state", "running when its rank died" if group_ids[0] in t.started else "lost with its rank"),
            "running_s": _running_for(t.unfinished.get(group_ids[0]), t.started.get(group_ids[0])),
            "rank": cf.get("rank")}


def _grouped(t: _Trace, hung: _Hung, ids: list[str]) -> list[dict[str, Any]]:
    """The CFs ``ids`` grouped by call site, code and history."""
    groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for c in ids:
        cf = t.cfs[c]
        groups[(cf.get("file"), cf.get("line"), cf.get("code")) + _stack_key(cf)].append(c)
    return [_describe(t, hung, sorted(v, key=_cf_order)) for v in groups.values()]


def _multiple_init(t: _Trace) -> list[dict[str, Any]]:
    """DFs set by two CFs or more, with every writer."""
    multi = []
    for d, ss in t.sets.items():
        writers = sorted({s["cf"] for s in ss}, key=_cf_order)
        if len(writers) >= 2:
            multi.append({"df": d, "name": ss[0].get("name", d) + d[len(ss[0].get("base", d)):],
                          "deleted_between": bool(t.deletes.get(d)),
                          "writers": [{"cf": w, "expr": t.cfs.get(w, {}).get("expr"),
                                       "file": t.cfs.get(w, {}).get("file"), "line": t.cfs.get(w, {}).get("line"),
                                       "stack": _frames(t.cfs.get(w, {}))}
                                      for w in writers]})
    return multi


def _errors(t: _Trace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(type mismatches with the CFs that set the DFs, CFs that raised)."""
    mismatches, exceptions = [], []
    for e in t.errors:
        cf = t.cfs.get(e.get("cf", ""), {})
        base = {"cf": e.get("cf"), "expr": cf.get("expr"), "file": cf.get("file"), "line": cf.get("line"),
                "stack": _frames(cf), "message": e.get("message")}
        if e.get("kind") == "type_mismatch":
            dfs = []
            for info in e.get("df") or []:
                ws = [{"cf": s["cf"], "expr": t.cfs.get(s["cf"], {}).get("expr"),
                       "file": t.cfs.get(s["cf"], {}).get("file"), "line": t.cfs.get(s["cf"], {}).get("line"),
                       "type": s.get("type")} for s in t.sets.get(info["id"], [])]
                dfs.append({**info, "set_by": ws})
            mismatches.append({**base, "param": e.get("param"), "expected": e.get("expected"), "got": e.get("got"),
                               "value": e.get("value"), "dfs": dfs})
        elif e.get("kind") == "exception":
            exceptions.append({**base, "exc": e.get("exc"), "at_file": e.get("file"), "at_line": e.get("line")})
    return mismatches, exceptions


def _running_for(unf: dict[str, Any] | None, start: float | None) -> float | None:
    """Seconds a CF dumped as running had been running when its rank stopped; None otherwise."""
    if not unf or unf.get("state") != "running" or start is None or "t" not in unf:
        return None
    return round(max(0.0, unf["t"] - start), 3)


def _cf_order(c: str) -> tuple[int, int]:
    try:
        a, b = c.split(".", 1)
        return int(a), int(b)
    except ValueError:
        return (1 << 30, 0)


# -- text -------------------------------------------------------------------------------------------
_LOOPS: dict[str, list[tuple[int, int, str]]] = {}


def enclosing_loops(file: str | None, line: int | None) -> list[tuple[str, int]]:
    """Loops around ``file:line`` in the source (innermost first): ("for i in range(size)", line).

    Python loops are not fragments, so the call history cannot record them; the analyzer reads
    them back from the source, as LuNA's luna_trace prints "in for i = 0..size-1".
    """
    if not file or not line:
        return []
    if file not in _LOOPS:
        import ast
        import linecache
        spans: list[tuple[int, int, str]] = []
        try:
            src = "".join(linecache.getlines(file))
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                    head = linecache.getline(file, node.lineno).strip().rstrip(":")
                    spans.append((node.lineno, node.end_lineno or node.lineno, head))
        except (SyntaxError, ValueError, OSError):
            spans = []
        _LOOPS[file] = spans
    hits = [(a, b, h) for a, b, h in _LOOPS[file] if a < line <= b]
    hits.sort(key=lambda t: -t[0])
    return [(h, a) for a, _b, h in hits]


def _stack_lines(stack: list[dict[str, Any]], indent: str) -> list[str]:
    """Call history, innermost first: loops around the call, 'in sub f(...) [def]', 'in f(args) [call site]'."""
    out = []
    for i in range(len(stack) - 2, -1, -1):
        caller = stack[i]
        inner = stack[i + 1]
        for head, ln in enclosing_loops(inner.get("file"), inner.get("line")):
            out.append(f"{indent}in {head} {_where(inner.get('file'), ln)}")
        out.append(f"{indent}in {caller['sig']} {_where(caller.get('def_file'), caller.get('def_line'))}")
        if i > 0:
            out.append(f"{indent}in {caller['expr']} {_where(caller.get('file'), caller.get('line'))}")
    return out


def render_text(rep: dict[str, Any]) -> str:
    """The report as text: hung CFs with their awaited DFs, cycles, DFs set twice, type mismatches, exceptions."""
    lines: list[str] = [f"run status: {rep['status']}; {rep['cfs']} CFs, {rep['finished']} finished, "
                        f"{rep['hung']} never finished"]
    if rep.get("ranks_without_exit"):
        lines.append(f"ranks whose trace has no exit record (killed?): {rep['ranks_without_exit']}")
    if rep["root_causes"]:
        title = ("Following CFs appear to be the root cause of the system hang:" if rep["status"] == "hung"
                 else f"Following CFs never finished (run {rep['status']}); root causes:")
        lines += _hung_block(title, rep["root_causes"])
    if rep.get("cycle_without_root") or rep["cycles"]:
        lines.append("")
        lines.append("Dependency cycle(s) among hung CFs (each waits for a DF another one would set):")
        for comp in rep["cycles"]:
            lines.append("  " + " -> ".join(f"{c['expr']} {_where(c['file'], c['line'])}" for c in comp))
    if rep.get("all_hung"):
        lines += _hung_block("All hung CFs:", rep["all_hung"])
    lines += _multiple_init_lines(rep["multiple_init"])
    lines += _mismatch_lines(rep["type_mismatches"])
    if rep["exceptions"]:
        lines.append("")
        lines.append("CFs that raised:")
        for e in rep["exceptions"]:
            lines.append(f"  {e['expr']} {_where(e['file'], e['line'])}: {e['exc']}: {e['message']} "
                         f"{_where(e.get('at_file'), e.get('at_line'))}")
    if not found_problems(rep):
        lines.append("no hung CFs, no multiply initialized DFs, no type mismatches")
    return "\n".join(lines) + "\n"


def _hung_block(title: str, items: list[dict[str, Any]]) -> list[str]:
    """Hung CFs under ``title``: call site, state, call history, awaited DFs and where they might be set."""
    lines = ["", title]
    for h in items:
        lines.append("")
        inst = f" ({h['instances']} instances)" if h["instances"] > 1 else ""
        state = h["state"] + (f" for {h['running_s']:.1f} s" if h.get("running_s") is not None else "")
        lines.append(f"{h['expr']} {_where(h['file'], h['line'])} never finished{inst} [{state}]")
        lines.extend(_stack_lines(h["stack"], "    "))
        for a in h["awaited"]:
            lines += _awaited_lines(a)
        if not h["awaited"]:
            lines.append("  awaits no DF: it was running or ready when the run stopped")
    return lines


def _awaited_lines(a: dict[str, Any]) -> list[str]:
    """One awaited DF: its ranges and names, a delete that removed it, the code that set its other elements."""
    rngs = ", ".join(r["local"] for r in a["ranges"])
    decl = ", ".join(r["decl"] for r in a["ranges"])
    alias = f"where {a['local']} is {a['decl']}, " if a["local"] != a["decl"] else ""
    lines = [f"  Awaited DFs {a['local']} ({alias}{a['decl']} declared in sub {a['decl_in']} "
             f"{_where(a.get('decl_file'), a.get('decl_line'))}): {rngs}" + (f" ({decl})" if alias else "")]
    if a["deleted"]:
        lines.append(f"  note: {a['decl']} was deleted by a delete recommendation before this CF read it "
                     f"({', '.join(a['deleted'][:4])})")
    for w in a["maybe_set_at"][:3]:
        lines.append(f"  Maybe it should have been initialized here: {w['expr']} {_where(w['file'], w['line'])}"
                     f" (it set {len(w['dfs'])} other element(s))")
        lines.extend(_stack_lines(w["stack"], "      "))
    return lines


def _multiple_init_lines(multi: list[dict[str, Any]]) -> list[str]:
    if not multi:
        return []
    lines = ["", "Following DFs are initialized multiple times:"]
    for m in multi:
        note = " (deleted in between, so the runtime did not notice)" if m["deleted_between"] else ""
        lines.append(f"  {m['name']}{note} in")
        for w in m["writers"]:
            lines.append(f"    {w['expr']} {_where(w['file'], w['line'])}")
    return lines


def _mismatch_lines(mismatches: list[dict[str, Any]]) -> list[str]:
    if not mismatches:
        return []
    lines = ["", "Type mismatches:"]
    for t in mismatches:
        lines.append(f"  {t['expr']} {_where(t['file'], t['line'])}: parameter {t['param']} expects {t['expected']}, "
                     f"got {t['got']} {t['value']}")
        for d in t["dfs"]:
            for w in d["set_by"]:
                lines.append(f"    DF {d['local']} (declared {d['decl']} in sub {d['decl_in']}) was set as {w['type']} "
                             f"by {w['expr']} {_where(w['file'], w['line'])}")
    return lines


def found_problems(rep: dict[str, Any]) -> bool:
    """The report names something wrong: hung CFs (or a cycle), a DF set twice, a type mismatch, a CF that raised."""
    return bool(rep["root_causes"] or rep["cycles"] or rep["multiple_init"] or rep["type_mismatches"]
                or rep["exceptions"])
