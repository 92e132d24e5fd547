"""The node agent (``planaria.launch.nodeagent``) between the real controller and ranks' agent
channels: real processes and Unix sockets, ranks played by sockets speaking the agent's frames."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from planaria.events.channel import Reader, connect, frame
from planaria.launch.client import request
from planaria.launch import controller as controller_mod
from planaria.launch.controller import Controller
from planaria.launch.jobdir import JobDir
from planaria.launch.nodeagent import tree_parent

pytestmark = pytest.mark.timeout(60)


class Rank:
    """One simulated rank's agent channel to a node agent."""

    def __init__(self, path: str, secret: str, rank: int, pid: int) -> None:
        sock = connect(path)
        assert sock is not None, f"no node agent at {path}"
        self.sock, self.secret, self.rank, self.reader = sock, secret, rank, Reader()
        self.send({"type": "hello", "rank": rank, "size": 4, "pid": pid, "host": "h", "role": "initial",
                   "backend": "sim"})

    def send(self, msg: dict[str, Any]) -> None:
        msg.setdefault("tok", self.secret)
        self.sock.sendall(frame(msgpack.packb(msg)))

    def read(self, want: str, timeout: float = 5.0) -> dict[str, Any]:
        """The next message of type ``want`` (others before it skipped, those after it kept)."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        kept: list[bytes] = self.__dict__.setdefault("_kept", [])
        while time.monotonic() < deadline:
            if not kept:
                data = self.sock.recv(1 << 16)
                assert data, "the node agent closed the channel"
                kept.extend(self.reader.feed(data))
            while kept:
                msg = msgpack.unpackb(kept.pop(0), raw=False)
                if msg.get("type") == want:
                    return msg
        raise AssertionError(f"no {want} within {timeout} s")


def _agent(jd: JobDir, uri: str, name: str, parent: str | None = None,
           env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    path = str(jd.path / "nodes" / f"{name}.sock")
    via = ["--parent", parent] if parent else []
    proc = subprocess.Popen([sys.executable, "-m", "planaria.launch.nodeagent", "--listen", path, "--uri", uri,
                             "--secret-file", str(jd.secret_path), "--node", name, *via], env=env)
    deadline = time.monotonic() + 20
    while (s := connect(path, timeout=1.0)) is None:
        assert proc.poll() is None and time.monotonic() < deadline, "the node agent did not start"
        time.sleep(0.05)
    s.close()
    return proc, path


def dead_pid() -> int:
    """The pid of a process that has ended (the same one each call)."""
    global _DEAD
    if _DEAD is None:
        p = subprocess.Popen([sys.executable, "-c", "pass"])
        p.wait(timeout=30)
        _DEAD = p.pid
    return _DEAD


_DEAD: int | None = None


def _ps(jd: JobDir) -> dict[int, dict[str, Any]]:
    return {r["rank"]: r for r in request(jd, {"type": "ps"}, timeout=10)["ranks"]}


def _until(check: Any, timeout: float = 8.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_ranks_behind_node_agents_are_served_like_direct_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hello and heartbeats reach the rank table, summed up per node (rank 0's node agent talks to
    the controller, ranks 1 and 2's through it, as a branch of the tree), an event reaches every
    rank, a rank whose process died is lost at once, ``planaria ctl kill`` is carried out by the
    rank's node agent, a bad token is refused, and the node agents end with the controller."""
    # no loss by silence while the table is checked (rank 2's process is gone from the start, and a
    # loaded machine may take seconds between the steps); a short silence later, for ranks 0 and 1
    monkeypatch.setattr(controller_mod, "HEARTBEAT_SILENCE", 60.0)
    jd = JobDir.create(tmp_path)
    ctl = Controller(jd)
    uri = ctl.start()
    secret = jd.secret()
    agents = []
    try:
        top, top_path = _agent(jd, uri, "n0")
        agents.append(top)
        # what a killed job left on the leaf's host: removed when its node agent ends
        tmpdir = tmp_path / "tmp"
        (tmpdir / f"ompi.{dead_pid()}").mkdir(parents=True)
        shm = Path("/dev/shm") / f"sm_segment.{socket.gethostname()}.{os.getuid()}.{os.getpid()}77.0"
        shm.write_bytes(b"x")
        for p in (tmpdir / f"ompi.{dead_pid()}", shm):
            os.utime(p, (time.time() - 60, time.time() - 60))
        leaf, leaf_path = _agent(jd, uri, "n1", parent=top_path, env={**os.environ, "TMPDIR": str(tmpdir)})
        agents.append(leaf)
        ranks = [Rank(top_path, secret, 0, top.pid), Rank(leaf_path, secret, 1, top.pid),
                 Rank(leaf_path, secret, 2, dead_pid())]
        for step, r in enumerate(ranks):
            r.send({"type": "hb", "rank": r.rank, "step": 10 + step})
            assert r.read("hbok")["tok"] == secret
        rows = _until(lambda: (t := _ps(jd)) and all((t.get(i) or {}).get("step") == 10 + i for i in range(3)) and t)
        assert all(rows[i]["state"] == "running" for i in range(3)), rows
        assert set(ctl.nodes) == {"n0", "n1"}
        # ps for thousands of ranks: a few of them, or the counts only (the real command)
        cli = [sys.executable, "-m", "planaria.cli.main", "ps", str(jd.path), "--json"]
        some = json.loads(subprocess.run(cli + ["--ranks", "1-2"], capture_output=True, text=True, timeout=30,
                                         check=True).stdout)
        assert [r["rank"] for r in some["ranks"]] == [1, 2]
        summ = json.loads(subprocess.run(cli + ["--summary"], capture_output=True, text=True, timeout=30,
                                         check=True).stdout)
        assert summ["ranks"] == 3 and summ["states"] == {"running": 3} and summ["node_agents"] == 2
        assert (summ["step_min"], summ["step_max"]) == (10, 12)
        # an event for the whole job: one message per node agent, every rank gets it
        request(jd, {"type": "notify", "code": "USER+1", "range": None, "info": {"x": 1}, "affected": []}, timeout=10)
        for r in ranks:
            assert r.read("event")["event"]["info"] == {"x": 1}
        # a rank's connection closes and its process is gone: lost without waiting for silence
        t0 = time.monotonic()
        ranks[2].sock.close()
        row = _until(lambda: (_ps(jd).get(2) or {}).get("state") == "lost" and _ps(jd)[2])
        assert time.monotonic() - t0 < 5, "waited for the heartbeat silence instead"
        # ranks 0 and 1 send no more heartbeats, but their process (the node agent's pid) lives: not lost
        monkeypatch.setattr(controller_mod, "HEARTBEAT_SILENCE", 1.0)
        time.sleep(1.6)
        rows = _ps(jd)
        assert rows[0]["state"] == rows[1]["state"] == "running", rows
        # planaria ctl for a rank behind a branch: its node agent sends the signal on its host
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            extra = Rank(leaf_path, secret, 3, sleeper.pid)
            extra.send({"type": "hb", "rank": 3, "step": 1})
            extra.read("hbok")
            _until(lambda: 3 in _ps(jd))
            reply = request(jd, {"type": "ctl", "action": "kill", "ranks": [3], "signal": None}, timeout=10)
            assert reply["ranks"] == reply["by_node_agent"] == [3] and not reply["errors"], reply
            assert sleeper.wait(timeout=10) == -9
        finally:
            sleeper.kill()
        # a forged client is refused: its connection closed, nothing reaches the table
        bad = connect(leaf_path)
        assert bad is not None
        bad.sendall(frame(msgpack.packb({"type": "hello", "rank": 9, "pid": 1, "tok": "wrong"})))
        bad.settimeout(5)
        assert bad.recv(100) == b""
        bad.close()
        assert 9 not in _ps(jd)
        assert row["reason"]
    finally:
        ctl.stop()
    for a in agents:                  # the controller's end closed: every node agent ends
        assert a.wait(timeout=10) == 0
    assert not shm.exists() and not list(tmpdir.iterdir())


