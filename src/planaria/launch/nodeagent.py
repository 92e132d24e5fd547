"""The node agent: one process per host that serves the ranks of that host for the controller.

Ranks' agents connect to it over the same agent channel they would use with the controller
(``planaria.events.channel``: a Unix stream socket, length-prefixed msgpack frames), so the
controller holds one connection per node instead of one per rank. What it does for them:

* heartbeats are answered here (``hbok``, while the controller is reachable) and sent up as one
  ``nhb`` {ranks, steps} message per interval: the ranks that beat since the last one, and their steps;
* every other message is forwarded up as-is inside ``fwd`` {l, p} (``l``: the rank's local
  connection number, ``p``: its packed message, which still carries its own token);
* the controller's ``to`` {l: [...], p} is written to those local connections, packed once per
  node (an event for the whole job is one message per node, not per rank);
* a connection that closes is reported up as ``gone`` {rank, pid, alive}, the pid looked at
  here, where it lives (the controller cannot look at a pid on another host);
* the controller's ``signal`` {l: [...], sig} (``planaria ctl``) is sent to those ranks' processes here;
* the controller's ``collect`` {id, l, rounds, interval, budget, hop} (a global diagnosis) is asked of
  those ranks and of the children node agents that hold the routes, and their parts come back
  merged as one ``npart`` {id, part} per node, the ranks that did not answer within the budget
  named missing: the collection tree is the control plane's own routes.

Upstream it speaks to the controller's agent channel when the controller listens on a Unix
socket, else to its ZeroMQ socket over TCP with CurveZMQ. It exits when the controller's end
closes (the job is over, or the launcher died): the ranks then see their channel close, as
they would see the controller's, and it removes what killed jobs left on its host (Open MPI's
shared-memory files and session directories). Run as ``python -m planaria.launch.nodeagent``; a
rank's agent starts it when the job asks for node agents (``planaria.runtime.nodelink``).
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from typing import Any

import msgpack
import zmq

from planaria.events import curve
from planaria.events.channel import FrameError, Reader, Writer, address_for, connect, frame
from planaria.diagnose.collect import merge_parts
from planaria.launch import protocol, sessiondirs, shmfiles
from planaria.launch.channels import ChannelServer, Peer
from planaria.launch.fdlimit import raise_open_files
from planaria.util.procstat import pid_alive
from planaria.util.env import PLANARIA_ORPHAN_TIMEOUT

BEAT = 0.5                 # seconds between the node's heartbeat summaries (a rank's heartbeat interval)
CONNECT_TIMEOUT = 10.0     # seconds to reach the controller at start
ORPHAN = 15.0              # seconds of the controller's silence over ZeroMQ after which the node agent ends


class Upstream:
    """The node agent's link to the controller: its agent channel, or its ZeroMQ socket over TCP."""

    def __init__(self, uri: str, secret: str, ctx: zmq.Context, parent: str | None = None) -> None:
        self.chan: Writer | None = None
        self.sock: zmq.Socket | None = None
        self._reader = Reader()
        path = parent or address_for(uri)          # a parent node agent's socket, or the controller's channel
        if path is not None:
            deadline = time.monotonic() + CONNECT_TIMEOUT
            s = connect(path)
            while s is None and time.monotonic() < deadline:
                time.sleep(0.05)
                s = connect(path)
            if s is None:
                raise OSError(f"nobody listening at {path}")
            self.chan = Writer(s)
        else:
            self.sock = ctx.socket(zmq.DEALER)
            self.sock.setsockopt(zmq.LINGER, 1000)
            self.sock.setsockopt(zmq.SNDHWM, 200000)
            self.sock.setsockopt(zmq.RCVHWM, 200000)
            curve.client(self.sock, secret, uri)
            self.sock.connect(uri)

    def pollable(self) -> Any:
        """What the poller watches: the channel's descriptor or the ZeroMQ socket."""
        return self.chan.sock.fileno() if self.chan is not None else self.sock

    def send(self, payload: bytes) -> bool:
        if self.chan is not None:
            return self.chan.write(frame(payload))
        assert self.sock is not None
        try:
            self.sock.send(payload, zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    def receive(self) -> list[bytes] | None:
        """The controller's messages now readable; None once its end has closed."""
        if self.chan is None:
            assert self.sock is not None
            out = []
            while True:
                try:
                    out.append(self.sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    return out
        out = []
        while True:
            try:
                data = self.chan.sock.recv(1 << 18)
            except (BlockingIOError, InterruptedError):
                return out
            except OSError:
                data = b""
            if not data:
                return None
            try:
                out.extend(self._reader.feed(data))
            except FrameError:
                return None
            if len(data) < 1 << 18:
                return out

    @property
    def pending(self) -> bool:
        return self.chan is not None and self.chan.pending

    def flush(self) -> None:
        if self.chan is not None:
            self.chan.flush()

    def close(self) -> None:
        if self.chan is not None:
            deadline = time.monotonic() + 1.0
            while not self.chan.broken and not self.chan.flush() and time.monotonic() < deadline:
                time.sleep(0.01)
            self.chan.close()
        if self.sock is not None:
            self.sock.close()


class Gathering:
    """One collection's answers awaited here: the local ranks' parts and the children's merged ones."""

    def __init__(self, ranks: dict[int, int], children: set[int], deadline: float) -> None:
        self.ranks = ranks                   # local number -> rank, still to answer
        self.children = children             # children node agents' local numbers, still to answer
        self.deadline = deadline
        self.parts: list[dict[str, Any]] = []

    def take(self, part: Any) -> None:
        if isinstance(part, dict):
            self.parts.append(part)

    def done(self, now: float) -> bool:
        return (not self.ranks and not self.children) or now >= self.deadline

    def result(self) -> dict[str, Any]:
        """The merged part, the local ranks that did not answer named missing (a silent child's
        ranks are absent: the controller names every rank it asked for and got nothing of)."""
        missing = sorted(self.ranks.values())
        return merge_parts(self.parts + ([{"missing": missing}] if missing else []))


class NodeAgent:
    """Serves the ranks of one host (``listen``: its Unix socket path) for the controller at ``uri``.

    With ``parent`` (another node agent's socket) it is a branch of the routed tree: it serves
    its children node agents like ranks, sends their heartbeat rows up with its own, forwards
    their messages under a route number of its own (``ROUTED`` and up) and the controller's
    ``to`` down to the children that hold the routes. Without one it is a child of the controller.
    """

    ROUTED = 1 << 24          # route numbers from here on name (child, its number); below, a local connection

    def __init__(self, listen: str, uri: str, secret: str, node: str | None = None, beat: float = BEAT,
                 parent: str | None = None, orphan: float = ORPHAN) -> None:
        self.listen = listen
        self.orphan = orphan
        self.uri = uri
        self.secret = secret
        self._tok = secret.encode("utf-8")
        self.node = node or socket.gethostname()
        self.beat = beat
        self.ranks: dict[int, tuple[int, int | None]] = {}    # local number -> (rank, pid)
        self._beats: dict[int, Any] = {}                     # local number -> step, since the last summary
        self._steps: dict[int, Any] = {}                     # local number -> the last step it said
        self.children: dict[int, str] = {}                   # local number of a child node agent -> its name
        self._routes: dict[int, tuple[int, int]] = {}        # route number -> (child's local number, its number)
        self._route_of: dict[tuple[int, int], int] = {}
        self._next_route = self.ROUTED
        self._child_rows: tuple[list[Any], list[Any]] = ([], [])   # children's heartbeat rows since the last summary
        self._hbok = frame(protocol.pack({"type": "hbok"}, secret))
        probe = connect(listen, timeout=0.5)
        if probe is not None:              # another node agent serves this node already
            probe.close()
            raise FileExistsError(f"a node agent already listens at {listen}")
        os.makedirs(os.path.dirname(listen) or ".", mode=0o700, exist_ok=True)
        self._ctx = zmq.Context()
        self.up = Upstream(uri, secret, self._ctx, parent)
        self.server = ChannelServer(listen)
        self.forwarded = 0
        self.refused = 0
        self._last_up = time.monotonic()           # when the controller last sent something
        self._gatherings: dict[str, Gathering] = {}    # collections under way, by id

    def _pack(self, msg: dict[str, Any]) -> bytes:
        return protocol.pack(msg, self.secret)

    def run(self) -> int:
        """Serve until the controller's end closes (over ZeroMQ, which has no end to see: until the
        controller has been silent for ``orphan`` seconds; it answers every summary); 0 then."""
        self.up.send(self._pack({"type": "node-hello", "node": self.node, "pid": os.getpid(),
                                 "listen": self.listen}))
        poller = zmq.Poller()
        poller.register(self.server.fileno(), zmq.POLLIN)
        up = self.up.pollable()
        poller.register(up, zmq.POLLIN)
        up_mask = zmq.POLLIN
        next_beat = time.monotonic() + self.beat
        try:
            while True:
                due = min([next_beat] + [g.deadline for g in self._gatherings.values()])
                timeout = max(0.0, due - time.monotonic())
                for what, flags in poller.poll(int(timeout * 1000) + 1):
                    if what == up or what is up:
                        if flags & zmq.POLLOUT:
                            self.up.flush()
                        if flags & zmq.POLLIN and not self._from_controller():
                            return 0
                    else:
                        self._from_ranks()
                want = zmq.POLLIN | zmq.POLLOUT if self.up.pending else zmq.POLLIN
                if want != up_mask:
                    up_mask = want
                    poller.register(up, want)
                now = time.monotonic()
                if self._gatherings:
                    self._settle(now)
                if now >= next_beat:
                    next_beat = now + self.beat
                    self._summary()
                    if self.up.sock is not None and now - self._last_up > self.orphan:
                        return 0                 # the controller is gone: the ranks see their channel close
        finally:
            self.server.close()
            self.up.close()
            self._ctx.term()
            clean_host()

    # -- ranks (and children) -> controller ------------------------------------------------------
    def _from_ranks(self) -> None:
        for peer, frames, why in self.server.ready():
            for payload in frames:
                if not self._from_rank(peer, payload):
                    self.server.close_peer(peer)
                    why = why or "refused"
                    break
            if why is not None:
                self._left(peer)

    def _from_rank(self, peer: Peer, payload: bytes) -> bool:
        msg, why = protocol.unpack(payload, self._tok)
        if why is not None or msg is None:
            self.refused += 1
            return False
        mtype = msg.get("type")
        if peer.fd in self.children or mtype == "node-hello":
            return self._from_child(peer, msg, payload)
        rank = msg.get("rank")
        if mtype == "hello" and isinstance(rank, int):
            self.ranks[peer.fd] = (rank, msg.get("pid") or peer.pid)
        if mtype == "hb" and msg.keys() <= protocol.PLAIN_HB and peer.fd in self.ranks:
            self._beats[peer.fd] = msg.get("step")
            self.server.send(peer, self._hbok)       # the controller is reachable: this loop ends when it is not
            return True
        if mtype == "part" and isinstance(msg.get("id"), str) and msg["id"] in self._gatherings:
            g = self._gatherings[msg["id"]]
            if g.ranks.pop(peer.fd, None) is not None:
                g.take(msg.get("part"))
            return True
        self.forwarded += 1
        self.up.send(self._pack({"type": "fwd", "l": peer.fd, "p": payload}))
        return True

    def _from_child(self, peer: Peer, msg: dict[str, Any], payload: bytes) -> bool:
        """A child node agent's message: its hello and gone go up as they are, its heartbeat rows
        with the next summary, its forwarded messages under a route number of this agent's."""
        mtype = msg.get("type")
        if mtype == "node-hello":
            self.children[peer.fd] = str(msg.get("node") or "?")
            self.up.send(payload)
        elif mtype == "npart" and isinstance(msg.get("id"), str) and msg["id"] in self._gatherings:
            g = self._gatherings[msg["id"]]
            if peer.fd in g.children:
                g.children.discard(peer.fd)
                g.take(msg.get("part"))
        elif mtype == "nhb":
            ranks, steps = msg.get("ranks"), msg.get("steps")
            if isinstance(ranks, list) and isinstance(steps, list) and len(ranks) == len(steps):
                self._child_rows[0].extend(ranks)
                self._child_rows[1].extend(steps)
        elif mtype in ("fwd", "gone") and isinstance(msg.get("l"), int):
            key = (peer.fd, msg["l"])
            route = self._route_of.get(key)
            if route is None:
                route = self._route_of[key] = self._next_route
                self._routes[route] = key
                self._next_route += 1
            if mtype == "gone":
                del self._route_of[key], self._routes[route]
            msg["l"] = route
            self.forwarded += 1
            self.up.send(self._pack(msg))
        return True

    def _left(self, peer: Peer) -> None:
        """A connection closed: a rank's (say which, and whether its process still lives) or a child's
        (its routes are dropped: its ranks fall silent and the controller's sweep settles them)."""
        for g in self._gatherings.values():          # a collection waits no more for it
            g.children.discard(peer.fd)
            if peer.fd in g.ranks:
                g.take({"missing": [g.ranks.pop(peer.fd)]})
        if self.children.pop(peer.fd, None) is not None:
            for key in [k for k in self._route_of if k[0] == peer.fd]:
                self._routes.pop(self._route_of.pop(key), None)
            return
        known = self.ranks.pop(peer.fd, None)
        self._beats.pop(peer.fd, None)
        self._steps.pop(peer.fd, None)
        if known is None:
            return
        rank, pid = known
        alive = pid_alive(int(pid)) if pid else None
        self.up.send(self._pack({"type": "gone", "rank": rank, "pid": pid, "alive": alive,
                                 "node": self.node, "l": peer.fd}))

    def _summary(self) -> None:
        """One heartbeat for the ranks that beat since the last one, and for those silent whose
        process still lives here (busy in a call that holds the interpreter: not lost), with their
        last step, plus the rows the children sent since; it is also the node's own heartbeat."""
        beats, self._beats = self._beats, {}
        ranks, steps = self._child_rows
        self._child_rows = ([], [])
        for lid, (rank, pid) in self.ranks.items():
            if lid in beats:
                self._steps[lid] = beats[lid]
            elif not (pid and pid_alive(int(pid))):
                continue
            ranks.append(rank)
            steps.append(self._steps.get(lid))
        self.up.send(self._pack({"type": "nhb", "node": self.node, "ranks": ranks, "steps": steps}))

    # -- controller -> ranks -----------------------------------------------------------------
    def _from_controller(self) -> bool:
        """Deliver what the controller sent; False once its end has closed."""
        msgs = self.up.receive()
        if msgs is None:
            return False
        if msgs:
            self._last_up = time.monotonic()
        for payload in msgs:
            try:
                msg = msgpack.unpackb(payload, raw=False)
            except Exception:  # noqa: BLE001 - the controller's end is trusted; a bad message is skipped
                continue
            if isinstance(msg, dict) and msg.get("type") in ("to", "signal"):
                self._down(msg)
            elif isinstance(msg, dict) and msg.get("type") == "collect":
                self._gather(msg)
        return True

    def _gather(self, msg: dict[str, Any]) -> None:
        """Start a collection: ask this host's ranks among ``l`` for their parts, and the children
        holding the other routes (with one hop less of budget) for their merged ones."""
        try:
            budget, hop = float(msg.get("budget", 1.0)), float(msg.get("hop", 1.0))
        except (TypeError, ValueError):
            return
        cid = msg.get("id")
        if not isinstance(cid, str):
            return
        ask = {"type": "collect", "id": cid, "rounds": msg.get("rounds", 1), "interval": msg.get("interval", 0.2)}
        local, down = self._split(msg.get("l") or ())
        g = Gathering({}, set(), time.monotonic() + max(budget - hop, 0.0))
        framed = frame(self._pack(dict(ask)))
        peers = self.server.peers
        for peer in local:
            rank = self.ranks.get(peer.fd, (None, None))[0]
            if rank is not None:
                g.ranks[peer.fd] = rank
                self.server.send(peer, framed)
        for child, lids in down.items():
            if child in peers:
                g.children.add(child)
                out = dict(ask, l=lids, budget=budget - hop, hop=hop)
                self.server.send(peers[child], frame(self._pack(out)))
        self._gatherings[cid] = g
        self._settle(time.monotonic())

    def _settle(self, now: float) -> None:
        """Send up every collection that is complete or out of time."""
        for cid, g in list(self._gatherings.items()):
            if g.done(now):
                del self._gatherings[cid]
                self.up.send(self._pack({"type": "npart", "id": cid, "node": self.node, "part": g.result()}))

    def _split(self, lids: Any) -> tuple[list[Peer], dict[int, list[int]]]:
        """The local connections among ``lids``, and the children's numbers of the routed ones, by child."""
        local: list[Peer] = []
        down: dict[int, list[int]] = {}
        peers = self.server.peers
        for lid in lids:
            if not isinstance(lid, int):
                continue
            if lid >= self.ROUTED:
                route = self._routes.get(lid)
                if route is not None:
                    down.setdefault(route[0], []).append(route[1])
            elif lid in peers:
                local.append(peers[lid])
        return local, down

    def _down(self, msg: dict[str, Any]) -> None:
        """``to`` {l, p}: ``p`` written to those ranks; ``signal`` {l, sig}: that signal sent to their
        processes (``planaria ctl`` for ranks on this host: the controller's pids may be another
        host's). Numbers of a child's routes go to that child, one message per child."""
        local, down = self._split(msg.get("l") or ())
        peers = self.server.peers
        if msg["type"] == "to":
            data = msg.get("p")
            if not isinstance(data, bytes):
                return
            if local:
                framed = frame(data)                  # framed once for every rank here
                for peer in local:
                    self.server.send(peer, framed)
        else:
            data = None
            sig = msg.get("sig")
            for peer in local:
                pid = self.ranks.get(peer.fd, (None, None))[1]
                if isinstance(sig, int) and pid:
                    try:
                        os.kill(int(pid), sig)
                    except OSError:
                        pass                          # already gone: its connection's end says so
        for child, lids in down.items():
            below = peers.get(child)
            if below is not None:
                out = {"type": msg["type"], "l": lids}
                out.update({"p": data} if msg["type"] == "to" else {"sig": msg.get("sig")})
                self.server.send(below, frame(self._pack(out)))


def clean_host() -> list[str]:
    """Remove what killed jobs of this user left on this host (the launcher does the same on its
    own): Open MPI's shared-memory files that no process maps and its session directories whose
    process is gone. Run when the node agent ends, after the job; returns what went."""
    gone = [str(p) for p in shmfiles.remove_orphaned()]
    gone += [str(p) for p in sessiondirs.remove_stale(sessiondirs.base_dir(dict(os.environ)))]
    if gone:
        print(f"nodeagent: removed {len(gone)} leftover(s) of killed jobs: {', '.join(gone[:10])}",
              file=sys.stderr, flush=True)
    return gone


def tree_parent(i: int, fanout: int) -> int | None:
    """The parent of node agent ``i`` in the routed tree of fan-out ``fanout`` (None: the controller).

    Agents 0..fanout-1 hang off the controller; agent j's children are fanout + j*fanout and the
    fanout-1 after it, so the depth grows with the logarithm of the node count. 0: no tree."""
    if fanout <= 0 or i < fanout:
        return None
    return (i - fanout) // fanout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m planaria.launch.nodeagent",
                                description="Serve this host's ranks for a planaria job's controller.")
    p.add_argument("--listen", required=True, help="Unix socket path the ranks connect to")
    p.add_argument("--uri", required=True, help="the controller's control URI")
    p.add_argument("--secret-file", required=True, help="the job's secret (0600 file in the job directory)")
    p.add_argument("--node", default=None, help="this node's name (default: the host name)")
    p.add_argument("--beat", type=float, default=BEAT, help="seconds between heartbeat summaries")
    p.add_argument("--parent", default=None, help="a parent node agent's socket (a branch of the routed tree)")
    try:                                        # the ranks' own bound, when the job sets one
        orphan = float(os.environ.get(PLANARIA_ORPHAN_TIMEOUT) or ORPHAN)
    except ValueError:
        orphan = ORPHAN
    p.add_argument("--orphan", type=float, default=orphan,
                   help="seconds of the controller's silence over TCP after which to end (as a rank's agent)")
    a = p.parse_args(argv)
    try:
        with open(a.secret_file, encoding="ascii") as fh:
            secret = fh.read().strip()
    except OSError as exc:
        print(f"nodeagent: cannot read the job secret: {exc}", file=sys.stderr)
        return 2
    raise_open_files()
    try:
        agent = NodeAgent(a.listen, a.uri, secret, a.node, a.beat, a.parent, a.orphan)
    except FileExistsError:
        return 0
    except zmq.ZMQError as exc:                 # a malformed controller address
        print(f"nodeagent: controller address {a.uri!r}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:                      # nobody there, or the socket cannot be made
        print(f"nodeagent: {exc}", file=sys.stderr)
        return 1
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
