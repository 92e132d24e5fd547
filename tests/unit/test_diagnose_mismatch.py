"""Collective mismatches: the odd ones out of a collective instance are the root cause, at the call to fix."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from planaria.diagnose import stacksonly
from planaria.diagnose.offline import Report, diagnose, ranges
from planaria.diagnose.state import read_state, write_state
from tests.unit.test_diagnose_offline import coll, mk, p2p, rec
from tests.unit.test_stacksonly import _state as plain_state

A = "app/x.py"


@pytest.fixture(params=["memory", "file"])
def run(request: Any, tmp_path: Path) -> Callable[[dict[str, Any]], Report]:
    """Diagnose in memory (row records) or through a state file (columns)."""
    def go(state: dict[str, Any]) -> Report:
        if request.param == "memory":
            return diagnose(state)
        write_state(tmp_path / "s.state", state)
        return diagnose(read_state(tmp_path / "s.state"))
    return go


def first(rep: Report) -> tuple[str, str, str | None]:
    rc = rep.root_causes[0]
    return rc.kind, ranges(rc.ranks), rc.site


def test_one_rank_in_another_collective_is_the_odd_one(run: Callable) -> None:
    recs = [rec(r, coll("Allreduce", 2, f"{A}:13 in <module>"), {"world": 2}) for r in (0, 1, 3)]
    recs.append(rec(2, coll("Bcast", 2, f"{A}:11 in <module>", root=0), {"world": 2}))
    rep = run(mk(4, recs))
    assert first(rep) == ("collective-mismatch", "2", f"{A}:11 in <module>")
    assert rep.root_causes[0].reason == ("rank 2 called Bcast (root 0) at x.py:11 in <module> where ranks 0-1,3 "
                                         "called Allreduce at x.py:13 in <module> (collective #2 on world)")
    assert len(rep.root_causes) == 1 and rep.root_causes[0].waiters == 4
    assert "1. rank 2 at x.py:11 in <module>: rank 2 called Bcast" in rep.to_text()


def test_a_rank_past_the_others_call_skipped_it(run: Callable) -> None:
    recs = [rec(r, coll("Barrier", 2, f"{A}:12 in <module>"), {"world": 2}) for r in (0, 1, 3)]
    recs.append(rec(2, coll("Allreduce", 2, f"{A}:13 in <module>"), {"world": 2}))
    rep = run(mk(4, recs))
    assert first(rep) == ("collective-mismatch", "2", f"{A}:12 in <module>")
    assert rep.root_causes[0].op == "Barrier"
    assert "rank 2 skipped Barrier at x.py:12 in <module> (collective #2 on world), which ranks 0-1,3 wait in: " \
           "it is already in Allreduce at x.py:13 in <module>" == rep.root_causes[0].reason
    # in another function, or at an earlier step, the line order says nothing: the odd rank's own call
    recs[3] = rec(2, coll("Allreduce", 2, f"{A}:13 in g"), {"world": 2})
    assert first(run(mk(4, recs)))[2] == f"{A}:13 in g"
    recs[3] = rec(2, coll("Allreduce", 2, f"{A}:13 in <module>"), {"world": 2}, step=9)
    assert first(run(mk(4, recs)))[2] == f"{A}:13 in <module>"


def test_a_tie_names_every_member_and_no_site(run: Callable) -> None:
    recs = [rec(r, coll("Bcast", 2, f"{A}:5 in f", root=r // 2), {"world": 2}) for r in range(4)]
    rep = run(mk(4, recs))
    assert first(rep) == ("collective-mismatch", "0-3", None)
    # three classes 1/1/2: two are smallest, no odd one either
    recs[3] = rec(3, coll("Allreduce", 2, f"{A}:7 in f"), {"world": 2})
    assert first(run(mk(4, recs))) == ("collective-mismatch", "0-3", None)


def test_a_rank_left_in_a_collective_the_others_completed(run: Callable) -> None:
    """The others are in the next collective: the rank still in the earlier one did not match their call."""
    recs = [rec(r, coll("Barrier", 3, f"{A}:13 in <module>"), {"world": 3}) for r in range(3)]
    recs.append(rec(3, coll("Bcast", 2, f"{A}:10 in <module>", root=1), {"world": 2}))
    rep = run(mk(4, recs))
    assert first(rep) == ("collective-mismatch", "3", f"{A}:10 in <module>")
    assert "rank 3 is still in Bcast (root 1) at x.py:10 in <module> (collective #2 on world), which ranks 0-2 " \
           "have completed" in rep.root_causes[0].reason
    # two ranks still inside with different roots, two completed: those count with the root that is inside
    recs[0] = rec(0, coll("Bcast", 2, f"{A}:12 in <module>", root=0), {"world": 2})
    rep = run(mk(4, recs))
    assert first(rep) == ("collective-mismatch", "3", f"{A}:10 in <module>")
    assert rep.root_causes[0].reason.endswith("where rank 0 called Bcast (root 0) at x.py:12 in <module> "
                                              "(collective #2 on world); ranks 1-2 have completed it")


def test_stuck_collectives_stay_stuck(run: Callable) -> None:
    """Every member inside, or a root still collecting from senders that left: no odd one, suspect the network."""
    recs = [rec(r, coll("Allreduce", 4, f"{A}:3 in f"), {"world": 4}) for r in range(4)]
    assert first(run(mk(4, recs)))[:2] == ("stuck-collective", "0-3")
    recs = [rec(0, coll("Reduce", 4, f"{A}:3 in f", root=0), {"world": 4})]
    recs += [rec(r, coll("Barrier", 5, f"{A}:4 in f"), {"world": 5}) for r in (1, 2, 3)]
    assert first(run(mk(4, recs)))[:2] == ("stuck-collective", "0")
    # the non-roots still inside, the root gone on: more inside than completed
    recs = [rec(r, coll("Bcast", 4, f"{A}:3 in f", root=0), {"world": 4}) for r in (1, 2, 3)]
    recs.append(rec(0, coll("Barrier", 5, f"{A}:4 in f"), {"world": 5}))
    assert first(run(mk(4, recs)))[:2] == ("stuck-collective", "1-3")


def test_a_stuck_collective_whose_sizes_disagree_is_a_count_mismatch(run: Callable) -> None:
    """All members inside one Allreduce, rank 1's buffer 8 MiB, the others' 8 B: not the network."""
    recs = [rec(r, dict(coll("Allreduce", 4, f"{A}:3 in f"), size=8 << 20 if r == 1 else 8), {"world": 4})
            for r in range(4)]
    rep = run(mk(4, recs))
    assert first(rep) == ("collective-mismatch", "1", f"{A}:3 in f")
    assert rep.root_causes[0].reason == ("passed 8 MiB to Allreduce #4 on world where rank(s) 0,2-3 passed 8 B: "
                                         "the counts of one collective call disagree")
    # a tie: the larger buffer is named (its data overruns the others'); an unknown size (0) is left out
    recs = [rec(r, dict(coll("Bcast", 4, f"{A}:3 in f", root=0), size=(16, 8, 16, 8)[r]), {"world": 4})
            for r in range(4)]
    recs.append(rec(4, dict(coll("Bcast", 4, f"{A}:3 in f", root=0), size=0), {"world": 4}))
    assert first(run(mk(5, recs)))[:2] == ("collective-mismatch", "0,2")
    # the v-variants' counts may differ by rank: still stuck
    recs = [rec(r, dict(coll("Gatherv", 4, f"{A}:3 in f", root=0), size=8 * (r + 1)), {"world": 4}) for r in range(4)]
    assert first(run(mk(4, recs)))[:2] == ("stuck-collective", "0-3")


def test_a_collective_on_another_communicator(run: Callable) -> None:
    comms = {"world": None, "world.d1": None}
    recs = [rec(0, coll("Barrier", 1, f"{A}:8 in <module>", comm="world.d1"), {"world": 2, "world.d1": 1})]
    recs += [rec(r, coll("Barrier", 3, f"{A}:10 in <module>"), {"world": 3, "world.d1": 0}) for r in (1, 2, 3)]
    rep = run(mk(4, recs, comms=comms))
    assert rep.verdict == "hang" and first(rep) == ("collective-mismatch", "0", f"{A}:8 in <module>")
    assert rep.root_causes[0].comm == "world.d1" and len(rep.root_causes) == 1
    assert rep.root_causes[0].reason.startswith("rank 0 called Barrier #1 on world.d1 at x.py:8 in <module> where "
                                                "ranks 1-3 called Barrier #3 on world at x.py:10 in <module>")
    # two against two: the order of two collectives differs, a deadlock of all four
    recs[1] = rec(1, coll("Barrier", 1, f"{A}:8 in <module>", comm="world.d1"), {"world": 2, "world.d1": 1})
    rep = run(mk(4, recs, comms=comms))
    assert rep.verdict == "deadlock" and first(rep)[:2] == ("deadlock", "0-3")
    # a point-to-point wait in the cycle: a deadlock across operations, as before
    recs = [rec(0, p2p("Recv", 1, f"{A}:3 in f"), {"world": 1}),
            rec(1, coll("Barrier", 2, f"{A}:4 in f"), {"world": 2}),
            rec(2, coll("Barrier", 2, f"{A}:4 in f"), {"world": 2})]
    assert first(run(mk(3, recs)))[:2] == ("deadlock", "0-1")


# --------------------------------------------------------------------------- programs without the runtime
def test_plain_ranks_in_different_collectives() -> None:
    rep = stacksonly.diagnose(plain_state({0: (13, "MPI_Allreduce"), 1: (13, "MPI_Allreduce"), 2: (11, "MPI_Bcast"),
                                           3: (13, "MPI_Allreduce")}))
    rc = rep.root_causes[0]
    assert (rc.kind, rc.ranks, rc.site, rc.waiters) == ("collective-mismatch", [2], "/job/app.py:11 in <module>", 4)
    assert "communicators and roots are not known" in rc.reason
    rep = stacksonly.diagnose(plain_state({0: (12, "MPI_Barrier"), 1: (12, "MPI_Barrier"), 2: (13, "MPI_Allreduce"),
                                           3: (12, "MPI_Barrier")}))
    assert [(c.ranks, c.site, c.op) for c in rep.root_causes] == [([2], "/job/app.py:12 in <module>", "MPI_Barrier")]
    # the same call at another line is another call
    rep = stacksonly.diagnose(plain_state({0: (8, "MPI_Barrier"), 1: (10, "MPI_Barrier"), 2: (10, "MPI_Barrier")}))
    assert [(c.ranks, c.site) for c in rep.root_causes] == [([0], "/job/app.py:8 in <module>")]


def test_plain_ranks_without_an_odd_collective() -> None:
    for where in ({0: (5, "MPI_Barrier"), 1: (5, "MPI_Barrier"), 2: (6, "MPI_Bcast"), 3: (6, "MPI_Bcast")},
                  {0: (5, "MPI_Barrier"), 1: (5, "MPI_Barrier"), 2: (6, "MPI_Recv")},
                  {0: (5, "MPI_Barrier"), 1: (5, "MPI_Barrier")}):
        assert stacksonly.diagnose(plain_state(where)).root_causes == []
    # a rank outside MPI is the root cause, not the collectives' disagreement
    rep = stacksonly.diagnose(plain_state({0: (5, "MPI_Barrier"), 1: (5, "MPI_Barrier"), 2: (6, "MPI_Bcast"),
                                           3: (2, None)}))
    assert [(c.kind, c.ranks) for c in rep.root_causes] == [("computing", [3])]
