"""Offline diagnosis: synthetic hung jobs and hand-written small states name the right ranks, reasons and sites."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import diagnose as bench_diagnose
from planaria.diagnose.offline import Report, diagnose, ranges
from planaria.diagnose.state import read_state, write_state
from benchmarks.synth import synthetic_state

SRC = Path(__file__).resolve().parents[2] / "src"


# --------------------------------------------------------------------------- helpers
def coll(name: str, seq: int, site: str, comm: str = "world", root: int | None = None) -> dict[str, Any]:
    return {"name": name, "kind": "coll", "comm": comm, "peer": root, "tag": None, "size": 8, "seq": seq,
            "since": 30.0, "site": site}


def p2p(name: str, peer: int | None, site: str, tag: int | None = None, comm: str = "world") -> dict[str, Any]:
    return {"name": name, "kind": "p2p", "comm": comm, "peer": peer, "tag": tag, "size": 64, "seq": None,
            "since": 30.0, "site": site}


def rec(r: int, op: dict[str, Any] | None = None, colls: dict[str, int] | None = None, stack: int | None = None,
        **kw: Any) -> dict[str, Any]:
    out = {"rank": r, "host": kw.pop("host", f"h{r // 2}"), "pid": 100 + r, "t": 1.0, "step": kw.pop("step", 10),
           "op": op, "colls": colls if colls is not None else {"world": 1}, "threads": []}
    if stack is not None:
        out["threads"] = [{"name": "MainThread", "ident": 1, "stack": stack}]
    out.update(kw)
    return out


def mk(size: int, recs: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {"format": "planaria-state/1", "job": "t", "size": size, "stacks": kw.pop("stacks", []), "ranks": recs,
            "missing": kw.pop("missing", []), **kw}


@pytest.fixture(params=["memory", "file"])
def run(request: Any, tmp_path: Path) -> Callable[[dict[str, Any]], Report]:
    """Diagnose in memory (row records) or through a state file (columns): the answers must not differ."""
    def go(state: dict[str, Any]) -> Report:
        if request.param == "memory":
            return diagnose(state)
        path = tmp_path / "s.state"
        write_state(path, state)
        return diagnose(read_state(path))
    return go


def kinds(rep: Report) -> list[tuple[str, str]]:
    return [(rc.kind, ranges(rc.ranks)) for rc in rep.root_causes]


# --------------------------------------------------------------------------- synthetic scenarios
@pytest.mark.parametrize("scenario", ["collective", "p2p-chain", "deadlock", "spin"])
@pytest.mark.parametrize("hosts,seed", [(5, 0), (12, 3), (40, 7)])
def test_synthetic_scenarios(run: Callable, scenario: str, hosts: int, seed: int) -> None:
    state = synthetic_state(hosts, 6, scenario=scenario, seed=seed)
    truth = state["synth"]
    rep = run(state)
    top = rep.root_causes[0]
    assert sorted(top.ranks) == truth["root_ranks"]
    assert top.host == truth["faulty_host"]
    assert top.site == truth["root_site"]
    expect = {"collective": ("dead-ranks", "no-state"), "p2p-chain": ("dead-ranks", "no-state"),
              "deadlock": ("deadlock", "deadlock"), "spin": ("hang", "computing")}[scenario]
    assert (rep.verdict, top.kind) == expect
    assert len(rep.root_causes) == 1
    assert top.waiters == hosts * 6 - (6 if scenario in ("collective", "p2p-chain") else 0) - (
        1 if scenario == "spin" else 0)
    assert rep.missing == (truth["root_ranks"] if scenario in ("collective", "p2p-chain") else [])
    if scenario in ("collective", "p2p-chain"):
        assert f"host {truth['faulty_host']}: all 6 ranks missing -> node down or unreachable" in rep.evidence
    text = rep.to_text()
    assert f"verdict: {rep.verdict}" in text and ranges(truth["root_ranks"]) in text
    assert json.loads(json.dumps(rep.to_dict()))["root_causes"][0]["ranks"] == ranges(truth["root_ranks"])


def test_synthetic_stuck_collective_and_no_hang(run: Callable) -> None:
    rep = run(synthetic_state(6, 4, faulty_host=None, scenario="collective"))
    assert rep.verdict == "hang" and kinds(rep) == [("stuck-collective", "0-23")]
    assert "all 24 members of world entered Allreduce #4321" in rep.root_causes[0].reason
    rep = run(synthetic_state(6, 4, scenario="no-hang"))
    assert rep.verdict == "no-hang" and rep.root_causes == [] and rep.computing == 24
    assert "no hang found" in rep.to_text()


def test_synthetic_in_memory_equals_file(tmp_path: Path) -> None:
    state = synthetic_state(9, 6, scenario="p2p-chain", seed=5)
    write_state(tmp_path / "x.state", state)
    a, b = diagnose(state).to_dict(), diagnose(read_state(tmp_path / "x.state")).to_dict()
    a.pop("analysis_seconds"), b.pop("analysis_seconds")
    assert a == b


# --------------------------------------------------------------------------- hand-written states
def test_dead_rank_in_collective(run: Callable) -> None:
    recs = [rec(r, coll("Barrier", 2, "app/step.py:40 in sync"), {"world": 2}) for r in (0, 1, 3)]
    rep = run(mk(4, recs))
    assert rep.verdict == "dead-ranks" and rep.missing == [2]
    assert kinds(rep) == [("no-state", "2")]
    assert rep.root_causes[0].waiters == 3
    (w,) = rep.waiting
    assert (w["comm"], w["op"], w["seq"], w["waiting"], w["members"]) == ("world", "Barrier", 2, 3, 4)
    assert w["not_arrived_by_state"] == {"no state": "2"}
    assert "3 ranks are stuck in Barrier #2 on world at step.py:40 in sync; rank 2 has not arrived: it has no " \
           "state (dead or unreachable)" in rep.to_text()


def test_recv_from_dead_rank_reads_plainly(run: Callable) -> None:
    recs = [rec(r) for r in range(40) if r not in (12, 37)]
    recs.append(rec(37, p2p("Recv", 12, "app/solver.py:88 in solve")))
    rep = run(mk(40, recs, missing=[12]))
    assert kinds(rep) == [("no-state", "12")]
    assert ("rank 37 is stuck in Recv from rank 12 at solver.py:88 in solve; rank 12 has no state "
            "(dead or unreachable)") in rep.to_text()


def test_unmatched_receive(run: Callable) -> None:
    # rank 0 waits for a message rank 1 never sends: rank 1 went on into the Allreduce
    recs = [rec(0, p2p("Recv", 1, "app/x.py:5 in get", tag=5), {"world": 2})]
    recs += [rec(r, coll("Allreduce", 3, "app/x.py:9 in norm"), {"world": 3}) for r in (1, 2, 3)]
    rep = run(mk(4, recs))
    assert rep.verdict == "deadlock" and kinds(rep) == [("deadlock", "0-1")]
    assert rep.n_unmatched == 1 and (rep.unmatched[0]["rank"], rep.unmatched[0]["peer"], rep.unmatched[0]["tag"]) \
        == (0, 1, 5)
    assert any(e.startswith("unmatched receive: rank 0 waits in Recv from rank 1, tag 5 at x.py:5 in get; rank 1 is "
                            "not sending to it: it waits in Allreduce #3 on world") for e in rep.evidence)
    assert rep.waiting[0]["not_arrived_by_state"] == {"in Recv (point-to-point)": "0"}


@pytest.mark.parametrize("cycle", [[0, 1], [2, 0, 1], [5, 3, 4]])
def test_recv_cycles_are_deadlocks(run: Callable, cycle: list[int]) -> None:
    n = 6
    recs = {r: rec(r, coll("Barrier", 1, "app/b.py:3 in fence"), {"world": 1}) for r in range(n)}
    for i, r in enumerate(cycle):
        nxt = cycle[(i + 1) % len(cycle)]
        recs[r] = rec(r, p2p("Recv", nxt, f"app/halo.py:{10 + r} in swap", tag=1), {"world": 0})
    outside = next(r for r in range(n) if r not in cycle)
    recs[outside] = rec(outside, p2p("Recv", cycle[0], "app/halo.py:50 in pull"), {"world": 0})
    rep = run(mk(n, list(recs.values())))
    assert rep.verdict == "deadlock"
    assert kinds(rep) == [("deadlock", ranges(cycle))]
    rc = rep.root_causes[0]
    assert rc.waiters == n
    for r in cycle:
        assert f"rank {r} waits in Recv from rank {cycle[(cycle.index(r) + 1) % len(cycle)]} (tag 1) at " \
               f"halo.py:{10 + r} in swap" in rc.details
    k = cycle.index(min(cycle))
    ring = cycle[k:] + cycle[:k]
    assert "wait cycle " + " -> ".join(map(str, ring + ring[:1])) in rc.reason


def test_spinning_rank(run: Callable) -> None:
    stacks = [[["app/main.py", 3, "main"], ["app/model.py", 70, "step"], ["app/model.py", 77, "relax"]]]
    recs = [rec(0, p2p("Recv", 2, "app/halo.py:9 in left")), rec(1, coll("Allreduce", 4, "app/m.py:1 in dot"),
                                                                    {"world": 4}),
            rec(2, None, {"world": 3}, stack=0, step=9), rec(3, p2p("Recv", 0, "app/halo.py:9 in left"))]
    rep = run(mk(4, recs, stacks=stacks))
    assert rep.verdict == "hang" and kinds(rep) == [("computing", "2")]
    rc = rep.root_causes[0]
    assert rc.site == "app/model.py:77 in relax" and rc.host == "h1" and rc.waiters == 3
    assert "last step 9, most ranks at step 10" in rc.reason
    assert rc.example.startswith("rank 0 is stuck in Recv from rank 2 at halo.py:9 in left; rank 2 is not in MPI")


def test_a_planned_hang_is_named_as_injected(run: Callable) -> None:
    """The controller's records say rank 2's hang was planned (``--inject hang:...``): that is the
    root cause, not the program line where it happened to stop."""
    stacks = [[["app/main.py", 3, "main"], ["threading.py", 331, "wait"]]]
    recs = [rec(0, p2p("Recv", 2, "app/halo.py:9 in left")), rec(1, coll("Allreduce", 4, "app/m.py:1 in dot"),
                                                                    {"world": 4}),
            rec(2, None, {"world": 3}, stack=0, step=9), rec(3, p2p("Recv", 0, "app/halo.py:9 in left"))]
    known = {"injected": [{"rank": 2, "kind": "hang", "detail": "injected hang at iteration 9", "t": 1.0},
                          {"rank": 3, "kind": "bitflip", "detail": "flipped a bit", "t": 1.0}]}
    rep = run(mk(4, recs, stacks=stacks, known=known))
    assert kinds(rep) == [("injected", "2")]
    assert "injected hang at iteration 9" in rep.root_causes[0].reason
    plain = run(mk(4, recs, stacks=stacks))               # the same state without the record
    assert kinds(plain) == [("blocked-outside-mpi", "2")]


def test_blocked_outside_mpi(run: Callable) -> None:
    stacks = [[["app/main.py", 3, "main"], ["app/io.py", 20, "load"], ["socket.py", 700, "recv_into"]]]
    recs = [rec(0, None, stack=0), rec(1, p2p("Recv", 0, "app/a.py:1 in f"))]
    rep = run(mk(2, recs, stacks=stacks))
    assert kinds(rep) == [("blocked-outside-mpi", "0")]
    assert "blocked outside MPI in recv_into()" in rep.root_causes[0].reason


def test_cross_communicator_dependency(run: Callable) -> None:
    site_b = "app/io.py:30 in gather_io"
    recs = [rec(0, coll("Allreduce", 5, "app/s.py:8 in norm"), {"world": 5, "world.s1c0": 0}),
            rec(1, coll("Allreduce", 5, "app/s.py:8 in norm"), {"world": 5, "world.s1c0": 0}),
            rec(2, coll("Barrier", 1, site_b, comm="world.s1c1"), {"world": 4, "world.s1c1": 1}),
            rec(3, coll("Barrier", 1, site_b, comm="world.s1c1"), {"world": 4, "world.s1c1": 1}),
            rec(4, None, {"world": 4, "world.s1c1": 0}, stack=0)]
    stacks = [[["app/main.py", 1, "main"], ["app/io.py", 25, "write_chunk"]]]
    comms = {"world": None, "world.s1c0": [0, 1], "world.s1c1": [2, 3, 4]}
    rep = run(mk(5, recs, stacks=stacks, comms=comms))
    assert rep.verdict == "hang" and kinds(rep) == [("computing", "4")]
    assert rep.root_causes[0].waiters == 4 and rep.root_causes[0].site == "app/io.py:25 in write_chunk"
    world = next(w for w in rep.waiting if w["comm"] == "world")
    assert world["not_arrived_by_state"] == {"computing": "4", "in Barrier #1 on world.s1c1": "2-3"}
    assert ("cross-communicator dependency: Allreduce #5 on world lacks ranks 2-3, which wait in Barrier #1 on "
            "world.s1c1") in rep.evidence


def test_no_hang(run: Callable) -> None:
    rep = run(mk(3, [rec(r) for r in range(3)]))
    assert rep.verdict == "no-hang" and rep.root_causes == [] and rep.waiting == []
    assert "verdict: no-hang (no hang found" in rep.to_text()


def test_a_job_whose_launcher_started_no_rank_is_not_started(run: Callable) -> None:
    """No rank ever registered (a launch that failed inside the MPI runtime): the verdict says so
    instead of reporting a job that is not hung."""
    rep = run(mk(0, []))
    assert rep.verdict == "not-started" and rep.root_causes == [] and rep.size == 0
    assert rep.to_text().splitlines()[1] == "verdict: not-started (no rank has started: the MPI launcher started none)"
    assert any("output.log" in e for e in rep.evidence)


def test_missing_ranks_grouped_by_host(run: Callable) -> None:
    hosts = {"h0": [0, 1, 2], "h1": [3, 4, 5], "h7": [6, 7, 8]}
    recs = [rec(r, coll("Bcast", 7, "app/c.py:2 in share", root=0), {"world": 7}, host=h)
            for h, rs in hosts.items() for r in rs if r not in (4, 6, 7, 8)]
    rep = run(mk(9, recs, hosts=hosts, missing=[6, 7, 8]))
    assert rep.verdict == "dead-ranks" and rep.missing == [4, 6, 7, 8]
    assert sorted(kinds(rep)) == [("no-state", "4"), ("no-state", "6-8")]
    by = {ranges(rc.ranks): rc for rc in rep.root_causes}
    assert by["6-8"].host == "h7" and "host h7: all 3 ranks missing -> node down or unreachable" in by["6-8"].reason
    assert by["4"].host == "h1" and "1 of 3 ranks of host h1 missing; the node answers" in by["4"].reason
    assert "rank 4 neither answered nor was reported missing by the collection" in rep.evidence


def test_matched_send_and_recv_stuck_and_tag_mismatch(run: Callable) -> None:
    recs = [rec(0, p2p("Recv", 1, "app/p.py:1 in a", tag=4), host="n0"),
            rec(1, p2p("Send", 0, "app/p.py:2 in b", tag=4), host="n1")]
    rep = run(mk(2, recs))
    assert kinds(rep) == [("stuck-transfer", "0-1")] and rep.verdict == "hang"
    assert "suspect the network or transport between n0 and n1" in rep.root_causes[0].reason
    recs[1] = rec(1, p2p("Send", 0, "app/p.py:2 in b", tag=5))
    rep = run(mk(2, recs))
    assert kinds(rep) == [("deadlock", "0-1")]
    assert "tag mismatch: rank 1 sends tag 5 to rank 0, which waits for tag 4" in rep.root_causes[0].reason


def test_any_source_and_collective_mismatch(run: Callable) -> None:
    recs = [rec(0, p2p("Recv", None, "app/master.py:12 in collect"), {"world": 1})]
    recs += [rec(r, coll("Barrier", 2, "app/w.py:4 in done"), {"world": 2}) for r in (1, 2)]
    rep = run(mk(3, recs))
    assert kinds(rep) == [("any-source", "0")] and rep.root_causes[0].site == "app/master.py:12 in collect"
    recs = [rec(r, coll("Allreduce", 3, "app/a.py:1 in f"), {"world": 3}) for r in (0, 1)]
    recs += [rec(r, coll("Bcast", 3, "app/b.py:2 in g", root=0), {"world": 3}) for r in (2, 3)]
    rep = run(mk(4, recs))
    assert kinds(rep) == [("collective-mismatch", "0-3")]
    assert "ranks 0-1 in Allreduce at a.py:1 in f, ranks 2-3 in Bcast at b.py:2 in g" in rep.root_causes[0].reason


def test_waiter_outside_the_member_list(run: Callable) -> None:
    recs = [rec(r, coll("Barrier", 1, "app/a.py:1 in f", comm="world.s1c0"), {"world.s1c0": 1}) for r in (0, 1, 2)]
    rep = run(mk(4, recs, comms={"world.s1c0": [0, 1]}))
    assert "rank 2 waits in a collective on world.s1c0 but is not listed as a member" in rep.evidence
    assert kinds(rep) == [("stuck-collective", "0-2"), ("no-state", "3")]


def test_duplicate_answers_keep_newest(run: Callable) -> None:
    old = rec(1, p2p("Recv", 0, "app/a.py:1 in f"))
    new = dict(rec(1), t=2.0)
    rep = run(mk(2, [rec(0), new, old]))
    assert rep.verdict == "no-hang"
    assert "rank 1 answered more than once; kept the newest state" in rep.evidence


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_count_check_reports_exactly_the_missing_ranks(data: Any) -> None:
    per = data.draw(st.integers(1, 4))
    nhosts = data.draw(st.integers(1, 8))
    size = per * nhosts
    missing = set(data.draw(st.lists(st.integers(0, size - 1), unique=True, max_size=size)))
    listed = sorted(m for m in missing if data.draw(st.booleans()))
    hosts = {f"n{h}": list(range(h * per, (h + 1) * per)) for h in range(nhosts)}
    recs = [rec(r, coll("Allreduce", 9, "app/x.py:1 in f"), {"world": 9}, host=f"n{r // per}")
            for r in range(size) if r not in missing]
    rep = diagnose(mk(size, recs, missing=listed, hosts=hosts))
    assert rep.missing == sorted(missing)
    assert sorted(r for rc in rep.root_causes if rc.kind == "no-state" for r in rc.ranks) == sorted(missing)
    down = {f"n{h}" for h in range(nhosts) if set(hosts[f"n{h}"]) <= missing}
    assert {e.split(":")[0][5:] for e in rep.evidence if e.endswith("node down or unreachable")} == down
    if missing and len(missing) < size:
        assert rep.verdict == "dead-ranks" and rep.waiting[0]["not_arrived"] == ranges(sorted(missing))
    elif not missing:
        assert kinds(rep) == [("stuck-collective", ranges(range(size)))]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_p2p_graphs_match_a_brute_force_walk(data: Any) -> None:
    n = data.draw(st.integers(1, 24))
    succ = [data.draw(st.one_of(st.none(), st.integers(0, n - 1))) for _ in range(n)]   # None: computing
    recs = [rec(r, None if p is None else p2p("Recv", p, f"app/r.py:{r} in f")) for r, p in enumerate(succ)]
    rep = diagnose(mk(n, recs))
    cycles, sinks = set(), set()
    for r in range(n):
        seen, x = [], r
        while succ[x] is not None and x not in seen:
            seen.append(x)
            x = succ[x]
        if succ[x] is None:
            if x != r:
                sinks.add(x)
        else:
            cyc = seen[seen.index(x):]
            cycles.add(frozenset(cyc))
    self_loops = {c for c in cycles if len(c) == 1}
    got_cycles = {frozenset(rc.ranks) for rc in rep.root_causes if rc.kind in ("deadlock", "stuck-transfer")}
    got_self = {frozenset(rc.ranks) for rc in rep.root_causes if rc.kind == "self-wait"}
    assert got_cycles == cycles - self_loops
    assert {frozenset([r]) for c in self_loops for r in c} == {frozenset([r]) for s in got_self for r in s}
    assert {r for rc in rep.root_causes if rc.kind == "computing" for r in rc.ranks} == sinks
    assert rep.verdict == ("deadlock" if cycles - self_loops else "hang" if any(p is not None for p in succ)
                           else "no-hang")


# --------------------------------------------------------------------------- CLI
def _cli(*args: str, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    if home is not None:
        env["PLANARIA_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "planaria.cli.main", "diagnose", *args], capture_output=True,
                          text=True, env=env, timeout=60)


def test_cli_offline(tmp_path: Path) -> None:
    path = tmp_path / "job.state"
    state = synthetic_state(20, 6, scenario="collective", seed=4)
    write_state(path, state)
    truth = state["synth"]
    res = _cli("--offline", str(path))
    assert res.returncode == 0, res.stderr
    assert "verdict: dead-ranks" in res.stdout and f"ranks {ranges(truth['root_ranks'])} on {truth['faulty_host']}" \
        in res.stdout
    res = _cli("--offline", str(path), "--json")
    assert res.returncode == 0
    out = json.loads(res.stdout)
    assert out["verdict"] == "dead-ranks" and out["root_causes"][0]["rank_list"] == truth["root_ranks"]


def test_cli_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.state"
    write_state(bad, synthetic_state(3, 2))
    bad.write_bytes(bad.read_bytes()[:-7])
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, text in ((["--offline", str(bad)], "truncated"),
                       (["--offline", str(tmp_path / "none.state")], "no such state file"),
                       (["job-17"], "no job 'job-17'"),
                       ([], "no job under"),
                       ([str(empty)], f"{empty} is not a job directory (it has no manifest.json, events.jsonl"),
                       (["--bogus"], "no such option: --bogus"),
                       (["--fanout", "1"], "invalid value for '--fanout'"),
                       (["--hop-timeout", "inf"], "--hop-timeout must be a finite number of seconds (got inf)"),
                       (["--interval", "inf"], "--interval must be a finite number of seconds (got inf)"),
                       (["job-17", "--offline", str(bad)], "not both"),
                       (["--offline", str(bad), "--dot", str(tmp_path / "no-dir" / "t.dot")], "does not exist"),
                       (["--offline", str(bad), "--dot", str(tmp_path)], "is a directory")):
        res = _cli(*args, home=tmp_path / "home")
        assert res.returncode == 2 and res.stdout == ""
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("planaria diagnose: ") and text in res.stderr
    (tmp_path / "home2" / "jobs" / "20260101-000000-0000").mkdir(parents=True)    # the latest job is empty
    res = _cli(home=tmp_path / "home2")
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1
    assert "20260101-000000-0000 is not a job directory" in res.stderr


# --------------------------------------------------------------------------- benchmark driver
def test_bench_driver_small() -> None:
    out = bench_diagnose.run([3, 9], per_host=4, repeat=1, scenario="p2p-chain")
    assert [r["processes"] for r in out["rows"]] == [12, 36]
    assert all(r["correct"] and r["total_s_median"] > 0 for r in out["rows"])
    assert out["goal"]["processes"] == 36


def test_bench_check_rejects_a_wrong_answer() -> None:
    truth = synthetic_state(5, 6, faulty_host=1, scenario="collective")["synth"]
    assert bench_diagnose.answer_error(diagnose(synthetic_state(5, 6, faulty_host=1, scenario="collective")), truth) is None
    for wrong in (synthetic_state(5, 6, faulty_host=2, scenario="collective"),
                  synthetic_state(5, 6, faulty_host=1, scenario="deadlock"),
                  synthetic_state(5, 6, scenario="no-hang")):
        assert bench_diagnose.answer_error(diagnose(wrong), truth) is not None


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_any_valid_state_gives_a_report(data: Any) -> None:
    size = data.draw(st.integers(1, 12))
    ranks = data.draw(st.lists(st.integers(0, size - 1), unique=True))
    comm = st.sampled_from(["world", "world.d1", "world.s1c0"])
    op = st.one_of(
        st.none(),
        st.builds(p2p, st.sampled_from(["Recv", "Send", "Sendrecv", "Wait", "Probe"]),
                  st.one_of(st.none(), st.integers(-2, size + 1)), st.just("app/a.py:1 in f"),
                  st.one_of(st.none(), st.integers(-1, 3)), comm),
        st.builds(coll, st.sampled_from(["Barrier", "Allreduce", "Bcast"]), st.integers(1, 3),
                  st.sampled_from(["app/b.py:2 in g", "app/c.py:3 in h"]), comm,
                  st.one_of(st.none(), st.integers(0, size - 1))))
    recs = [rec(r, data.draw(op), data.draw(st.dictionaries(comm, st.integers(0, 3))),
                status=data.draw(st.sampled_from([None, "ok", "finished"]))) for r in ranks]
    comms = data.draw(st.fixed_dictionaries({}, optional={
        "world.s1c0": st.lists(st.integers(0, size - 1), unique=True), "world.d1": st.none()}))
    missing = data.draw(st.lists(st.integers(0, size - 1), unique=True, max_size=3))
    hosts = {"a": list(range(0, size, 2)), "b": list(range(1, size, 2))} if data.draw(st.booleans()) else None
    state = mk(size, recs, comms=comms, missing=missing, **({"hosts": hosts} if hosts else {}))
    rep = diagnose(state)
    assert rep.verdict in ("deadlock", "dead-ranks", "hang", "no-hang")
    assert rep.missing == sorted(set(range(size)) - set(ranks))
    assert (rep.verdict == "no-hang") == (not rep.root_causes and not rep.missing and all(
        r["op"] is None for r in recs))
    json.dumps(rep.to_dict())
    rep.to_text()


@pytest.mark.parametrize("stack, site", [
    ([["app/main.py", 3, "main"], ["/v/lib/python3.11/site-packages/numpy/core/_methods.py", 49, "_sum"]],
     "app/main.py:3 in main"),                                        # spinning inside numpy
    ([["/home/u/x.py", 5, "<module>"], ["/work/src/planaria/runtime/bootstrap.py", 219, "step"],
      ["/work/src/planaria/inject/injector.py", 359, "_hang_forever"], ["/usr/lib/python3.11/threading.py", 331, "wait"]],
     "/home/u/x.py:5 in <module>"),                                    # an injected hang, reached through pl.step
    ([["/v/lib/python3.11/site-packages/planaria/cli/main.py", 8, "main"],
      ["/v/lib/python3.11/site-packages/planaria/demo/heat.py", 120, "step"],
      ["/v/lib/python3.11/site-packages/numpy/core/_methods.py", 49, "_sum"]],
     "/v/lib/python3.11/site-packages/planaria/demo/heat.py:120 in step"),   # planaria's own demo program
    ([["/usr/lib/python3.11/threading.py", 331, "wait"]], "/usr/lib/python3.11/threading.py:331 in wait"),
])
def test_the_site_is_the_innermost_frame_a_user_can_act_on(stack: list, site: str) -> None:
    from planaria.diagnose.offline import frame_site
    assert frame_site(stack) == site


def test_a_finished_rank_is_named_where_it_left_else_where_others_wait_for_it(run: Callable) -> None:
    """Rank 0 finished while rank 1 waits for its message: the root cause is rank 0, at its
    ``sys.exit`` line when its bye said one, else at rank 1's receive (the call that cannot match)."""
    recs = [rec(0, None, status="finished"), rec(1, p2p("Recv", 0, "app/a.py:10 in <module>", tag=9)),
            rec(2, coll("Barrier", 2, "app/a.py:12 in <module>"), {"world": 2})]
    known = {"finished": [0]}
    rep = run(mk(3, recs, known=known))
    assert rep.root_causes[0].kind == "finished" and rep.root_causes[0].ranks == [0]
    assert rep.root_causes[0].site == "app/a.py:10 in <module>"
    rep = run(mk(3, recs, known=dict(known, exit_sites={"0": "app/a.py:7 in <module>"})))
    assert rep.root_causes[0].site == "app/a.py:7 in <module>"
