"""The agent channel: framing, non-blocking ordered writes, and a controller and an agent
talking over it in this process (real Unix sockets), including refusals of a client without
the job secret."""
from __future__ import annotations

import os
import socket
import threading
import time

import msgpack
import pytest

from planaria.events.channel import HEADER, MAX_FRAME, FrameError, Reader, Writer, address_for, frame


def test_reader_reassembles_frames_split_anywhere():
    payloads = [b"", b"a", b"x" * 70000, msgpack.packb({"type": "hb", "rank": 3})]
    stream = b"".join(frame(p) for p in payloads)
    for step in (1, 3, 4096, len(stream)):
        r = Reader()
        got = []
        for i in range(0, len(stream), step):
            got.extend(r.feed(stream[i:i + step]))
        assert got == payloads
    with pytest.raises(FrameError):
        Reader().feed(HEADER.pack(MAX_FRAME + 1))


def test_writer_keeps_order_queues_when_the_peer_does_not_read_and_drops_whole_frames():
    a, b = socket.socketpair()
    try:
        w = Writer(a, limit=1 << 20)
        sent = [frame(b"%06d" % i + b"." * 2000) for i in range(3000)]      # about 6 MB: more than the socket holds
        ok = [w.write(f) for f in sent]
        assert w.pending and w.dropped == ok.count(False) > 0
        kept = [f for f, k in zip(sent, ok, strict=True) if k]
        r, got = Reader(), []
        b.settimeout(5)
        while len(got) < len(kept):
            w.flush()
            got.extend(r.feed(b.recv(1 << 16)))
        assert got == [f[HEADER.size:] for f in kept]      # complete frames, in order
        assert w.flush() and not w.pending
        w.close()
        assert w.write(frame(b"late")) is False
    finally:
        b.close()


@pytest.fixture()
def controller(tmp_path):
    from planaria.launch.controller import Controller
    from planaria.launch.jobdir import JobDir

    jd = JobDir.create(tmp_path)
    ctl = Controller(jd)
    ctl.start()
    yield ctl
    ctl.stop()


@pytest.mark.timeout(30)
def test_agent_talks_to_the_controller_over_its_channel(controller):
    import planaria.events as ev
    from planaria.launch.channels import Peer
    from planaria.runtime.agent import Agent

    got: list = []
    seen = threading.Event()

    def handler(e, results):
        got.append((e.code, e.info.get("n")))
        seen.set()
        return ev.COMPLETE
    hid = ev.register(ev.user_code(77), handler, name="channel-test")
    agent = Agent(controller.uri, controller.jobdir.secret(), rank=2, size=3, heartbeat=0.05)
    try:
        assert agent._chan is not None
        assert agent.report("inject", wait=True, timeout=5, kind="kill", detail="x")
        assert isinstance(controller.idents[2], Peer)
        deadline = time.time() + 5
        while time.time() < deadline and controller.table()[2]["state"] != "running":
            time.sleep(0.02)
        controller.notify(ev.user_code(77), {"n": 1})
        assert seen.wait(5) and got == [(ev.user_code(77), 1)]
        assert agent.request({"type": "publish", "data": {"k": 5}}, 5)["stored"] == ["k"]
        assert agent.request({"type": "lookup", "keys": ["k"]}, 5)["data"] == {"k": 5}
        assert agent.report("bye", wait=True, timeout=5, code=0)
        assert controller.table()[2]["state"] == "finished"
    finally:
        agent.close()
        ev.deregister(hid)
    types = [e["type"] for e in controller.jobdir.events()]
    assert types[:2] == ["hello", "inject"] and "bye" in types


@pytest.mark.timeout(30)
def test_the_answer_to_a_bye_says_whether_the_job_had_a_failed_rank(controller):
    """A rank that never talked to a failed one learns of the failure here (its MPI_Finalize then gets 3 s, not 10)."""
    from planaria.runtime.agent import Agent

    agents = [Agent(controller.uri, controller.jobdir.secret(), rank=r, size=3, heartbeat=0.05) for r in range(3)]
    try:
        first = agents[0].request({"type": "bye", "code": 0, "step": 1}, 5)
        assert first is not None and first["failures"] is False
        assert agents[1].report("fail", wait=True, timeout=5, reason="test failure")
        later = agents[2].request({"type": "bye", "code": 0, "step": 1}, 5)
        assert later is not None and later["failures"] is True
        assert controller.table()[2]["state"] == "finished"
    finally:
        for a in agents:
            a.close()


