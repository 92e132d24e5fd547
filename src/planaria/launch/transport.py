"""The controller's sockets: its ZeroMQ ROUTER (tools, and agents with a TCP control address;
CurveZMQ on TCP, its refused handshakes counted by ``tcpguard``), the agent channels
(``planaria.launch.channels``: a Unix stream socket next to the control socket, length-prefixed
frames) when it listens on a Unix socket, and the way to each rank's agent.

A destination (``Dest``) is a ZeroMQ peer identity, an agent channel (``Peer``), or a rank behind
a node agent (``Routed``: reached with a ``to`` message through the node's connection). Messages
that fail their check are refused: the peer is named in the job record (at most
``MAX_REFUSED_LOGGED`` times). Everything here runs in the controller's server thread.
"""
from __future__ import annotations

import _socket
import os
import time
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import zmq

from planaria.events import curve
from planaria.events.channel import address_for, frame
from planaria.launch import protocol, tcpguard
from planaria.launch.address import default_address as default_address  # kept importable from here
from planaria.launch.channels import ACCEPT_PAUSE, ChannelServer, Peer
from planaria.launch.eventlog import EventLog

MAX_REFUSED_LOGGED = 1000


class Routed(NamedTuple):
    """A rank reached through its node agent (``planaria.launch.nodeagent``): the node's
    connection and the rank's local connection number there."""

    node: bytes | Peer
    lid: int


Dest = bytes | Peer | Routed              # a ZeroMQ peer identity, an agent channel, or a rank behind a node agent


def label(dest: Dest) -> str:
    """How a refusal names the peer: an agent channel, a ZeroMQ identity, or a rank behind a node agent."""
    if isinstance(dest, Routed):
        return f"via node agent ({label(dest.node)}), connection {dest.lid}"
    return dest.label if isinstance(dest, Peer) else dest.hex()


# what reads one received message: the peer, the packed message; False when it was refused
Handler = Callable[[Dest, bytes], bool]


