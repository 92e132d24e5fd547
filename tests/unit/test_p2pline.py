"""Peers and tags of a plain program's point-to-point waits, read from its source lines (no MPI job)."""
from __future__ import annotations

import linecache
import textwrap

from planaria.diagnose import p2pline, pyspy, stacksonly


def _file(tmp_path, text: str) -> str:
    path = tmp_path / "app.py"
    path.write_text(textwrap.dedent(text))
    linecache.checkcache(str(path))
    return str(path)


def _at(path: str, line: int, func: str = "<module>") -> str:
    return f"{path}:{line} in {func}"


PROGRAM = """\
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    buf = np.zeros(4)
    if comm.rank == 0:
        comm.Send(np.ones(4), dest=1, tag=8)
    elif comm.Get_rank() in (1, 2):
        comm.Recv(buf, source=0,
                  tag=7)
    comm.Recv(buf, 1 - comm.rank, 5); comm.Barrier()
    def f(peer):
        comm.Send(buf, dest=peer, tag=1)
        comm.Send(buf, dest=comm.size - 1 - comm.rank)
    """


def test_the_peer_and_tag_of_a_line_for_each_rank(tmp_path):
    path = _file(tmp_path, PROGRAM)
    assert p2pline.read(_at(path, 8), "MPI_Recv", 1, 3) == p2pline.P2P("recv", 0, 7, "Recv")
    assert p2pline.read(_at(path, 9), "MPI_Recv", 1, 3) == p2pline.P2P("recv", 0, 7, "Recv")   # a call over two lines
    assert p2pline.read(_at(path, 10), "MPI_Recv", 0, 3) == p2pline.P2P("recv", 1, 5, "Recv")  # positional arguments
    assert p2pline.read(_at(path, 12, "f"), "MPI_Send", 0, 3) == p2pline.P2P("send", None, 1, "Send")  # a name: unknown
    assert p2pline.read(_at(path, 13, "f"), "PMPI_Send", 0, 4) == p2pline.P2P("send", 3, 0, "Send")   # default tag
    assert p2pline.read(_at(path, 6), "MPI_Recv", 0, 3) is None         # no receive on that line
    assert p2pline.read(_at(path, 8), "MPI_Barrier", 1, 3) is None
    assert p2pline.read(_at(tmp_path / "missing.py", 8), "MPI_Recv", 1, 3) is None


def test_the_branches_a_rank_takes(tmp_path):
    path = _file(tmp_path, PROGRAM)
    got = {ln.line: [ln.runs(r, 3) for r in range(3)] for ln in p2pline.lines(path)}
    assert got[6] == [True, False, False] and got[8] == [False, True, True] and got[10] == [True] * 3


def test_a_tag_mismatch_a_wrong_source_and_a_cycle(tmp_path):
    path = _file(tmp_path, PROGRAM)
    bar = ("MPI_Barrier", _at(path, 10))
    got = p2pline.causes({0: bar, 1: ("MPI_Recv", _at(path, 8)), 2: bar}, 3)
    assert [(c["kind"], c["ranks"], c["site"]) for c in got][:1] == [("tag-mismatch", [0, 1], _at(path, 8))]
    assert "rank 0 sent tag 8 to rank 1 at app.py:6" in got[0]["reason"]
    assert got[1]["kind"] == "deadlock" and got[1]["ranks"] == [0, 1]      # 1 waits for 0, 0 for 1 in the Barrier
    text = PROGRAM.replace("dest=1, tag=8", "dest=1, tag=7").replace("source=0,", "source=2,")
    path = _file(tmp_path, text)
    got = p2pline.causes({0: bar, 1: ("MPI_Recv", _at(path, 8)), 2: bar}, 3)
    assert (got[0]["kind"], got[0]["ranks"]) == ("source-mismatch", [0, 1])
    # rank 1 received rank 0's message (tag 8) at line 8 before it waits at line 10: no mismatch, a cycle
    path = _file(tmp_path, PROGRAM.replace("tag=7)", "tag=8)"))
    got = p2pline.causes({0: ("MPI_Recv", _at(path, 10)), 1: ("MPI_Recv", _at(path, 10))}, 2)
    assert [(c["kind"], c["ranks"]) for c in got] == [("deadlock", [0, 1])]
    # a send in a loop: how many messages were sent is not known, only the cycle is named
    path = _file(tmp_path, PROGRAM.replace("if comm.rank == 0:", "for i in range(2):\n        if comm.rank == 0:")
                 .replace("    comm.Send(np.ones(4), dest=1, tag=8)", "        comm.Send(np.ones(4), dest=1, tag=8)"))
    got = p2pline.causes({0: ("MPI_Barrier", _at(path, 11)), 1: ("MPI_Recv", _at(path, 9)),
                          2: ("MPI_Barrier", _at(path, 11))}, 3)
    assert [c["kind"] for c in got] == ["deadlock"]