def test_the_tree_hangs_fanout_agents_off_the_controller_and_fanout_off_each() -> None:
    parents = [tree_parent(i, 3) for i in range(15)]
    assert parents[:3] == [None, None, None]
    assert parents[3:] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert all(tree_parent(i, 0) is None for i in range(5))


def test_over_tcp_the_node_agent_serves_and_ends_when_the_controller_falls_silent(tmp_path: Path) -> None:
    """A controller on TCP (CurveZMQ): the node agent's ranks reach the table; once the controller
    is gone (ZeroMQ shows no end), the node agent ends after its orphan bound."""
    jd = JobDir.create(tmp_path)
    ctl = Controller(jd, address="tcp://127.0.0.1:*")
    uri = ctl.start()
    path = str(jd.path / "nodes" / "t.sock")
    proc = subprocess.Popen([sys.executable, "-m", "planaria.launch.nodeagent", "--listen", path, "--uri", uri,
                             "--secret-file", str(jd.secret_path), "--node", "t", "--orphan", "1"])
    try:
        _until(lambda: connect(path, timeout=1.0) is not None, timeout=20)
        r = Rank(path, jd.secret(), 0, proc.pid)
        r.send({"type": "hb", "rank": 0, "step": 7})
        r.read("hbok")
        _until(lambda: (ctl.table().get(0) or {}).get("step") == 7)
        time.sleep(1.6)                      # longer than the orphan bound: the controller's answers keep it
        assert proc.poll() is None and ctl.table()[0]["state"] == "running"
        ctl.stop()
        assert proc.wait(timeout=15) == 0
    finally:
        ctl.stop()
        proc.kill()