class Transport:
    """The controller's ROUTER socket and agent channels: made, read, written to and closed."""

    def __init__(self, requested: str, secret: str, log: EventLog, listener: _socket.socket | None = None) -> None:
        self.requested = requested
        self.listener = listener          # the agent channel's listener, bound before (``launch.address``)
        self._tok = secret
        self.log = log
        self.uri: str | None = None
        self.ctx: zmq.Context | None = None
        self.sock: zmq.Socket | None = None
        self.monitor: zmq.Socket | None = None
        self.guard: tcpguard.HandshakeGuard | None = None   # refused TCP connections (CurveZMQ)
        self.channels: ChannelServer | None = None
        self.chan_fd = -1
        self.idents: dict[int, Dest] = {}                 # rank -> where its agent is reached
        self.refused = 0
        self.open_files = (0, 0)                          # the open-file limit (for the record)
        self._exhausted_seen = 0

    # --- making and closing --------------------------------------------
    def prepare(self) -> None:
        """Make the ROUTER socket (CurveZMQ and a handshake monitor for a TCP address)."""
        ctx = self.ctx = zmq.Context()
        sock = self.sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 200000)     # a ROUTER drops what exceeds it: bursts of events
        sock.setsockopt(zmq.RCVHWM, 200000)
        if curve.is_tcp(self.requested):         # other hosts: CurveZMQ, refusals watched
            curve.serve(sock, self._tok)
            self.monitor = sock.get_monitor_socket(tcpguard.EVENTS)
            self.guard = tcpguard.HandshakeGuard("tcp control socket")

    def bind(self) -> str:
        """Bind the ROUTER (zmq.ZMQError when it cannot), then open the agent channels next to a
        Unix socket (without them agents use the ROUTER for everything); the bound URI."""
        assert self.sock is not None
        self.sock.bind(self.requested)
        uri = self.uri = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if uri.startswith("ipc://"):
            try:
                os.chmod(uri[len("ipc://"):], 0o600)
            except OSError:
                pass
        path = address_for(uri)
        if path is not None:
            listener, self.listener = self.listener, None
            try:
                self.channels = ChannelServer(path, listener)
            except OSError:               # agents then use the ZeroMQ socket for everything
                self.channels = None
        return uri

    def watch(self, poller: zmq.Poller, wake_fd: int) -> None:
        """Register what the server loop polls: the ROUTER, ``wake_fd``, the agent channels, the monitor."""
        assert self.sock is not None
        poller.register(self.sock, zmq.POLLIN)
        poller.register(wake_fd, zmq.POLLIN)
        if self.channels is not None:
            self.chan_fd = self.channels.fileno()
            poller.register(self.chan_fd, zmq.POLLIN)
        if self.monitor is not None:
            poller.register(self.monitor, zmq.POLLIN)

    def close(self, linger: int | None = None) -> None:
        """Close the agent channels and the sockets (``linger`` ms for the last messages to leave)."""
        if self.channels is not None:
            self.channels.close()
        if self.listener is not None:     # never taken over (the ROUTER could not bind)
            self.listener.close()
            self.listener = None
        if self.monitor is not None:
            assert self.sock is not None
            self.sock.disable_monitor()
            self.monitor.close(0)
        if self.sock is not None:
            self.sock.close(linger)
        if self.ctx is not None:
            self.ctx.term()

    # --- reading -------------------------------------------------------
    def read(self, what: Any, handle: Handler) -> bool:
        """Read what a polled socket of this transport has (``handle`` each message); False when
        ``what`` is not one of them."""
        if what == self.chan_fd:
            self._read_channels(handle)
        elif what is self.monitor:
            self._read_monitor()
        elif what is self.sock:
            self._read_router(handle)
        else:
            return False
        return True

    def _read_router(self, handle: Handler) -> None:
        """The messages waiting on the ROUTER."""
        sock = self.sock
        assert sock is not None
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            handle(frames[0], frames[-1])
            if not cast(int, sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                break

    def _read_monitor(self) -> None:
        """Connection events of the TCP socket: refused handshakes are counted (``tcpguard``)."""
        # imported here: zmq.utils.monitor pulls in asyncio, 14 ms of every launch without TCP
        from zmq.utils.monitor import recv_monitor_message
        assert self.monitor is not None and self.guard is not None
        while self.monitor.poll(0):
            self.guard.feed(dict(recv_monitor_message(self.monitor, zmq.NOBLOCK)))
        self.log.extend(self.guard.due())

    def _read_channels(self, handle: Handler) -> None:
        """Messages from agents on their channels; a refused or broken connection is closed."""
        assert self.channels is not None
        for peer, frames, why in self.channels.ready():
            for payload in frames:
                if not handle(peer, payload):
                    self.channels.close_peer(peer)
                    break
            if why is not None and why != "closed" and not why.startswith("connection error"):
                self.refuse(peer, f"bad frame: {why}")         # an oversized frame
        if self.channels.exhausted > self._exhausted_seen:
            self._exhausted_seen = self.channels.exhausted
            self.log.add({"type": "controller-error", "t": time.time(),
                          "error": f"out of descriptors accepting agent connections: "
                                   f"{self.channels.last_error}; accepting again in {ACCEPT_PAUSE:g} s "
                                   f"(open-file limit {self.open_files[1]})"})

    def resume_accepting(self) -> None:
        """Watch the agent channels' listener again if it rested (out of descriptors)."""
        if self.channels is not None:
            self.channels.resume()

    def refusals_due(self, final: bool = False) -> list[dict[str, Any]]:
        """The refused TCP handshakes due for the job record (all counted so far when ``final``)."""
        if self.guard is None:
            return []
        return self.guard.flush() if final else self.guard.due()

    def refuse(self, dest: Dest, why: str, mtype: Any = None) -> None:
        """A message that failed its check: counted, and named in the job record."""
        self.refused += 1
        if self.refused <= MAX_REFUSED_LOGGED:
            self.log.write({"type": "refused", "t": time.time(), "peer": label(dest),
                            "why": why, "msg_type": mtype})

    # --- writing -------------------------------------------------------
    def send_packed(self, dest: Dest, payload: bytes, framed: bytes | None = None) -> bool:
        """Send a packed message to a ZeroMQ peer, down an agent channel (``framed``: already
        framed) or through a node agent; False when it could not be sent."""
        if isinstance(dest, Routed):
            return self.send_packed(dest.node, self.to_node([dest.lid], payload))
        if isinstance(dest, Peer):
            assert self.channels is not None
            return self.channels.send(dest, framed if framed is not None else frame(payload))
        assert self.sock is not None
        try:
            self.sock.send_multipart([dest, payload], zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    def reply(self, dest: Dest, msg: dict[str, Any]) -> None:
        """Pack ``msg`` (with the job secret) and send it to ``dest``."""
        self.send_packed(dest, protocol.pack(msg, self._tok))

    def to_node(self, lids: list[int], payload: bytes) -> bytes:
        """A node agent's ``to``: ``payload`` (packed once) for its ranks at ``lids``."""
        return protocol.pack({"type": "to", "l": lids, "p": payload}, self._tok)