def test_a_self_send_and_a_wildcard_that_took_the_message(tmp_path):
    path = _file(tmp_path, """\
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.Recv(None, source=MPI.ANY_SOURCE, tag=4)
            comm.Recv(None, source=1, tag=4)
        else:
            comm.Send(None, dest=0, tag=4)
        comm.Barrier()
        comm.Send(None, dest=comm.rank, tag=1)
        """)
    bar = ("MPI_Barrier", _at(path, 8))
    got = p2pline.causes({0: ("MPI_Recv", _at(path, 5)), 1: bar, 2: bar}, 3)
    assert (got[0]["kind"], got[0]["ranks"], got[0]["site"]) == ("source-mismatch", [0], _at(path, 4))
    got = p2pline.causes({0: ("MPI_Send", _at(path, 9)), 1: bar}, 2)
    assert (got[0]["kind"], got[0]["ranks"]) == ("self-wait", [0])


def test_unknown_peers_everyone_in_point_to_point_is_a_deadlock_of_all(tmp_path):
    path = _file(tmp_path, PROGRAM)
    where = {r: ("MPI_Send", _at(path, 12, "f")) for r in range(3)}
    got = p2pline.causes(where, 3)
    assert [(c["kind"], c["ranks"]) for c in got] == [("deadlock", [0, 1, 2])]
    # not all in point-to-point and no peer known: nothing is guessed
    where[2] = ("MPI_Barrier", _at(path, 10))
    assert p2pline.causes(where, 3) == []


def test_the_stack_only_diagnosis_names_them(tmp_path):
    path = _file(tmp_path, PROGRAM)
    stacks = [[[path, 8, "<module>"], [pyspy.MPI_FILE, 0, "MPI_Recv"]], [[path, 10, "<module>"], [pyspy.MPI_FILE, 0, "MPI_Barrier"]]]
    ranks = [{"rank": r, "host": "n1", "status": pyspy.PLAIN_STATUS, "op": None, "pid": 100 + r,
              "threads": [{"name": "t", "ident": r, "samples": [sid], "stack": sid}]}
             for r, sid in ((0, 1), (1, 0), (2, 1))]
    rep = stacksonly.diagnose({"job": "j", "size": 3, "stacks": stacks, "ranks": ranks, "missing": []})
    assert [(c.kind, c.ranks) for c in rep.root_causes][:2] == [("tag-mismatch", [0, 1]), ("deadlock", [0, 1])]
    assert rep.verdict == "deadlock" and any("source line" in e for e in rep.evidence)


def test_a_wait_for_a_rank_that_has_finished_names_it_and_its_exit(tmp_path):
    path = _file(tmp_path, """\
        import sys
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        comm.Barrier()
        if comm.rank == 3:
            sys.exit(0)
        if comm.rank == 1:
            comm.Recv(None, source=0, tag=9)
        comm.Barrier()
        """)
    bar = ("MPI_Barrier", _at(path, 9))
    got = p2pline.finished([3], {0: bar, 1: bar, 2: bar}, 4)
    assert [(c["kind"], c["ranks"], c["site"]) for c in got] == [("finished", [3], _at(path, 6))]
    assert "app.py:6" in got[0]["reason"] and "Barrier at app.py:9" in got[0]["reason"]
    got = p2pline.finished([0, 2, 3], {1: ("MPI_Recv", _at(path, 8))}, 4)
    assert [(c["kind"], c["ranks"], c["site"]) for c in got] == [("finished", [0], _at(path, 8))]
    assert p2pline.finished([3], {0: bar, 1: bar}, 4) == []      # rank 2 is neither waiting nor ended


def test_a_live_process_without_an_interpreter_has_finished(monkeypatch):
    """py-spy cannot find the interpreter of a process whose program ended (it waits in MPI_Finalize)."""
    monkeypatch.setattr(pyspy, "dump", lambda pid, native=False: pyspy.FINALIZING)
    part = pyspy.sample(3, 4242, "n1", 2, 0.0, status=pyspy.PLAIN_STATUS)
    assert part["ranks"][0]["status"] == "finished" and part["ranks"][0]["finalizing"] and part["missing"] == []


HALO = """\
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    left, right = (comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size
    for it in range(6):
        comm.Sendrecv(None, dest=left, sendtag=1, recvbuf=None, source=right, recvtag=1)
        if it == 3 and comm.rank == 2:
            continue
        comm.Barrier()
    """


