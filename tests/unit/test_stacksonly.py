"""Diagnosis of programs without planaria's runtime: native py-spy frames, stack-only verdicts, post-mortem."""
from __future__ import annotations

from planaria.diagnose import postmortem, pyspy, report, stacksonly

PLAIN = pyspy.PLAIN_STATUS


def _native(name, lib="/usr/lib/libmpi.so.40"):
    return {"name": name, "filename": lib, "module": lib, "line": 0}


def _py(name, filename, line):
    return {"name": name, "filename": filename, "module": None, "line": line}


def test_native_frames_end_in_the_mpi_call_and_drop_the_rest():
    raw = [_native("sched_yield", "/lib/libc.so.6"), _native("opal_progress"), _native("PMPI_Recv"),
           _native("Recv", "/site-packages/mpi4py/MPI.so"), _py("work", "app.py", 6), _py("<module>", "app.py", 11),
           _native("0x7f5f7564524a", "/lib/libc.so.6")]
    assert pyspy._frames(raw) == [["app.py", 11, "<module>"], ["app.py", 6, "work"], [pyspy.MPI_FILE, 0, "MPI_Recv"]]
    # outside MPI only the Python frames remain (a sleep's libc frames are dropped)
    raw = [_native("clock_nanosleep", "/lib/libc.so.6"), _py("<module>", "app.py", 5)]
    assert pyspy._frames(raw) == [["app.py", 5, "<module>"]]


def _state(where, missing=(), finished=()):
    """A state file of plain ranks; ``where`` maps rank -> (line, MPI call or None), 2 samples each."""
    stacks, ranks = [], []
    for r, (line, call) in sorted(where.items()):
        st = [["/job/app.py", line, "<module>"]] + ([[pyspy.MPI_FILE, 0, call]] if call else [])
        if st not in stacks:
            stacks.append(st)
        sid = stacks.index(st)
        ranks.append({"rank": r, "host": "n1", "status": PLAIN, "op": None, "pid": 100 + r,
                      "threads": [{"name": f"thread-{r}", "ident": r, "samples": [sid, sid], "stack": sid}]})
    ranks += [{"rank": r, "host": "n1", "status": "finished", "op": None, "threads": []} for r in finished]
    size = len(where) + len(missing) + len(finished)
    return {"job": "j", "size": size, "stacks": stacks, "ranks": ranks, "missing": list(missing)}


def test_a_rank_outside_mpi_while_others_wait_is_the_root_cause():
    state = _state({0: (6, "MPI_Barrier"), 1: (6, "MPI_Barrier"), 2: (5, None), 3: (6, "MPI_Barrier")})
    assert stacksonly.applies(state)
    rep = stacksonly.diagnose(state)
    assert rep.verdict == "hang"
    assert [(c.kind, c.ranks, c.waiters) for c in rep.root_causes] == [("computing", [2], 3)]
    assert rep.root_causes[0].site == "/job/app.py:5 in <module>"
    assert [(w["op"], w["ranks"]) for w in rep.waiting] == [("MPI_Barrier", "0-1,3")]
    full = report.analyze(state)
    assert full["verdict"] == "hang" and "rank 2" in full["text"] and "pl.world()" in full["text"]
    assert "app.py:6 in <module> (in MPI_Barrier)" in full["hang_filter"]["text"]


def test_all_in_mpi_none_in_mpi_and_unreadable_ranks():
    rep = stacksonly.diagnose(_state({0: (7, "MPI_Recv"), 1: (9, "MPI_Barrier")}))
    assert rep.verdict == "hang" and rep.root_causes == []      # no source line to read the receive's peer from
    assert any("every rank that answered is in an MPI call" in e for e in rep.evidence)
    rep = stacksonly.diagnose(_state({0: (7, "MPI_Recv"), 1: (9, "MPI_Recv")}))
    assert rep.verdict == "deadlock" and [(c.kind, c.ranks) for c in rep.root_causes] == [("deadlock", [0, 1])]
    rep = stacksonly.diagnose(_state({0: (3, None), 1: (4, None)}, finished=[2]))
    assert rep.verdict == "no-hang" and rep.root_causes == []
    assert any("had already ended" in e for e in rep.evidence)
    rep = stacksonly.diagnose(_state({0: (6, "MPI_Barrier")}, missing=[1, 2, 3]))
    assert rep.verdict == "hang" and [(c.kind, c.ranks) for c in rep.root_causes] == [("no-state", [1, 2, 3])]


