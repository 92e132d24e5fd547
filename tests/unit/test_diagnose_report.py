"""Report assembly: lost messages, progressing jobs, incidents as root causes, post-mortem from events."""
from planaria.diagnose import postmortem, report


def _rec(rank, op=None, sent=None, recvd=None, threads=()):
    return {"rank": rank, "host": "h", "op": op, "sent": sent or {}, "recvd": recvd or {}, "threads": list(threads),
            "colls": {}, "comms": {}}


def _recv(peer, since, name="Recv"):
    return {"name": name, "kind": "p2p", "comm": "world", "peer": peer, "tag": 1, "seq": None,
            "since": since, "site": "app.py:9 in f"}


def test_lost_message_needs_more_sent_than_received_and_a_long_wait():
    state = {"ranks": [_rec(0, _recv(1, 5.0), recvd={"1": 2}), _rec(1, _recv(0, 5.0), sent={"0": 3})]}
    lost = report.lost_messages(state)
    assert [c["rank_list"] for c in lost] == [[1, 0]] and lost[0]["ranks"] == "0-1"
    assert "rank 1 sent 3" in lost[0]["reason"]
    state["ranks"][0]["op"]["since"] = 0.2            # may still be in flight
    assert report.lost_messages(state) == []
    state["ranks"][0]["op"]["since"] = 5.0
    state["ranks"][1]["sent"] = {"0": 2}               # everything sent arrived
    assert report.lost_messages(state) == []


def test_a_message_the_receive_does_not_match_is_a_mismatch_not_a_lost_message():
    """Rank 0 waits for tag 1 from rank 1; rank 1's message (tag 8) waits at rank 0 unmatched."""
    op = dict(_recv(1, 5.0), unmatched={"source": 1, "tag": 8, "bytes": 8})
    state = {"ranks": [_rec(0, op), _rec(1, None, sent={"0": 1})]}
    (c,) = report.lost_messages(state)
    assert c["kind"] == "tag-mismatch" and c["rank_list"] == [0, 1]
    assert c["reason"] == "unmatched tag: rank 1 sent tag 8, rank 0 waits for tag 1 from rank 1 at app.py:9"
    op["unmatched"] = {"source": 2, "tag": 1, "bytes": 8}          # the message came from another rank
    state["ranks"][1]["sent"] = {}                                  # and rank 1 sent rank 0 nothing
    state["ranks"].append(_rec(2, None))
    (c,) = report.lost_messages(state)
    assert c["kind"] == "source-mismatch" and c["rank_list"] == [0, 2]      # rank 1 takes no part
    assert c["reason"] == ("unmatched source: rank 2 sent to rank 0 (tag 1), rank 0 waits for a message from "
                           "rank 1 at app.py:9")


def test_incidents_become_root_causes_by_kind_keeping_the_latest_count():
    incs = [{"kind": "io-fault", "ranks": [2, 3], "verdict": "host h: repeated I/O errors", "count": 3,
             "evidence": [{"site": "app.py:5 in w"}]},
            {"kind": "io-fault", "ranks": [2, 3], "verdict": "host h: repeated I/O errors (9)", "count": 9,
             "evidence": [{"site": "app.py:5 in w"}]},
            {"kind": "timeout", "ranks": [1], "verdict": "rank 1: 1 message timeout", "count": 1}]
    causes = report.incident_causes(incs)
    assert len(causes) == 1
    assert causes[0]["rank_list"] == [2, 3] and causes[0]["ranks"] == "2-3" and causes[0]["records"] == 9 and causes[0]["site"] == "app.py:5 in w"


def test_short_waits_are_progressing_not_hung():
    state = {"job": "j", "size": 2, "stacks": [], "missing": [],
             "ranks": [_rec(0, _recv(1, 0.05)), _rec(1, None)],
             "known": {"incidents": [{"kind": "slow", "ranks": [1], "verdict": "rank 1: slow messages", "count": 4}]}}
    out = report.analyze(state)
    assert out["verdict"] == "slow"
    assert [c["rank_list"] for c in out["root_causes"]] == [[1]]
    assert "progressing" in out["text"]


