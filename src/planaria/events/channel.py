"""The agent channel: control messages in length-prefixed frames over a plain stream socket.

On the launcher's host each rank's agent talks to the controller over one Unix stream socket
(``agents.sock`` next to the control socket) instead of ZeroMQ. The controller writes a
forwarded event straight into each target's socket and a rank's ``notify`` writes straight
into its own, so an event wakes one thread per process (the receiving agent's) instead of
also passing through the ZeroMQ I/O threads of the sender, the launcher and the receiver and
through the notifying rank's agent thread. The messages are the same msgpack maps as on the
ZeroMQ socket (``planaria.launch.protocol``); one stream per rank keeps them in order.
"""
from __future__ import annotations

import struct
import threading
from collections import deque

# the C module behind ``socket``: a rank's one connection needs only its calls, and ``socket``'s
# import (its enum conversions, ``selectors``) is about 2 ms of every rank's start
import _socket

from planaria.errors import PlanariaError
from planaria.util.agentsock import SOCKET_NAME as SOCKET_NAME  # where it was defined before
from planaria.util.agentsock import address_for as address_for

HEADER = struct.Struct("<I")        # payload length, little endian
MAX_FRAME = 16 << 20                # a frame announcing more is refused (the connection is closed)
MAX_BACKLOG = 64 << 20              # bytes waiting for a peer that does not read; later frames are dropped


class FrameError(PlanariaError, ValueError):
    """The stream does not hold valid frames."""


def frame(payload: bytes) -> bytes:
    """``payload`` with its length header."""
    return HEADER.pack(len(payload)) + payload


class Reader:
    """Splits the bytes read from a stream into frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Append ``data``; return the payloads now complete (FrameError on an oversized frame)."""
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos, end = 0, len(buf)
        while end - pos >= HEADER.size:
            size = HEADER.unpack_from(buf, pos)[0]
            if size > MAX_FRAME:
                raise FrameError(f"frame of {size} bytes (limit {MAX_FRAME})")
            if end - pos - HEADER.size < size:
                break
            out.append(bytes(buf[pos + HEADER.size:pos + HEADER.size + size]))
            pos += HEADER.size + size
        if pos:
            del buf[:pos]
        return out


class Writer:
    """Ordered, non-blocking writes to a socket from any thread.

    What the socket does not take at once waits in a backlog (bounded by ``limit`` bytes;
    whole frames beyond it are dropped and counted) that ``flush`` sends once the socket is
    writable again, so no writer ever blocks on a peer that stopped reading.
    """

    def __init__(self, sock: _socket.socket, limit: int = MAX_BACKLOG) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.limit = limit
        self.lock = threading.Lock()
        self._backlog: deque[bytes | memoryview] = deque()
        self._queued = 0
        self.dropped = 0
        self.broken = False

    @property
    def pending(self) -> bool:
        """True while bytes wait for the socket to become writable."""
        return bool(self._backlog)

    def write(self, data: bytes) -> bool:
        """Send or queue one frame; False when it was dropped (backlog full, connection broken)."""
        with self.lock:
            if self.broken:
                return False
            if self._backlog:
                if self._queued + len(data) > self.limit:
                    self.dropped += 1
                    return False
                self._backlog.append(data)
                self._queued += len(data)
                return True
            try:
                sent = self.sock.send(data, _socket.MSG_NOSIGNAL)
            except BlockingIOError:
                sent = 0
            except OSError:
                self.broken = True
                return False
            if sent < len(data):           # the rest of a started frame is always kept
                rest = memoryview(data)[sent:]
                self._backlog.append(rest)
                self._queued += len(rest)
            return True

    def flush(self) -> bool:
        """Send what waits, as far as the socket takes it; True when nothing is left."""
        with self.lock:
            while self._backlog:
                chunk = self._backlog[0]
                try:
                    sent = self.sock.send(chunk, _socket.MSG_NOSIGNAL)
                except BlockingIOError:
                    return False
                except OSError:
                    self.broken = True
                    self._backlog.clear()
                    self._queued = 0
                    return True
                self._queued -= sent
                if sent < len(chunk):
                    self._backlog[0] = memoryview(chunk)[sent:]
                    return False
                self._backlog.popleft()
            return True


    def close(self) -> None:
        """Close the socket; later writes return False (under the lock: no write meets a reused descriptor)."""
        with self.lock:
            self.broken = True
            self._backlog.clear()
            self._queued = 0
            self.sock.close()


def connect(path: str, timeout: float = 2.0) -> _socket.socket | None:
    """A connected Unix stream socket to ``path``, or None when nobody listens there."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def peer_pid(sock: _socket.socket) -> int | None:
    """The pid of the process at the other end of a Unix socket (SO_PEERCRED), if known."""
    try:
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    pid = struct.unpack("3i", creds)[0]
    return pid or None