def test_a_collection_through_the_node_agent_merges_its_ranks_parts_and_names_the_silent(tmp_path: Path) -> None:
    """The controller's ``collect`` reaches the node's ranks through their node agent; one ``npart``
    comes back with the parts of those that answered and the others named missing, once the budget
    (less one hop) is spent, or at once when a rank's connection closes."""
    from planaria.events.channel import SOCKET_NAME
    secret = "s" * 64
    (tmp_path / "secret").write_text(secret)
    uri = f"ipc://{tmp_path}/control.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / SOCKET_NAME))
    server.listen(4)
    listen = str(tmp_path / "nodes" / "n1.sock")
    proc = subprocess.Popen([sys.executable, "-m", "planaria.launch.nodeagent", "--listen", listen, "--uri", uri,
                             "--secret-file", str(tmp_path / "secret"), "--node", "n1"])
    try:
        server.settimeout(20)
        up, _ = server.accept()
        ctl = Rank.__new__(Rank)                     # the controller's end, read like a rank's
        ctl.sock, ctl.secret, ctl.reader = up, secret, Reader()
        assert ctl.read("node-hello", 20)["node"] == "n1"
        while (answering := connect(listen, timeout=1.0)) is None:
            time.sleep(0.05)
        answering.close()
        ranks = [Rank(listen, secret, r, os.getpid()) for r in range(3)]
        lid = {}
        while len(lid) < 3:
            fwd = ctl.read("fwd")
            lid[msgpack.unpackb(fwd["p"], raw=False)["rank"]] = fwd["l"]

        def collect(cid: str, budget: float) -> None:
            ctl.sock.sendall(frame(msgpack.packb({"type": "collect", "id": cid, "l": list(lid.values()), "rounds": 1,
                                                  "interval": 0.0, "budget": budget, "hop": 1.0, "tok": secret})))

        t0 = time.monotonic()
        collect("c1", 2.0)
        for r in ranks:
            assert r.read("collect")["id"] == "c1"
        ranks[0].send({"type": "part", "id": "c1", "rank": 0,
                       "part": {"stacks": [[["f.py", 1, "main"]]], "ranks": [{"rank": 0, "threads": [{"stack": 0}]}],
                                "missing": []}})
        got = ctl.read("npart", 5)
        assert got["id"] == "c1" and got["node"] == "n1"
        assert [rec["rank"] for rec in got["part"]["ranks"]] == [0]
        assert got["part"]["stacks"] == [[["f.py", 1, "main"]]]
        assert sorted(got["part"]["missing"]) == [1, 2]
        assert 0.9 <= time.monotonic() - t0 < 4.0        # waited out the budget less one hop for ranks 1 and 2
        t0 = time.monotonic()
        collect("c2", 30.0)
        assert ranks[1].read("collect")["id"] == "c2"    # the node agent waits for c2's answers now
        ranks[1].send({"type": "part", "id": "c2", "rank": 1, "part": {"stacks": [], "ranks": [{"rank": 1}]}})
        ranks[2].sock.close()                          # rank 2 ends: not waited for
        ranks[0].sock.close()
        got = ctl.read("npart", 10)
        assert got["id"] == "c2" and [rec["rank"] for rec in got["part"]["ranks"]] == [1]
        assert sorted(got["part"]["missing"]) == [0, 2]
        assert time.monotonic() - t0 < 5.0
    finally:
        proc.kill()
        proc.wait(timeout=10)
        server.close()