def test_postmortem_blames_the_first_failure_not_its_consequences():
    events = [
        {"type": "inject", "rank": 2, "kind": "kill", "detail": "injected kill at iteration 6", "t": 1.0},
        {"type": "fail", "rank": 2, "reason": "injected kill", "site": "app.py:3 in main", "step": 6, "t": 1.0},
        {"type": "fail", "rank": 0, "reason": "uncaught ProcFailedError", "t": 1.1,
         "saw_failure": {"op": "Allreduce", "comm": "world", "ranks": [2], "site": "app.py:7 in main"}},
        {"type": "fail", "rank": 1, "reason": "uncaught ProcFailedError", "t": 1.1,
         "saw_failure": {"op": "Allreduce", "comm": "world", "ranks": [2], "site": "app.py:7 in main"}},
    ]
    out = postmortem.postmortem(events, "j")
    assert [c["rank_list"] for c in out["root_causes"]] == [[2]]
    assert "killed by injection" in out["root_causes"][0]["reason"]
    assert "ranks 0-1 failed in Allreduce on world at app.py:7 in main" in out["text"]
    assert postmortem.postmortem([], "j")["verdict"] == "no-failure"


def test_a_job_no_rank_of_which_started_is_blamed_on_the_launcher():
    """The launcher ended the job at --start-timeout: its first line says so, not "no rank failed"."""
    out = postmortem.postmortem([], "j", summary=[], outcome="not-started")
    assert out["verdict"] == "not-started" and out["root_causes"] == []
    assert out["text"].splitlines()[1].startswith("no rank started: the MPI launcher started none")
    assert postmortem.postmortem([], "j", summary=[], outcome="timeout")["verdict"] == "no-failure"


def test_lost_rank_without_report_is_a_root_cause():
    out = postmortem.postmortem([{"type": "lost", "rank": 3, "t": 2.0}], "j")
    assert out["root_causes"][0]["rank_list"] == [3] and "lost" in out["root_causes"][0]["reason"]


def test_postmortem_never_blames_ranks_the_launcher_ended_and_starts_from_its_last_live_diagnosis():
    """After a --timeout kill every rank is 'lost': those are victims. The cause is in the launcher's
    diagnosis made just before the kill."""
    events = [{"type": "lost", "rank": r, "t": 9.0, "reason": "killed by signal 15 (SIGTERM) (no report)"}
              for r in range(3)]
    summary = [{"rank": r, "state": "lost", "how": "ended by the launcher at the timeout (8 s)",
                "ended_by": "the launcher at the timeout (8 s)"} for r in range(3)]
    live = {"verdict": "tag-mismatch", "text": "messages that do not match their receive:\n  unmatched tag: x\n",
            "root_causes": [{"kind": "tag-mismatch", "rank_list": [1, 0], "ranks": "0-1", "reason": "unmatched tag: x"}]}
    out = postmortem.postmortem(events, "j", summary=summary, last_live=("diag-1.json", live))
    assert out["verdict"] == "tag-mismatch"
    assert [rc["kind"] for rc in out["root_causes"]] == ["tag-mismatch"]
    lines = out["text"].splitlines()
    assert lines[1] == "the launcher's last diagnosis while the ranks ran (diag-1.json):"
    assert "unmatched tag: x" in lines[3] and "root cause: rank" not in out["text"]
    assert "ranks 0-2 were ended by the launcher at the timeout (8 s)" in out["text"]
    bare = postmortem.postmortem(events, "j", summary=summary)            # no live diagnosis kept
    assert bare["root_causes"] == [] and "root cause:" not in bare["text"]
    # a rank that failed on its own before the timeout still is a root cause
    events.append({"type": "fail", "rank": 3, "t": 1.0, "reason": "uncaught ValueError: bad"})
    summary.append({"rank": 3, "state": "failed", "how": "uncaught ValueError: bad", "ended_by": None})
    out = postmortem.postmortem(events, "j", summary=summary, last_live=("diag-1.json", live))
    assert [rc["rank_list"] for rc in out["root_causes"]] == [[3]]


