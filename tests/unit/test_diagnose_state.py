"""State files: round trip in both encodings, validation of bad files, atomic writes, stack interning, merging."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planaria.diagnose.state import (FORMAT, RankTable, intern_stacks, merge_subtrees, read_state,
                                     write_state)
from planaria.diagnose.synth import synthetic_state

KEYS = ("rank", "host", "pid", "t", "step", "op", "colls", "threads", "status")


def _norm(rec: dict[str, Any]) -> dict[str, Any]:
    """What a record reads back as: every schema key present, record-level comms hoisted away."""
    out = {k: rec.get(k) for k in KEYS}
    out["colls"] = dict(rec.get("colls") or {})
    out["threads"] = [dict(th) for th in rec.get("threads") or []]
    out.update({k: v for k, v in rec.items() if k not in KEYS and k != "comms"})
    return out


def _small_state() -> dict[str, Any]:
    st_ = synthetic_state(4, 3, faulty_host=1, scenario="spin", seed=2)
    st_["ranks"][0]["ioerrors"] = [{"path": "/scratch/x", "errno": 5}]
    st_["ranks"][1]["op"]["request"] = 17                      # unknown op key
    st_["ranks"][2]["threads"][0]["cpu"] = 3                   # unknown thread key
    st_["ranks"][3] = {"rank": st_["ranks"][3]["rank"], "op": None}   # minimal record
    return st_


@pytest.mark.parametrize("encoding", ["columns", "rows"])
def test_round_trip(tmp_path: Path, encoding: str) -> None:
    state = _small_state()
    path = tmp_path / "a.state"
    write_state(path, state, encoding=encoding)
    got = read_state(path)
    assert got["format"] == FORMAT and got["size"] == state["size"] and got["job"] == state["job"]
    assert got["hosts"] == state["hosts"] and got["comms"] == state["comms"]
    assert got["stacks"] == state["stacks"] and got["missing"] == state["missing"]
    assert got["synth"] == state["synth"] and got["collect"] == state["collect"]
    assert isinstance(got["ranks"], RankTable) and len(got["ranks"]) == len(state["ranks"])
    assert list(got["ranks"]) == [_norm(r) for r in state["ranks"]]
    assert got["ranks"][-1] == _norm(state["ranks"][-1])


def test_record_comms_hoisted(tmp_path: Path) -> None:
    recs = [{"rank": r, "op": None, "comms": {"world": [0, 1, 2], "world.s1c0": [0, 2] if r != 1 else [1]}}
            for r in range(3)]
    recs[1]["comms"] = {"world": [0, 1, 2], "world.s1c1": [1]}
    write_state(tmp_path / "c.state", {"size": 3, "ranks": recs, "stacks": []})
    got = read_state(tmp_path / "c.state")
    assert got["comms"] == {"world": [0, 1, 2], "world.s1c0": [0, 2], "world.s1c1": [1]}
    assert all("comms" not in r for r in got["ranks"])
    recs[2]["comms"] = {"world": [2, 1, 0]}
    with pytest.raises(ValueError, match="two different member lists"):
        write_state(tmp_path / "d.state", {"size": 3, "ranks": recs, "stacks": []})


def _one_line_error(path: Path) -> str:
    with pytest.raises(ValueError) as ei:
        read_state(path)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_bad_files(tmp_path: Path) -> None:
    assert "no such state file" in _one_line_error(tmp_path / "nope.state")
    (tmp_path / "empty.state").write_bytes(b"")
    assert "empty" in _one_line_error(tmp_path / "empty.state")
    (tmp_path / "list.state").write_bytes(msgpack.packb([1, 2, 3]))
    assert "not a planaria state file" in _one_line_error(tmp_path / "list.state")
    (tmp_path / "fmt.state").write_bytes(msgpack.packb({"format": "planaria-state/9", "ranks": []}))
    assert "wrong format 'planaria-state/9'" in _one_line_error(tmp_path / "fmt.state")
    (tmp_path / "text.state").write_text('{"format": "planaria-state/1"}\n')
    assert "unreadable state file" in _one_line_error(tmp_path / "text.state")
    (tmp_path / "badrank.state").write_bytes(msgpack.packb({"format": FORMAT, "ranks": [{"rank": "x"}]}))
    assert "rank must be an integer" in _one_line_error(tmp_path / "badrank.state")
    (tmp_path / "big.state").write_bytes(msgpack.packb({"format": FORMAT, "size": 2, "ranks": [{"rank": 5}]}))
    assert "not below size 2" in _one_line_error(tmp_path / "big.state")
    _one_line_error(tmp_path)   # a directory


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frac=st.floats(0.0, 0.999))
def test_truncated_file_is_rejected(tmp_path: Path, frac: float) -> None:
    path = tmp_path / "t.state"
    write_state(path, synthetic_state(3, 2, scenario="collective", seed=1))
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * frac)])
    msg = _one_line_error(path)
    assert "empty" in msg or "truncated" in msg


def test_corrupted_columns_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "c.state"
    write_state(path, synthetic_state(6, 4, scenario="p2p-chain", seed=1))
    data = path.read_bytes()
    col = msgpack.unpackb(data)["ranks"]["op_peer"]
    at = data.index(col) + len(col) // 2
    path.write_bytes(data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:])
    assert "checksum mismatch" in _one_line_error(path)
    path.write_bytes(os.urandom(4096))
    _one_line_error(path)


def test_write_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "job.state"
    write_state(path, synthetic_state(3, 2, scenario="spin", faulty_host=0))
    before = path.read_bytes()
    for bad in ({"job": object(), "ranks": []},                         # unencodable object
                {"ranks": [{"rank": 0, "step": "three"}]},              # wrong type in a record
                {"ranks": [{"rank": 0, "threads": [{"stack": 4}]}], "stacks": []},   # dangling stack index
                {"format": "planaria-state/0", "ranks": []}):
        with pytest.raises(ValueError):
            write_state(path, bad)
        assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["job.state"]
    assert read_state(path)["synth"]["scenario"] == "spin"


def test_intern_stacks_dedups_without_touching_input() -> None:
    a = [["m.py", 1, "main"], ["s.py", 9, "solve"]]
    b = [["m.py", 1, "main"], ["io.py", 3, "dump"]]
    recs = [{"rank": 0, "threads": [{"name": "MainThread", "stack": a}, {"name": "t", "stack": b}]},
            {"rank": 1, "threads": [{"name": "MainThread", "stack": [list(f) for f in a]}]},
            {"rank": 2, "op": None}]
    stacks, out = intern_stacks(recs)
    assert len(stacks) == 2
    assert [[stacks[th["stack"]] for th in r.get("threads", [])] for r in out] == [[a, b], [a], []]
    assert recs[0]["threads"][0]["stack"] is a          # input untouched


frame = st.tuples(st.sampled_from(["a.py", "b.py", "c.py"]), st.integers(1, 5), st.sampled_from(["f", "g"]))
stack_st = st.lists(frame.map(list), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(stacks=st.lists(stack_st, min_size=1, max_size=6),
       threads=st.lists(st.lists(st.integers(0, 5), max_size=3), min_size=1, max_size=20),
       cuts=st.lists(st.integers(0, 20), max_size=4), missing=st.lists(st.integers(0, 40), max_size=6))
def test_merge_subtrees_invariants(stacks: list, threads: list, cuts: list, missing: list) -> None:
    recs = [{"rank": r, "op": None, "threads": [{"name": f"t{i}", "stack": stacks[i % len(stacks)]}
                                                for i in th]} for r, th in enumerate(threads)]
    bounds = sorted({0, len(recs), *[min(c, len(recs)) for c in cuts]})
    parts = []
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
        table, part_recs = intern_stacks(recs[lo:hi])
        parts.append({"stacks": table, "ranks": part_recs, "missing": missing[k::2]})
    merged = merge_subtrees(parts)
    # ranks concatenated in order, every thread resolves to the same frames, the table has no duplicates
    assert [r["rank"] for r in merged["ranks"]] == [r["rank"] for r in recs]
    for orig, got in zip(recs, merged["ranks"], strict=True):
        assert [merged["stacks"][th["stack"]] for th in got["threads"]] == [th["stack"] for th in orig["threads"]]
    keys = [tuple(map(tuple, s)) for s in merged["stacks"]]
    assert len(keys) == len(set(keys))
    used = {th["stack"] for r in merged["ranks"] for th in r["threads"]}
    assert used == set(range(len(merged["stacks"])))
    listed = {m for p in parts for m in p["missing"]}
    assert merged["missing"] == sorted(listed - {r["rank"] for r in recs})
    # merging a merged state with nothing changes nothing
    again = merge_subtrees([merged, {"stacks": [], "ranks": [], "missing": []}])
    assert again["ranks"] == merged["ranks"] and again["stacks"] == merged["stacks"]


def test_merge_subtrees_hoists_comms_and_checks_indices() -> None:
    p1 = {"stacks": [[["a.py", 1, "f"]]], "ranks": [{"rank": 0, "threads": [{"stack": 0}],
                                                    "comms": {"world": [0, 1]}}], "missing": []}
    p2 = {"stacks": [], "ranks": [], "missing": [1], "hosts": {"h1": [1]}, "comms": {"world": [0, 1]}}
    m = merge_subtrees([p1, p2])
    assert m["comms"] == {"world": [0, 1]} and "comms" not in m["ranks"][0]
    assert m["missing"] == [1] and m["hosts"] == {"h1": [1]}
    with pytest.raises(ValueError, match="past the stack table"):
        merge_subtrees([{"stacks": [], "ranks": [{"rank": 0, "threads": [{"stack": 3}]}]}])


record_st = st.fixed_dictionaries({
    "rank": st.integers(0, 10 ** 6),
    "host": st.one_of(st.none(), st.sampled_from(["n1", "n2", "ü-host"])),
    "pid": st.one_of(st.none(), st.integers(0, 2 ** 31)),
    "t": st.one_of(st.none(), st.floats(0, 2e9)),
    "step": st.one_of(st.none(), st.integers(-5, 10 ** 9)),
    "status": st.one_of(st.none(), st.just("ok"), st.just("io-error")),
    "op": st.one_of(st.none(), st.fixed_dictionaries({
        "name": st.sampled_from(["Recv", "Allreduce", "Send", "bcast"]), "kind": st.sampled_from(["p2p", "coll"]),
        "comm": st.sampled_from(["world", "world.d1"]), "peer": st.one_of(st.none(), st.integers(0, 99)),
        "tag": st.one_of(st.none(), st.integers(-1, 99)), "size": st.integers(0, 2 ** 40),
        "seq": st.one_of(st.none(), st.integers(1, 10 ** 6)), "since": st.floats(0, 1e5),
        "site": st.sampled_from(["a.py:1 in f", "b.py:2 in g"])})),
    "colls": st.dictionaries(st.sampled_from(["world", "world.d1", "world.s1c0"]), st.integers(0, 10 ** 6)),
    "threads": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["MainThread", "x"]),
                                               "ident": st.integers(0, 2 ** 62), "stack": st.integers(0, 2)}),
                        max_size=3),
})


@settings(max_examples=60, deadline=None)
@given(recs=st.lists(record_st, max_size=12))
def test_columns_encoding_round_trips_any_records(recs: list[dict[str, Any]]) -> None:
    table = RankTable.from_records(recs, n_stacks=3)
    back = RankTable.from_wire(msgpack.unpackb(msgpack.packb(table.to_wire())), n_stacks=3)
    assert back.to_records() == [_norm(r) for r in recs]
    if recs:
        idx = np.arange(len(recs))[::-1]
        assert back.take(idx).to_records() == [_norm(r) for r in recs[::-1]]