def _frame_msg(msg: dict) -> bytes:
    return frame(msgpack.packb(msg, use_bin_type=True))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("data, why", [
    (_frame_msg({"type": "hello", "rank": 9, "tok": "wrong"}), "bad token"),
    (_frame_msg({"type": "hello", "rank": 9}), "no token"),
    (frame(b"\xc1garbage"), "undecodable"),
    (HEADER.pack(MAX_FRAME + 1), "bad frame"),
])
def test_channel_refuses_a_client_without_the_secret(controller, data, why):
    path = address_for(controller.uri)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(path)
        s.sendall(data)
        assert s.recv(100) == b""                      # no answer: the connection is closed
    finally:
        s.close()
    deadline = time.time() + 5
    refused: list = []
    while time.time() < deadline and not refused:
        refused = [e for e in controller.jobdir.events() if e["type"] == "refused"]
        time.sleep(0.02)
    assert refused and refused[0]["why"].startswith(why)
    assert refused[0]["peer"].startswith("agent channel (pid ")
    assert 9 not in controller.table()


@pytest.mark.timeout(30)
def test_a_knock_for_a_rank_not_yet_known_is_delivered_when_it_arrives(controller):
    """A knock sent before the target's agent said hello, and before its service exists, still wakes it."""
    from planaria.runtime.agent import Agent

    sender = Agent(controller.uri, controller.jobdir.secret(), rank=0, size=2, heartbeat=0.05)
    target = None
    try:
        sender.report("knock", ranks=[1])
        deadline = time.time() + 5
        while time.time() < deadline and 1 not in controller._unknocked:
            time.sleep(0.01)
        assert 1 not in controller.idents and 1 in controller._unknocked
        target = Agent(controller.uri, controller.jobdir.secret(), rank=1, size=2, heartbeat=0.05)
        deadline = time.time() + 5
        while time.time() < deadline and not target._knock_early:
            time.sleep(0.01)
        woken = threading.Event()
        target.on_knock = woken.set                # the service comes up after the knock arrived
        assert woken.is_set() and 1 not in controller._unknocked
        again = threading.Event()
        target.on_knock = again.set
        sender.report("knock", ranks=[1])          # known now: delivered straight away
        assert again.wait(5)
    finally:
        sender.close()
        if target is not None:
            target.close()


@pytest.mark.timeout(30)
def test_a_wake_for_a_spare_still_setting_up_is_in_its_pipe_when_it_makes_it(controller):
    """A recovery's wake that reaches a spare's agent before the spare made its wake pipe is not
    lost: the pipe starts readable (the spare's first sleep ends at once)."""
    import select

    from planaria.runtime.agent import Agent

    spare = Agent(controller.uri, controller.jobdir.secret(), rank=1, size=2, role="spare", heartbeat=0.05)
    worker = Agent(controller.uri, controller.jobdir.secret(), rank=0, size=2, heartbeat=0.05)
    try:
        deadline = time.time() + 5
        while time.time() < deadline and controller.table().get(1, {}).get("role") != "spare":
            time.sleep(0.01)
        worker.report("wake-spares")
        while time.time() < deadline and not spare._wake_early:
            time.sleep(0.01)
        fd = spare.spare_wake_fd()
        assert select.select([fd], [], [], 0)[0] == [fd]
        assert os.read(fd, 16) == b"w"
        assert select.select([fd], [], [], 0)[0] == []
        worker.report("wake-spares")                 # the pipe exists now: written straight away
        assert select.select([fd], [], [], 5)[0] == [fd]
        assert os.read(fd, 16) == b"w"
        worker.report("wake-spares", warm=True)      # only a footprint: the byte says so
        assert select.select([fd], [], [], 5)[0] == [fd]
        assert os.read(fd, 16) == b"m"
    finally:
        worker.close()
        spare.close()


@pytest.mark.timeout(30)
def test_a_knock_for_a_rank_that_has_ended_is_answered_gone(controller):
    """A service writing to a rank that said goodbye learns it from the controller (to analyse
    the records it sent there itself); a running rank is knocked as before, with no answer."""
    from planaria.runtime.agent import Agent

    sender = Agent(controller.uri, controller.jobdir.secret(), rank=0, size=3, heartbeat=0.05)
    done = Agent(controller.uri, controller.jobdir.secret(), rank=1, size=3, heartbeat=0.05)
    running = Agent(controller.uri, controller.jobdir.secret(), rank=2, size=3, heartbeat=0.05)
    told: list[list[int]] = []
    got = threading.Event()
    sender.on_gone = lambda ranks: (told.append(ranks), got.set())
    try:
        assert done.report("bye", wait=True, timeout=5, code=0)
        sender.report("knock", ranks=[1, 2])
        assert got.wait(5) and told == [[1]]
        got.clear()
        sender.report("knock", ranks=[2])
        assert not got.wait(0.5)
    finally:
        for a in (sender, done, running):
            a.close()