def test_postmortem_names_a_rank_that_left_early_not_the_survivor_that_saw_it():
    """Under ULFM a rank that exited counts as failed: rank 0's ProcFailedError names rank 3, which
    had ended with exit 0 before the barrier the others waited in."""
    events = [{"type": "fail", "rank": 0, "t": 2.0, "reason": "uncaught ProcFailedError",
               "saw_failure": {"op": "Barrier", "comm": "world", "ranks": [3], "site": "a.py:10 in <module>"}}]
    summary = [{"rank": 0, "state": "failed", "how": "uncaught ProcFailedError"},
               {"rank": 1, "state": "finished", "how": "exit 0", "exit_code": 0},
               {"rank": 3, "state": "finished", "how": "exit 0", "exit_code": 0}]
    out = postmortem.postmortem(events, "j", summary=summary)
    assert [(rc["kind"], rc["rank_list"]) for rc in out["root_causes"]] == [("finished", [3])]
    assert "ended (exit 0) while rank(s) 0 still communicated with it" in out["text"]
    assert out["consequences"]["0"]["blames"] == [3]


def test_ranks_the_mpi_runtime_ended_after_a_crash_are_consequences_and_the_crash_has_its_site():
    """Without ULFM mpiexec ends every rank with SIGTERM once one dies of SIGSEGV: the crashed rank is
    the root cause, at the site its fatal-error trace named (summary row ``site``)."""
    events = [{"type": "lost", "rank": 0, "t": 5.0, "reason": "killed by signal 15 (SIGTERM) (no report)"},
              {"type": "lost", "rank": 1, "t": 5.0, "reason": "killed by signal 11 (SIGSEGV) (no report)"},
              {"type": "lost", "rank": 2, "t": 5.5, "reason": "killed or crashed (no report)"}]
    summary = [{"rank": 1, "state": "lost", "site": "app.py:13 in <module>"}]
    out = postmortem.postmortem(events, "j", summary=summary)
    (root,) = out["root_causes"]
    assert root["rank_list"] == [1] and root["site"] == "app.py:13 in <module>" and "SIGSEGV" in root["reason"]
    assert "ranks 0,2 were ended by the MPI runtime (SIGTERM) after rank(s) 1 crashed" in out["text"]
    # without a crash, ranks ended by SIGTERM stay root causes (someone ended them)
    out = postmortem.postmortem(events[:1], "j")
    assert [c["rank_list"] for c in out["root_causes"]] == [[0]]
    # a rank taken down before its end was recorded is settled when mpiexec ends: a consequence too
    from planaria.launch.ranktable import LOST_REASON, UNSETTLED_REASON
    assert "killed or crashed" in LOST_REASON
    events[2] = {"type": "lost", "rank": 2, "t": 5.8, "reason": UNSETTLED_REASON}
    (root,) = postmortem.postmortem(events, "j", summary=summary)["root_causes"]
    assert root["rank_list"] == [1]


def test_ranks_the_mpi_library_crashed_while_creating_a_communicator_are_consequences_of_the_failure():
    """Open MPI 5.0 crashes a process that learns of a failure inside a communicator's creation
    (docs/recovery.md): the killed rank is the root cause, the crashed ones its consequences."""
    sig = "killed by signal 11 (SIGSEGV) (no report)"
    events = [{"type": "inject", "rank": 2, "kind": "kill", "detail": "injected random kill", "t": 0.1},
              {"type": "lost", "rank": 2, "t": 3.20, "reason": "killed by signal 9 (SIGKILL) (no report)"}]
    events += [{"type": "lost", "rank": r, "t": 3.22, "reason": sig} for r in (0, 1, 3)]
    summary = [{"rank": r, "state": "lost", "site": "driver.py:831 in _split", "in_call": "split"} for r in (0, 1, 3)]
    out = postmortem.postmortem(events, "j", summary=summary)
    (root,) = out["root_causes"]
    assert root["rank_list"] == [2] and "killed by injection" in root["reason"]
    assert out["text"].splitlines()[1].startswith("root cause: rank 2 killed by injection")
    assert out["library_crash"].startswith("ranks 0-1,3 crashed inside the MPI library (SIGSEGV in split) "
                                           "after rank(s) 2 had failed")
    assert out["library_crash"] in out["text"]
    assert {k: v["by"] for k, v in out["consequences"].items()} == {"0": "library crash", "1": "library crash",
                                                                     "3": "library crash"}
    # a crash in a call that creates no communicator, or with no other failure to explain it, stays a root cause
    for rows, evs in (([dict(row, in_call="allreduce") for row in summary], events),
                      (summary, events[2:])):
        out = postmortem.postmortem(evs, "j", summary=rows)
        assert [0, 1, 3] == sorted(r for rc in out["root_causes"] for r in rc["rank_list"] if r != 2)
        assert out["library_crash"] is None


