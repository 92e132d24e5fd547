"""The controller's end of the agent channels (``planaria.events.channel``): a Unix stream
listener next to the control socket and one connection per agent, watched through one epoll
set that the controller's loop polls next to its ZeroMQ socket.

Out of descriptors (EMFILE, ENFILE), the listener stops being watched for ``ACCEPT_PAUSE``
seconds: the connections wait in its backlog (their agents' frames in the socket buffers) and are
accepted once descriptors are free again, instead of the loop spinning on a listener that stays
readable. ``exhausted`` counts such pauses, for the controller to record.
"""
from __future__ import annotations

import errno
import os
import _socket
import select
import socket
import time
from collections.abc import Iterator

from planaria.events.channel import FrameError, Reader, Writer, peer_pid
from planaria.launch.address import listen_unix

_IN = select.EPOLLIN | select.EPOLLRDHUP
_RECV = 1 << 18
ACCEPT_PAUSE = 0.5          # seconds the listener rests after running out of descriptors
_NO_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Peer:
    """One agent's connection: its reader and its writer."""

    __slots__ = ("sock", "fd", "reader", "writer", "pid", "watching_out")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.reader = Reader()
        self.writer = Writer(sock)
        self.pid = peer_pid(sock)
        self.watching_out = False

    @property
    def label(self) -> str:
        """How refusals name this peer in the job record."""
        return f"agent channel (pid {self.pid})" if self.pid else "agent channel"


class ChannelServer:
    """Accepts agent connections on ``path`` (mode 0600) and moves their frames."""

    def __init__(self, path: str, listener: _socket.socket | None = None) -> None:
        self.path = path
        # ``listener``: bound already (``planaria.launch.address``), its connections waiting
        raw = listener if listener is not None else listen_unix(path)
        self.listener = raw if isinstance(raw, socket.socket) else socket.socket(fileno=raw.detach())
        self.listener.setblocking(False)
        self.peers: dict[int, Peer] = {}
        self.ep = select.epoll()
        self.ep.register(self.listener.fileno(), select.EPOLLIN)
        self.exhausted = 0                   # times accepting stopped for want of descriptors
        self.last_error = ""
        self._paused_until = 0.0

    def fileno(self) -> int:
        """The epoll descriptor: readable when a connection, a frame or buffer space is waiting."""
        return self.ep.fileno()

    def ready(self) -> Iterator[tuple[Peer, list[bytes], str | None]]:
        """Accept new agents, send backlogs the sockets now take, and yield what peers sent:
        (peer, frames, None), or (peer, frames read before it, why) for a peer now closed."""
        self.resume()
        for fd, mask in self.ep.poll(0):
            if fd == self.listener.fileno():
                self._accept()
                continue
            peer = self.peers.get(fd)
            if peer is None:
                continue
            if mask & select.EPOLLOUT and peer.writer.flush():
                self._watch_out(peer, False)
            if mask & (select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR):
                frames, why = self._read(peer)
                if why is not None:
                    self.close_peer(peer)
                if frames or why is not None:
                    yield peer, frames, why

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _NO_FDS:
                    self._pause(exc)
                return
            try:
                peer = Peer(sock)
                self.ep.register(peer.fd, _IN)
            except OSError as exc:        # no room for its epoll entry or credentials: try again later
                sock.close()
                self._pause(exc)
                return
            self.peers[peer.fd] = peer

    def _pause(self, exc: OSError) -> None:
        """Stop watching the listener for ``ACCEPT_PAUSE`` seconds (``resume`` watches it again)."""
        if self._paused_until:
            return
        self.exhausted += 1
        self.last_error = f"{exc.strerror or exc} ({len(self.peers)} agent connections open)"
        self._paused_until = time.monotonic() + ACCEPT_PAUSE
        try:
            self.ep.unregister(self.listener.fileno())
        except (OSError, ValueError):
            pass

    def resume(self) -> None:
        """Watch the listener again once its pause is over (called before every poll)."""
        if self._paused_until and time.monotonic() >= self._paused_until:
            self._paused_until = 0.0
            try:
                self.ep.register(self.listener.fileno(), select.EPOLLIN)
            except (OSError, ValueError):
                pass

    @property
    def paused(self) -> bool:
        """Accepting is paused for want of descriptors."""
        return bool(self._paused_until)

    def _read(self, peer: Peer) -> tuple[list[bytes], str | None]:
        frames: list[bytes] = []
        while True:
            try:
                data = peer.sock.recv(_RECV)
            except (BlockingIOError, InterruptedError):
                return frames, None
            except OSError as exc:
                return frames, f"connection error: {exc.strerror or exc}"
            if not data:
                return frames, "closed"
            try:
                frames.extend(peer.reader.feed(data))
            except FrameError as exc:
                return frames, str(exc)
            if len(data) < _RECV:
                return frames, None

    def send(self, peer: Peer, data: bytes) -> bool:
        """Queue one frame to ``peer`` without blocking; False when it was dropped."""
        ok = peer.writer.write(data)
        if peer.writer.pending and not peer.watching_out:
            self._watch_out(peer, True)
        return ok

    def _watch_out(self, peer: Peer, on: bool) -> None:
        peer.watching_out = on
        try:
            self.ep.modify(peer.fd, _IN | select.EPOLLOUT if on else _IN)
        except (OSError, ValueError):
            pass

    def close_peer(self, peer: Peer) -> None:
        """Drop a connection (after a refusal, an error or its end)."""
        if self.peers.pop(peer.fd, None) is None:
            return
        try:
            self.ep.unregister(peer.fd)
        except (OSError, ValueError):
            pass
        peer.writer.close()

    def close(self) -> None:
        """Send what the sockets take at once, close every connection and the listener, remove the socket file."""
        for peer in list(self.peers.values()):
            peer.writer.flush()
            self.close_peer(peer)
        self.ep.close()
        self.listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