@pytest.mark.timeout(30)
def test_an_event_raised_before_a_rank_said_hello_reaches_it_on_its_hello(controller):
    """Session-range events raised while one agent is still connecting reach it on its hello, in
    order; a controller-only (RM) one does not, and the rank already there is not sent them twice
    (both agents live in this process, so one handler sees what either receives)."""
    import planaria.events as ev
    from planaria.events.ranges import RM
    from planaria.runtime.agent import Agent

    got: list = []
    lock = threading.Lock()

    def handler(e, results):
        with lock:
            got.append((e.code, e.info.get("n")))
        return ev.COMPLETE

    def until(n: int) -> list:
        deadline = time.time() + 5
        while time.time() < deadline and len(got) < n:
            time.sleep(0.02)
        time.sleep(0.3)                            # (a copy too many would arrive by now)
        with lock:
            out = list(got)
            got.clear()
        return out
    want = [(ev.user_code(80), 1), (ev.user_code(82), 3)]
    hid = ev.register([ev.user_code(80), ev.user_code(81), ev.user_code(82)], handler, name="early-test")
    first = Agent(controller.uri, controller.jobdir.secret(), rank=0, size=2, heartbeat=0.05)
    late = None
    try:
        deadline = time.time() + 5
        while time.time() < deadline and controller.table().get(0, {}).get("state") != "running":
            time.sleep(0.02)
        controller.notify(ev.user_code(80), {"n": 1})
        controller.notify(ev.user_code(81), {"n": 2}, range_kind=RM)
        controller.notify(ev.user_code(82), {"n": 3})
        assert until(2) == want                    # rank 0, there already
        late = Agent(controller.uri, controller.jobdir.secret(), rank=1, size=2, heartbeat=0.05)
        assert until(2) == want                    # rank 1, on its hello; rank 0 not again
    finally:
        first.close()
        if late is not None:
            late.close()
        ev.deregister(hid)


@pytest.mark.timeout(30)
def test_a_rank_on_a_channel_is_collected_over_it_without_zeromq(controller):
    # no collection-tree socket (ZeroMQ stays out of a one-host rank's start): diagnose asks over the channel
    from planaria.runtime.agent import Agent

    agent = Agent(controller.uri, controller.jobdir.secret(), rank=0, size=1, heartbeat=0.05)
    try:
        assert agent._tree is None and agent.endpoint is None and agent._ctx is None
        deadline = time.time() + 5
        while time.time() < deadline and controller.table().get(0, {}).get("state") != "running":
            time.sleep(0.02)
        report = controller.diagnose(hop=1.0, rounds=1)["report"]
        coll = report["collect"]
        assert coll["behind_nodes"] == 1 and coll["nodes"]["answered"] == 1, coll
        assert report["answered"] == 1 and not report["missing"], report["text"]
    finally:
        agent.close()


@pytest.mark.timeout(30)
def test_agents_that_start_before_the_controller_wait_in_its_listener(tmp_path):
    """``planaria run`` starts mpiexec before the controller: the agent channel's listener is bound
    first (``launch.address``), an agent connects and says hello, and the controller, started
    afterwards on that listener, reads the hello and answers it."""
    from planaria.launch.address import default_address, early_listener
    from planaria.launch.controller import Controller
    from planaria.launch.jobdir import JobDir
    from planaria.runtime.agent import Agent

    jd = JobDir.create(tmp_path)
    uri = default_address(jd)
    listener = early_listener(uri)
    assert listener is not None
    agent = Agent(uri, jd.secret(), 3, 4, backend="sim", heartbeat=0.2)   # before any controller
    try:
        assert agent._chan is not None                     # on the channel, not ZeroMQ
        ctl = Controller(jd, uri, listener=listener)
        try:
            assert ctl.start() == uri
            deadline = time.monotonic() + 10
            while 3 not in ctl.table() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert ctl.table()[3]["pid"] == os.getpid()
            assert agent.report("note", wait=True, timeout=5.0)      # and it answers
        finally:
            ctl.stop()
    finally:
        agent.close()
