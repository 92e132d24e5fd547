"""The post-mortem analyzer on the paper's three listings (examples/fragments) and on cycles and chains."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import planaria.fragments as fr
from planaria.trace.analyze import analyze_dir, index_ranges

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "fragments"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"fragments_example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _line_of(path: Path, text: str) -> int:
    """The line whose code (stripped, not a docstring mention) starts with ``text``."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.strip().startswith(text))


def test_listing1_uninitialized_vector_elements(tmp_path):
    mod = _example("uninit_vector")
    src = EXAMPLES / "uninit_vector.py"
    res = fr.run(mod.main, comm=None, trace_dir=str(tmp_path), report=False)
    assert res.status == "hung" and res.unfinished == 2
    rep = analyze_dir(tmp_path)
    assert rep["status"] == "hung" and len(rep["root_causes"]) == 1
    rc = rep["root_causes"][0]
    assert rc["instances"] == 2 and rc["expr"] == "set_(result[i], v1[i] + v2[i])"
    assert rc["file"] == str(src) and rc["line"] == _line_of(src, "set_(result[i], v1[i] + v2[i])")
    assert [f["expr"] for f in rc["stack"]][1] == "vec_sum(x, y, size, s)"
    # the loop around the spawn is read back from the source, as luna_trace prints "in for i = 0..size-1"
    assert rc["loops"] == [{"loop": "for i in range(size)", "line": rc["line"] - 1}]
    assert f"in for i in range(size) [{os.path.relpath(src)}:{rc['line'] - 1}]" in rep["text"]
    (aw,) = rc["awaited"]
    assert (aw["local"], aw["decl"], aw["decl_in"]) == ("v2", "y", "main")
    assert [(r["local"], r["decl"]) for r in aw["ranges"]] == [("v2[8..9]", "y[8..9]")]
    (site,) = aw["maybe_set_at"]
    assert site["expr"] == "set_(vec[i], val)" and len(site["dfs"]) == 8
    assert site["stack"][1]["expr"] == "vec_init(y, size - 2, 2)"    # the call holding the bug
    text = rep["text"]
    assert "never finished (2 instances)" in text and "v2[8..9] (y[8..9])" in text
    assert f"uninit_vector.py:{_line_of(src, 'vec_init(y, size - 2, 2)')}" in text


def test_listing2_reinitialization_of_a_deleted_df(tmp_path):
    mod = _example("reinit_deleted")
    src = EXAMPLES / "reinit_deleted.py"
    res = fr.run(mod.main, comm=None, trace_dir=str(tmp_path), report=False)
    assert res.status == "finished"            # the runtime does not notice: x was deleted in between
    rep = analyze_dir(tmp_path)
    (m,) = rep["multiple_init"]
    assert m["name"] == "x" and m["deleted_between"]
    assert [(w["expr"], w["line"]) for w in m["writers"]] == [
        ("set_(x, 0)", _line_of(src, "set_(x, 0)")), ("wait_and_set(x, 1, 0.3)", _line_of(src, "wait_and_set(x, 1, 0.3)"))]
    assert "Following DFs are initialized multiple times" in rep["text"]


def test_listing3_real_used_as_int(tmp_path):
    mod = _example("real_as_int")
    src = EXAMPLES / "real_as_int.py"
    res = fr.run(mod.main, comm=None, trace_dir=str(tmp_path), report=False)
    assert res.status == "failed" and res.errors == 1
    (t,) = analyze_dir(tmp_path)["type_mismatches"]
    assert (t["expr"], t["param"], t["expected"], t["got"]) == ("print_int(x)", "v", "int", "float")
    assert t["line"] == _line_of(src, "print_int(x)")
    (d,) = t["dfs"]
    assert d["decl"] == "x" and d["set_by"][0]["expr"] == "set_real(x, 3.14)" and d["set_by"][0]["type"] == "float"


@fr.atomic
def copy(dst: fr.Name, src: int):
    dst.set(src)


@fr.atomic
def put(x: fr.Name, v: int):
    x.set(v)


@fr.sub
def cycle_main():
    a, b = fr.dfs("a b")
    copy(a, b)
    copy(b, a)


@fr.sub
def chain_main():
    a, b, c, d = fr.dfs("a b c d")
    copy(b, a)           # root cause: a is never set
    copy(c, b)           # waits on the root cause
    copy(d, c)
    put(fr.df("ok"), 1)


@fr.sub
def twice_main():
    x = fr.df("x")
    put(x, 1)
    put(x, 2)