def test_names_assigned_once_are_followed_and_a_sendrecv_waits_in_its_receive(tmp_path):
    path = _file(tmp_path, HALO)
    assert p2pline.read(_at(path, 5), "MPI_Sendrecv", 2, 4) == p2pline.P2P("recv", 3, 1, "Sendrecv")
    (ln,) = p2pline.lines(path)
    assert ln.args(0, 4, "send") == (3, 1) and ln.args(0, 4, "recv") == (1, 1) and (ln.loop, ln.loop_end) == (4, 8)
    path = _file(tmp_path, HALO.replace("comm = MPI.COMM_WORLD", "comm = MPI.COMM_WORLD\nright = 0"))
    assert p2pline.read(_at(path, 6), "MPI_Sendrecv", 2, 4).peer is None      # assigned twice: not known


def test_a_rank_a_step_ahead_skipped_the_collective_its_neighbours_wait_in(tmp_path):
    path = _file(tmp_path, HALO)
    bar = ("MPI_Barrier", _at(path, 8))
    got = p2pline.causes({0: bar, 1: bar, 3: bar, 2: ("MPI_Sendrecv", _at(path, 5))}, 4)
    assert (got[0]["kind"], got[0]["ranks"], got[0]["site"]) == ("collective-mismatch", [2], _at(path, 8))
    assert "rank 2 skipped Barrier at app.py:8" in got[0]["reason"] and "waiting for rank 3" in got[0]["reason"]
    # without the loop the peer's send came before: no skipped step (a message that did not match)
    path = _file(tmp_path, HALO.replace("for it in range(6):", "if True:"))
    got = p2pline.causes({0: bar, 1: bar, 3: bar, 2: ("MPI_Sendrecv", _at(path, 5))}, 4)
    assert all(c["kind"] != "collective-mismatch" for c in got)


def test_a_rank_that_ended_in_a_traceback_is_no_state_at_its_traceback_not_finished():
    """Its process waits at exit like a finished one, but its own traceback said it failed."""
    state = {"job": "j", "size": 2, "stacks": [[["/job/app.py", 9, "<module>"], [pyspy.MPI_FILE, 0, "MPI_Barrier"]]],
             "missing": [], "known": {"crash_sites": {"1": {"site": "/job/app.py:8 in <module>", "error": "ValueError: x"}}},
             "ranks": [{"rank": 0, "host": "n1", "status": pyspy.PLAIN_STATUS, "op": None, "pid": 100,
                        "threads": [{"name": "t", "ident": 0, "samples": [0], "stack": 0}]},
                       {"rank": 1, "host": "n1", "status": "finished", "finalizing": True, "op": None, "threads": []}]}
    rep = stacksonly.diagnose(state)
    assert [(c.kind, c.ranks, c.site) for c in rep.root_causes][:1] == [("no-state", [1], "/job/app.py:8 in <module>")]


def test_the_buffer_size_of_a_collective_for_each_rank(tmp_path):
    path = _file(tmp_path, """\
        import numpy as np
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        n = (1 << 20) if comm.rank == 1 else 2
        a = np.ones(n)
        b = np.zeros((comm.size, n), dtype=np.float32)
        comm.Allreduce(a, np.zeros_like(a))
        comm.Bcast([b, MPI.FLOAT], root=0)
        comm.Gather(np.full(3, 1.5), None, root=0)
        comm.Send(a, dest=0)
        """)
    assert p2pline.coll_bytes(_at(path, 7), [0, 1, 2], 3) == ("Allreduce", {0: 16, 1: 8 << 20, 2: 16})
    assert p2pline.coll_bytes(_at(path, 8), [0, 1], 4) == ("Bcast", {0: 32, 1: 16 << 20})
    assert p2pline.coll_bytes(_at(path, 9), [0, 1], 2) == ("Gather", {})      # full's dtype follows its value
    assert p2pline.coll_bytes(_at(path, 10), [0], 2) is None                   # not a collective


def test_reading_a_line_does_not_initialize_mpi_in_the_analysing_process(tmp_path):
    """The launcher analyses plain programs' stacks: mpi4py's signatures come from its type stubs,
    so ``mpi4py.MPI`` (which initializes MPI on import) is never imported there."""
    import subprocess
    import sys
    path = _file(tmp_path, PROGRAM)
    code = ("import sys; from planaria.diagnose import p2pline; "
            f"print(p2pline.read({_at(path, 8)!r}, 'MPI_Recv', 1, 3)); print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == ["P2P(kind='recv', peer=0, tag=7, method='Recv')", "False"], out.stderr


def test_the_stubs_name_the_parameters_mpi4py_has():
    import inspect

    from mpi4py import MPI
    stubs = p2pline._stub_signatures()
    for name in ("Send", "Ssend", "Isend", "Recv", "Irecv", "Sendrecv", "send", "recv", "sendrecv", "Probe"):
        assert list(stubs[name].parameters) == list(inspect.signature(getattr(MPI.Comm, name)).parameters), name
