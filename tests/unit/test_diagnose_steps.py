"""The offline analysis step by step: prepare, match collectives, wait graph, root causes, render,
each on a small hand-built state whose groups, edges and causes can be stated."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planaria.diagnose.causes import root_causes, sink_ranks
from planaria.diagnose.collectives import match_collectives
from planaria.diagnose.offline import diagnose, render
from planaria.diagnose.prepare import prepare
from planaria.diagnose.waitgraph import ancestors, follow, rank_cycles, wait_graph
from tests.unit.test_diagnose_offline import coll, mk, p2p, rec


def _hung_allreduce() -> dict:
    """Ranks 0-2 in Allreduce #3 on world; rank 3 computing (entered 2); rank 4 dead; rank 5 waits
    on rank 3 (p2p); host n2 holds ranks 4 and 5, n1 ranks 2 and 3."""
    recs = [rec(r, coll("Allreduce", 3, "app/x.py:9 in step"), colls={"world": 3}) for r in (0, 1, 2)]
    recs.append(rec(3, None, colls={"world": 2}))
    recs.append(rec(5, p2p("Recv", 3, "app/x.py:20 in halo"), colls={"world": 2}))
    return mk(6, recs, hosts={"n0": [0, 1], "n1": [2, 3], "n2": [4, 5]})


# --------------------------------------------------------------------------- prepare
def test_prepare_sorts_keeps_the_newest_duplicate_and_classifies() -> None:
    old = rec(1, p2p("Recv", 0, "a.py:1 in f"))
    new = dict(rec(1, coll("Barrier", 1, "a.py:2 in f")), t=2.0)
    state = mk(3, [new, rec(0, None), old], hosts={"h": [0, 1, 2]})
    p = prepare(state)
    assert p.rank.tolist() == [0, 1] and p.n == 2 and p.size == 3
    assert p.row_of.tolist() == [0, 1, -1]
    assert p.is_coll.tolist() == [False, True] and p.computing.tolist() == [True, False]
    assert "rank 1 answered more than once; kept the newest state" in p.evidence
    assert p.census.missing.tolist() == [2]
    assert p.census.partial_hosts == {0: (1, 3)} and not p.census.down_hosts
    assert p.op_text(1) == "Barrier #1 on world"
    assert p.state_text(2) == "has no state (dead or unreachable)"


def test_prepare_names_a_host_whose_ranks_are_all_missing() -> None:
    p = prepare(mk(4, [rec(0, None), rec(1, None)], hosts={"a": [0, 1], "b": [2, 3]}))
    assert p.census.down_hosts == {1: 2}
    assert p.state_text(3) == "has no state (host b down or unreachable: all 2 of its ranks missing)"
    assert any(e.startswith("host b: all 2 ranks missing") for e in p.census.evidence)


def test_prepare_guesses_the_size_and_drops_ranks_beyond_it() -> None:
    state = mk(2, [rec(0, None), rec(1, None), rec(5, None)])
    p = prepare(state)
    assert p.size == 2 and p.rank.tolist() == [0, 1]
    assert "ignored 1 records of ranks >= size 2" in p.evidence
    sized = prepare({**state, "size": None})
    assert sized.size == 6 and "state has no job size; assuming 6 ranks" in sized.evidence


# --------------------------------------------------------------------------- match collectives
def test_collective_groups_waiters_members_and_laggards() -> None:
    p = prepare(_hung_allreduce())
    c = match_collectives(p)
    assert c.n_groups == 1
    assert (c.group_seq.tolist(), p.strings[int(c.group_comm[0])]) == ([3], "world")
    assert c.waiters(0).tolist() == [0, 1, 2]
    assert c.members(0).tolist() == list(range(6))
    assert c.laggards(0).tolist() == [3, 4, 5]      # computing, dead, in a point-to-point wait
    assert c.group_size.tolist() == [6]
    assert c.group_of_row.tolist() == [0, 0, 0, -1, -1]


def test_collectives_on_two_communicators_and_outsiders() -> None:
    recs = [rec(0, coll("Bcast", 1, "a.py:1 in f", comm="row"), colls={"row": 0}),
            rec(1, coll("Bcast", 1, "a.py:1 in f", comm="row"), colls={"row": 0}),
            rec(2, coll("Barrier", 4, "a.py:2 in f"), colls={"world": 4}),
            rec(3, coll("Bcast", 1, "a.py:1 in f", comm="row"), colls={"row": 0})]
    p = prepare(mk(4, recs, comms={"row": [0, 1], "world": None}))
    c = match_collectives(p)
    assert c.n_groups == 2
    row_group = int(c.group_of_row[0])
    assert c.waiters(row_group).tolist() == [0, 1, 3] and c.laggards(row_group).tolist() == []
    assert c.laggards(1 - row_group).tolist() == [0, 1, 3]
    assert "rank 3 waits in a collective on row but is not listed as a member" in c.evidence


# --------------------------------------------------------------------------- wait graph
def test_wait_graph_edges_terminals_and_basin() -> None:
    p = prepare(_hung_allreduce())
    c = match_collectives(p)
    g = wait_graph(p, c)
    group_node = p.size + 0
    assert g.waits_on.tolist() == [group_node] * 3 + [3, 4, 3, group_node]
    assert g.terminal[:6].tolist() == [group_node] * 3 + [3, 4, 3]
    assert g.basin.tolist() == [3]
    assert g.laggard_terminal.tolist() == [3, 4, 3]
    assert not g.group_edges and not g.rank_cycles


def test_follow_rank_cycles_and_ancestors() -> None:
    waits_on = np.array([1, 2, 0, 0, 4, 5, 4])     # 0 -> 1 -> 2 -> 0, 3 -> 0, 6 -> 4 (waits on nobody)
    terminal, hops = follow(waits_on)
    assert set(terminal[:3].tolist()) <= {0, 1, 2} and terminal[4] == 4 and terminal[6] == 4
    assert hops[6] == 1 and hops[4] == 0
    assert rank_cycles(waits_on, terminal, 7) == ((0, 1, 2),)
    assert ancestors({0: {1}, 1: {2}}) == {0: {0}, 1: {0, 1}, 2: {0, 1, 2}}


def test_a_collective_lacking_a_rank_that_waits_in_another_collective_is_an_edge() -> None:
    recs = [rec(0, coll("Barrier", 1, "a.py:1 in f", comm="a"), colls={"a": 0, "b": 0}),
            rec(1, coll("Barrier", 1, "a.py:2 in f", comm="b"), colls={"a": 0, "b": 0})]
    p = prepare(mk(2, recs, comms={"a": [0, 1], "b": [0, 1]}))
    c = match_collectives(p)
    g = wait_graph(p, c)
    ga, gb = int(c.group_of_row[0]), int(c.group_of_row[1])
    assert g.group_edges == {ga: {gb}, gb: {ga}}
    assert g.ancestors_of(ga) == {ga, gb}


# --------------------------------------------------------------------------- root causes
def test_root_causes_of_a_hung_allreduce() -> None:
    p = prepare(_hung_allreduce())
    c = match_collectives(p)
    g = wait_graph(p, c)
    on_cycle = np.zeros(p.size, dtype=bool)
    assert sink_ranks(p, g, on_cycle).tolist() == [3, 4]
    found = root_causes(p, c, g)
    got = [(rc.kind, rc.ranks, rc.waiters) for rc in found.causes]
    # rank 3: rank 5 waits on it and the 3 ranks of the Allreduce lack it; rank 4: the Allreduce lacks it
    assert got == [("computing", [3], 4), ("no-state", [4], 3)]
    assert found.causes[0].example.startswith("rank 5 is stuck in Recv from rank 3 at x.py:20 in halo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.causes = ()   # type: ignore[misc]  # frozen: the assignment must fail


def test_root_causes_of_a_p2p_deadlock_and_a_tag_mismatch() -> None:
    ring = mk(3, [rec(0, p2p("Recv", 1, "a.py:1 in f")), rec(1, p2p("Recv", 2, "a.py:1 in f")),
                  rec(2, p2p("Recv", 0, "a.py:1 in f"))])
    p = prepare(ring)
    c = match_collectives(p)
    found = root_causes(p, c, wait_graph(p, c))
    assert [(rc.kind, rc.ranks, rc.waiters) for rc in found.causes] == [("deadlock", [0, 1, 2], 3)]
    pair = mk(2, [rec(0, p2p("Recv", 1, "a.py:1 in f", tag=5)), rec(1, p2p("Send", 0, "a.py:2 in f", tag=6))])
    p = prepare(pair)
    c = match_collectives(p)
    (rc,) = root_causes(p, c, wait_graph(p, c)).causes
    assert rc.kind == "deadlock" and rc.reason.startswith("tag mismatch: rank 1 sends tag 6 to rank 0")


def test_a_stuck_collective_and_a_mismatch_with_its_evidence() -> None:
    stuck = mk(2, [rec(r, coll("Allreduce", 2, "a.py:3 in f"), colls={"world": 2}) for r in (0, 1)])
    p = prepare(stuck)
    c = match_collectives(p)
    found = root_causes(p, c, wait_graph(p, c))
    assert [(rc.kind, rc.ranks) for rc in found.causes] == [("stuck-collective", [0, 1])]
    mixed = mk(3, [rec(0, coll("Allreduce", 2, "a.py:3 in f"), colls={"world": 2}),
                   rec(1, coll("Allreduce", 2, "a.py:3 in f"), colls={"world": 2}),
                   rec(2, coll("Bcast", 2, "a.py:5 in f", root=0), colls={"world": 2})])
    p = prepare(mixed)
    c = match_collectives(p)
    found = root_causes(p, c, wait_graph(p, c))
    assert [(rc.kind, rc.ranks) for rc in found.causes] == [("collective-mismatch", [2])]
    # rank 2 is at a later line of the same function: it ran past the Allreduce the others wait in
    assert found.evidence == ("collective mismatch on world #2: rank 2 skipped Allreduce at a.py:3 in f "
                              "(collective #2 on world), which ranks 0-1 wait in: it is already in Bcast (root 0) "
                              "at a.py:5 in f",)


# --------------------------------------------------------------------------- render
def test_render_orders_the_evidence_as_the_steps_found_it() -> None:
    state = _hung_allreduce()
    p = prepare(state)
    c = match_collectives(p)
    g = wait_graph(p, c)
    rep = render(p, c, g, root_causes(p, c, g))
    assert rep.verdict == "dead-ranks" and rep.missing == [4] and rep.computing == 1
    assert rep.evidence[0].startswith("count check: 6 ranks expected, 5 answered")
    assert rep.waiting[0]["text"].startswith("world: 3 of 6 members in Allreduce #3 on world")
    full = diagnose(state)
    assert full.to_text() == rep.to_text() and full.seconds > 0


def test_render_of_a_job_nobody_waits_in() -> None:
    p = prepare(mk(2, [rec(0, None), rec(1, None)]))
    c = match_collectives(p)
    g = wait_graph(p, c)
    rep = render(p, c, g, root_causes(p, c, g))
    assert rep.verdict == "no-hang" and rep.root_causes == []
    assert rep.evidence == ["no rank is waiting in MPI (2 answered, all computing)"]