def test_cycle_is_reported_when_no_root_cause(tmp_path):
    res = fr.run(cycle_main, comm=None, trace_dir=str(tmp_path), report=False)
    assert res.status == "hung"
    rep = analyze_dir(tmp_path)
    assert rep["root_causes"] == [] and rep["cycle_without_root"]
    assert [sorted(c["expr"] for c in comp) for comp in rep["cycles"]] == [["copy(a, b)", "copy(b, a)"]]
    assert "Dependency cycle" in rep["text"]


def test_root_causes_by_default_all_with_flag(tmp_path):
    fr.run(chain_main, comm=None, trace_dir=str(tmp_path), report=False)
    rep = analyze_dir(tmp_path)
    assert [r["expr"] for r in rep["root_causes"]] == ["copy(b, a)"] and rep["all_hung"] is None
    full = analyze_dir(tmp_path, all_hung=True)
    assert sorted(h["expr"] for h in full["all_hung"]) == ["copy(b, a)", "copy(c, b)", "copy(d, c)"]
    # the CLI prints the same, as text and as JSON, and fails with 2 on a directory without traces
    cli = [sys.executable, "-m", "planaria.cli.main", "trace", "analyze", str(tmp_path)]
    out = subprocess.run(cli + ["--all", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr                 # it found hung CFs
    assert len(json.loads(out.stdout)["all_hung"]) == 3
    bad = subprocess.run(cli[:-1] + [str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "nope" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_second_assignment_is_caught_by_the_runtime_and_the_analyzer(tmp_path):
    with pytest.raises(fr.ProgramError) as err:
        fr.run(twice_main, comm=None, trace_dir=str(tmp_path), report=False)
    here = Path(__file__).resolve()
    first, second = _line_of(here, "put(x, 1)"), _line_of(here, "put(x, 2)")
    assert str(err.value) == f"DF x assigned twice: by put(x, 1) at {here}:{first}, then by put(x, 2) at {here}:{second}"
    assert err.value.exit_status == 1
    rep = analyze_dir(tmp_path)
    (m,) = rep["multiple_init"]
    assert not m["deleted_between"] and [w["expr"] for w in m["writers"]] == ["put(x, 1)", "put(x, 2)"]


def test_perfetto_export_has_cfs_and_flows(tmp_path):
    mod = _example("uninit_vector")
    fr.run(mod.main, comm=None, trace_dir=str(tmp_path), report=False)
    out = tmp_path / "t.json"
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "trace", "export", str(tmp_path), "--out", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    ev = json.loads(out.read_text())["traceEvents"]
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == 31 and all(e["dur"] > 0 for e in xs)
    starts = {e["id"] for e in ev if e["ph"] == "s"}
    assert starts and starts == {e["id"] for e in ev if e["ph"] == "f"}
    assert sum(1 for e in ev if e["ph"] == "i" and e["name"].startswith("unfinished")) == 2
    for bad, why in ((tmp_path, "is a directory"), (tmp_path / "no-dir" / "t.json", "does not exist")):
        res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "trace", "export", str(tmp_path),
                              "--out", str(bad)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and why in res.stderr, res.stderr


@given(st.sets(st.integers(-50, 50), min_size=1, max_size=40))
def test_index_ranges_cover_exactly(ix):
    rngs = index_ranges([[i] for i in ix])
    covered = [i for lo, hi in rngs for i in range(lo[0], hi[0] + 1)]
    assert sorted(covered) == sorted(ix)                 # nothing lost, nothing invented
    assert all(b[0][0] > a[1][0] + 1 for a, b in zip(rngs, rngs[1:], strict=False))   # maximal runs


def _box_points(lo: list[int], hi: list[int]) -> set[tuple[int, ...]]:
    import itertools
    return set(itertools.product(*(range(a, b + 1) for a, b in zip(lo, hi, strict=True))))


@given(st.integers(1, 3).flatmap(lambda d: st.sets(st.tuples(*[st.integers(0, 4)] * d), min_size=1, max_size=60)))
def test_index_boxes_cover_exactly_and_merge_across_dimensions(ix):
    boxes = index_ranges([list(t) for t in ix])
    pts = [_box_points(lo, hi) for lo, hi in boxes]
    assert set().union(*pts) == ix                        # every index listed is covered, nothing else
    assert sum(len(p) for p in pts) == len(ix)            # each one once
    # never more boxes than runs along the last dimension alone
    assert len(boxes) <= sum(1 for t in ix if t[:-1] + (t[-1] - 1,) not in ix)


@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3)), min_size=1, max_size=3), st.data())
def test_a_full_box_of_any_shape_is_one_range_and_a_hole_splits_it_in_few(dims, data):
    lo, hi = [a for a, _ in dims], [a + n for a, n in dims]
    full = _box_points(lo, hi)
    assert index_ranges([list(t) for t in full]) == [(lo, hi)]
    hole = data.draw(st.sampled_from(sorted(full)))
    boxes = index_ranges([list(t) for t in full - {hole}])
    assert set().union(set(), *(_box_points(a, b) for a, b in boxes)) == full - {hole}
    assert len(boxes) <= 2 * len(dims)                   # a box less one point: at most two per dimension


