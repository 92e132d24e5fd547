"""Controller-side relay pieces (failure merging, key-value store) and the tool helpers."""
from __future__ import annotations

import os
import time
import subprocess
import sys

import pytest

from planaria.events import codes
from planaria.launch.relay import FaultMerger, KVStore
from planaria.launch.toolclient import format_event, format_line, parse_kv, parse_ranks


def test_merger_one_event_per_burst_most_specific_code():
    m = FaultMerger(window=0.05)
    assert m.take(0.0) is None and not m.any_failure()
    assert m.add(3, "unreachable", 1.00, by=0)
    assert m.any_failure()                          # pending counts
    assert m.add(3, "signal", 1.01, signal=9)
    assert m.add(5, "exited", 1.02)
    assert m.take(1.04) is None                     # window still open
    ev = m.take(1.06)
    assert ev["affected"] == [3, 5] and ev["code"] == codes.PROC_ABORTED_BY_SIG
    assert [c["kind"] for c in ev["info"]["causes"]["3"]] == ["unreachable", "signal"]
    assert ev["info"]["signal"] == 9 and m.any_failure()     # announced counts
    assert not m.add(3, "exited", 2.0)              # already announced: merged away
    assert m.absorbed == 1 and m.take(5.0) is None
    assert m.add(7, "lost-connection", 3.0)
    ev = m.take(3.0, force=True)
    assert ev["code"] == codes.PROC_ABORTED and ev["affected"] == [7]
    with pytest.raises(ValueError):
        m.add(1, "weird", 0.0)


def test_merger_nature_precedence():
    for kinds, code in ((["exited"], codes.PROC_TERM_WO_SYNC), (["exited", "killed-by-cmd"], codes.PROC_KILLED_BY_CMD),
                        (["unreachable"], codes.PROC_ABORTED), (["aborted", "unreachable"], codes.PROC_ABORTED)):
        m = FaultMerger()
        for k in kinds:
            m.add(1, k, 0.0)
        assert m.take(1.0)["code"] == code


def test_kvstore_publish_lookup_wait():
    kv = KVStore()
    assert kv.publish({"a": 1}) == (["a"], None)
    stored, err = kv.publish({"a": 2, "b": 3})
    assert stored == [] and "already published: a" in err and "b" not in kv.data
    assert kv.publish({"a": 2}, replace=True) == (["a"], None)
    kv.wait(b"t1", "id1", ["a", "c"], deadline=10.0)
    kv.wait(b"t2", None, ["d"], deadline=5.0)
    assert kv.next_deadline() == 5.0
    assert kv.ready(1.0) == []
    kv.publish({"c": "x"})
    (ident, reply), = kv.ready(2.0)
    assert ident == b"t1" and reply == {"type": "lookup", "data": {"a": 2, "c": "x"}, "missing": [], "id": "id1"}
    (ident, reply), = kv.ready(6.0)
    assert ident == b"t2" and reply["missing"] == ["d"] and "id" not in reply


def test_parsers_and_formatting():
    assert parse_ranks("0,2-4, 7") == [0, 2, 3, 4, 7] and parse_ranks("all") is None and parse_ranks(None) is None
    for bad in ("x", "3-1", "-2"):
        with pytest.raises(ValueError):
            parse_ranks(bad)
    assert parse_kv(["a=1", "b=x", "c=[1,2]", "d=a=b"]) == {"a": 1, "b": "x", "c": [1, 2], "d": "a=b"}
    with pytest.raises(ValueError):
        parse_kv(["novalue"])
    rec = {"rank": 3, "channel": "stderr", "text": "a<b", "t": 0.5}
    assert format_line(rec) == "[3,stderr] a<b"
    assert format_line(rec, xml=True) == '<stderr rank="3">a&lt;b</stderr>'
    assert format_line(rec, timestamp=True).endswith(".500 [3,stderr] a<b")
    assert "PMIX_ERR_PROC_ABORTED from rm affected=[2]" in format_event({"id": 1, "code": -7, "source": None,
                                                                        "affected": [2]})
    # the origin events.jsonl records: rm (the controller), tool (planaria event) or a rank
    assert "PMIX_ERR_PROC_ABORTED from rm affected=[2]" in format_event({"id": 1, "code": -7, "source": None,
                                                                        "origin": "rm", "affected": [2]})
    u1 = codes.parse_code("USER+1")
    assert format_event({"id": 2, "code": u1, "source": None, "origin": "tool",
                         "info": {"a": 1}}) == '[event 2] USER+1 from tool {"a": 1}'
    assert " from rank 3 " in format_event({"id": 3, "code": u1, "source": 3, "origin": "rank"})
    assert 'origin="tool"' in format_event({"id": 2, "code": u1, "source": None, "origin": "tool"}, xml=True)


@pytest.mark.parametrize("args, msg", [
    (["ctl", "latest", "frobnicate"], "unknown action"),
    (["ctl", "latest", "signal", "--ranks", "1"], "needs --signal"),
    (["ctl", "latest", "kill", "--ranks", "x"], "bad rank list"),
    (["ctl", "latest", "signal", "--signal", "NOPE"], "unknown signal"),
    (["event", "latest", "PMIX_NOPE"], "unknown event code"),
    (["event", "latest", "USER+1", "--range", "local", "--ranks", "1"], "custom range"),
    (["publish", "latest", "novalue"], "bad key=value"),
    (["attach", "latest", "--channels", "stdin"], "bad --channels"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, msg):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANARIA_")}
    env["PLANARIA_HOME"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", *args], capture_output=True, text=True,
                         timeout=30, env=env)
    assert res.returncode == 2, res.stderr
    assert msg in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_cli_no_job_is_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANARIA_")}
    env["PLANARIA_HOME"] = str(tmp_path)
    res = subprocess.run([sys.executable, "-m", "planaria.cli.main", "ps"], capture_output=True, text=True,
                         timeout=30, env=env)
    assert res.returncode == 2 and "no job under" in res.stderr


@pytest.mark.timeout(20)
def test_a_long_wait_is_made_of_slices_each_answered_before_its_reply_timeout(monkeypatch):
    from planaria.events import local
    monkeypatch.setattr(local, "WAIT_SLICE", 0.2)
    kv, asked = KVStore(), []
    t0 = time.monotonic()

    def controller(msg, reply_timeout):         # answers like the controller: at its deadline or when there
        asked.append((msg["timeout"], reply_timeout))
        end = time.monotonic() + msg["timeout"]
        while time.monotonic() < end and not kv.lookup(msg["keys"]):
            if time.monotonic() - t0 > 0.7:
                kv.publish({"go": 7})
            time.sleep(0.01)
        return {"data": kv.lookup(msg["keys"])}
    assert local.wait_for_keys(controller, ["go"], None) == {"go": 7}
    assert len(asked) >= 3 and all(w <= 0.2 and r > w for w, r in asked)
    kv2 = KVStore()
    t1 = time.monotonic()
    assert local.wait_for_keys(lambda m, r: (time.sleep(m["timeout"]), {"data": kv2.lookup(m["keys"])})[1],
                               ["x"], 0.5) == {}
    assert 0.5 <= time.monotonic() - t1 < 1.0
    err = local.NotPublished(["go"], 2.5)
    assert isinstance(err, TimeoutError) and str(err) == "go not published within 2.5 s"