def test_an_uncaught_oserror_from_an_injected_io_error_is_an_io_fault():
    events = [{"type": "inject", "rank": 1, "kind": "ioerror", "detail": "injected I/O errors from iteration 3 on 'x*'",
               "t": 1.0},
              {"type": "fail", "rank": 1, "reason": "uncaught OSError: [Errno 5] injected I/O error: 'x1'",
               "site": "app.py:16 in <module>", "t": 1.1}]
    (root,) = postmortem.postmortem(events, "j")["root_causes"]
    assert root["kind"] == "io-fault" and root["site"] == "app.py:16 in <module>" and "planaria --inject" in root["reason"]
    (root,) = postmortem.postmortem(events[1:], "j")["root_causes"]       # not planned: a failure like any other
    assert root["kind"] == "no-state"


def test_an_any_source_receive_that_took_the_awaited_ranks_message_is_the_source_mismatch():
    """Rank 0's ANY_SOURCE receive (a.py:16) took rank 1's message; its receive from rank 1 (a.py:17)
    waits while rank 2's message with the same tag is left: the wildcard receive is named, at once."""
    wild = {"took": 1, "tag": 4, "site": "a.py:16 in <module>"}
    op = dict(_recv(1, 0.3), site="a.py:17 in <module>", unmatched={"source": 2, "tag": 4, "bytes": 16, "wildcard": wild})
    coll = {"name": "Barrier", "kind": "coll", "comm": "world", "peer": None, "since": 1.0, "site": "a.py:22"}
    state = {"ranks": [_rec(0, op), _rec(1, coll), _rec(2, coll)]}
    (c,) = report.lost_messages(state)
    assert c["kind"] == "source-mismatch" and c["rank_list"] == [0] and c["site"] == "a.py:16 in <module>"
    assert "ANY_SOURCE receive at a.py:16 took rank 1's message" in c["reason"]
    state["ranks"][1]["op"] = dict(_recv(0, 0.3), name="Send")   # rank 1 may still send: wait longer first
    assert report.lost_messages(state) == []


def test_a_later_message_waiting_unmatched_after_a_lost_one_is_a_lost_message_not_a_tag_mismatch():
    """Rank 1 sent tags 0 and 1 to rank 2; tag 0 was dropped, tag 1 waits unmatched at rank 2, which
    waits for tag 0: rank 1 sent two more than rank 2 received, one is missing."""
    op = dict(_recv(1, 5.0), tag=0, unmatched={"source": 1, "tag": 1, "bytes": 8})
    state = {"ranks": [_rec(2, op, recvd={"1": 10}), _rec(1, None, sent={"2": 12})]}
    (c,) = report.lost_messages(state)
    assert c["kind"] == "lost-message", c
    state["ranks"][1]["sent"] = {"2": 11}          # only the one waiting there: the tags do not match
    (c,) = report.lost_messages(state)
    assert c["kind"] == "tag-mismatch", c


def test_another_ranks_early_message_beside_a_lost_one_is_a_lost_message_not_a_source_mismatch():
    """A halo exchange: rank 3 waits in Sendrecv for tag 1 from rank 2, which sent 41 messages to
    rank 3's 40 received; rank 4's tag-2 message, meant for rank 3's next receive, waits there
    unmatched, and none of rank 2's (the probe looks for those first): rank 2's message was lost."""
    op = dict(_recv(2, 5.0, name="Sendrecv"), unmatched={"source": 4, "tag": 2, "bytes": 8})
    state = {"ranks": [_rec(3, op, recvd={"2": 40}), _rec(2, _recv(3, 5.0, name="Sendrecv"), sent={"3": 41}),
                       _rec(4, None)]}
    (c,) = report.lost_messages(state)
    assert c["kind"] == "lost-message" and c["rank_list"] == [2, 3], c
    assert "a message from rank 2 to rank 3 was lost: rank 2 sent 41, rank 3 received 40" in c["reason"]
    state["ranks"][1]["sent"] = {"3": 40}          # everything rank 2 sent arrived: rank 4's is the mismatch
    (c,) = report.lost_messages(state)
    assert c["kind"] == "source-mismatch" and c["rank_list"] == [3, 4], c