def test_a_full_box_is_one_range() -> None:
    from planaria.trace.analyze import _fmt_range
    import itertools
    full = [list(t) for t in itertools.product(range(4), repeat=3)]
    assert [_fmt_range("p", lo, hi) for lo, hi in index_ranges(full)] == ["p[0..3][0..3][0..3]"]
    less = [ix for ix in full if ix != [3, 3, 3]]
    assert [_fmt_range("p", lo, hi) for lo, hi in index_ranges(less)] == [
        "p[0..2][0..3][0..3]", "p[3][0..2][0..3]", "p[3][3][0..2]"]
    assert [_fmt_range("x", lo, hi) for lo, hi in index_ranges([[8], [9], [11], ["k"]])] == ["x[8..9]", "x[11]", "x[k]"]


@fr.atomic
def show(v: int):
    pass


@fr.sub
def late_reader_main():
    x = fr.df("x")
    put(x, 1)
    show(x).delete(x)
    copy(fr.df("y"), x).at(0)        # may run after the delete: then it waits forever


def test_a_read_after_delete_is_named(tmp_path):
    # one thread: show(x) runs first and deletes x, so copy(y, x), ready by then, finds x gone and waits
    res = fr.run(late_reader_main, comm=None, trace_dir=str(tmp_path), threads=1, report=False)
    assert res.status == "hung" and res.unfinished == 1
    rep = analyze_dir(tmp_path)
    (rc,) = rep["root_causes"]
    assert rc["expr"] == 'copy(fr.df("y"), x)' and rc["awaited"][0]["deleted"]
    assert "was deleted by a delete recommendation" in rep["text"]


@fr.atomic
def total(out: fr.Name, xs: list):
    out.set(sum(xs))


@fr.sub
def cube_main():
    p, s = fr.dfs("p s")
    put(p[4][0][0], 1)                       # another element: the analyzer points at its writer
    total(s, [p[i][j][k] for i in range(4) for j in range(4) for k in range(4)])


def test_awaited_elements_of_a_3d_df_print_as_one_box(tmp_path):
    res = fr.run(cube_main, comm=None, trace_dir=str(tmp_path), report=False)
    assert res.status == "hung" and res.unfinished == 1
    rep = analyze_dir(tmp_path)
    (rc,) = rep["root_causes"]
    (aw,) = rc["awaited"]
    assert [(r["decl"], r["from"], r["to"]) for r in aw["ranges"]] == [("p[0..3][0..3][0..3]", [0, 0, 0], [3, 3, 3])]
    assert "p[0..3][0..3][0..3]" in rep["text"]


@fr.atomic
def node(out: fr.Name, deps: list):
    out.set(1 + sum(deps))


@fr.sub
def dag_main(deps: list, dropped: list):
    v = fr.df("v")
    for i, ds in enumerate(deps):
        if i not in dropped:
            node(v[i], [v[j] for j in ds])


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_random_dags_hang_exactly_below_missing_writers(data, tmp_path_factory):
    n = data.draw(st.integers(1, 14))
    deps = [sorted(data.draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)]
    dropped = sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=2)))
    hung: set[int] = set()
    for i in range(n):                       # deps point backwards: one pass settles it
        if i not in dropped and any(j in dropped or j in hung for j in deps[i]):
            hung.add(i)
    roots = {i for i in hung if not any(j in hung for j in deps[i])}
    d = tmp_path_factory.mktemp("dag")
    res = fr.run(dag_main, deps, dropped, comm=None, trace_dir=str(d), threads=2, report=False)
    assert res.status == ("hung" if hung else "finished")
    assert res.unfinished == len(hung) and res.cfs_done == 1 + n - len(dropped) - len(hung)
    rep = analyze_dir(d)
    assert rep["hung"] == len(hung)
    got_roots = {int(x["ranges"][0]["from"][0]) for rc in rep["root_causes"] for x in rc["awaited"]}
    assert got_roots <= set(dropped)         # root causes await only DFs nobody was going to set
    assert sum(rc["instances"] for rc in rep["root_causes"]) == len(roots)
    assert rep["cycles"] == []