def test_runtime_ranks_keep_the_full_analysis():
    state = _state({0: (6, "MPI_Barrier"), 1: (5, None)})
    state["ranks"][1]["status"] = None                  # a rank that answered through its agent
    assert not stacksonly.applies(state)
    assert not stacksonly.applies({"ranks": [], "stacks": []})


def test_postmortem_takes_plain_ranks_from_the_summary_and_names_ctl_kills():
    rows = [{"rank": 0, "state": "finished", "how": "exit 1"}, {"rank": 1, "state": "lost", "how": "killed by signal 9 (SIGKILL)", "t": 4.3},
            {"rank": 2, "state": "failed", "how": "exit 3"}]
    events = [{"type": "ctl", "action": "kill", "ranks": [1], "t": 1.0}]
    rep = postmortem.postmortem(events, "j", summary=rows)
    assert [(c["rank_list"], c["reason"]) for c in rep["root_causes"]] == [
        ([1], "killed by command (planaria ctl): killed by signal 9 (SIGKILL)"), ([2], "exit 3")]
    assert "from its event log and summary" in rep["text"]
    assert postmortem.postmortem(events, "j")["root_causes"] == []


def test_postmortem_counts_ranks_the_job_abort_ended_as_consequences():
    rows = [{"rank": 0, "state": "lost", "how": "ended by the job abort (default handler)",
             "ended_by": "the job abort (default handler)"},
            {"rank": 1, "state": "lost", "how": "ended by planaria ctl kill", "t": 4.3},
            {"rank": 2, "state": "lost", "how": "ended by the job abort (default handler)"}]   # an older summary
    rep = postmortem.postmortem([], "j", summary=rows)
    assert [(c["rank_list"], c["reason"]) for c in rep["root_causes"]] == [([1], "ended by planaria ctl kill")]
    assert sorted(rep["consequences"]) == ["0", "2"]
    assert "ranks 0,2 were ended by the job abort (default handler) after rank(s) 1 had failed" in rep["text"]
    # nothing else failed: the ranks the abort ended are what there is to report
    alone = postmortem.postmortem([], "j", summary=[rows[0], rows[2]])
    assert [c["rank_list"] for c in alone["root_causes"]] == [[0], [2]]


def test_postmortem_a_rank_killed_by_ctl_is_the_cause_of_the_teardown_that_followed():
    """Without ULFM, mpiexec ends the other ranks with SIGTERM once one is killed: those, and the
    ranks the job abort ended, are consequences; the ctl kill is the root cause."""
    events = [{"type": "lost", "rank": 2, "reason": "killed by signal 15 (SIGTERM) (no report)", "t": 6.19},
              {"type": "ctl", "action": "kill", "ranks": [3], "t": 5.9}]
    rows = [{"rank": 0, "state": "lost", "how": "ended by the job abort (default event handler)",
             "ended_by": "the job abort (default event handler)", "t": 8.3},
            {"rank": 1, "state": "lost", "how": "ended by the job abort (default event handler)",
             "ended_by": "the job abort (default event handler)", "t": 8.3},
            {"rank": 2, "state": "lost", "how": "ended by the job abort (default event handler)", "t": 6.19},
            {"rank": 3, "state": "lost", "how": "killed by command (planaria ctl)", "t": 5.93}]
    rep = postmortem.postmortem(events, "j", summary=rows)
    assert [c["rank_list"] for c in rep["root_causes"]] == [[3]], rep["text"]
    assert "ranks 2 were ended by the MPI runtime (SIGTERM) after rank(s) 3 were killed" in rep["text"]
