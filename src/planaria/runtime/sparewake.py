"""Waking a sleeping spare on this host in one hop: a Unix datagram socket per spare.

A spare sleeps between two tests of its MPI receive (``planaria.recovery``); a recovery's shrink
waits for it, so the working rank that starts one wakes it. Through the job's controller that
takes two hops (the rank's channel, then the spare's agent thread), each waiting for a core that
8 busy-polling ranks share. So a spare on a host whose controller listens on a Unix socket also
binds ``w<rank>.sock`` next to that socket, and a working rank sends one datagram to every such
socket it finds there: the spare's own thread wakes on it. The controller's ``wake`` still reaches
every spare, on any host; whichever comes first wakes it.
"""
from __future__ import annotations

import contextlib
import os
import socket
from typing import Any
from planaria.util.env import PLANARIA_CONTROL_URI

PREFIX, SUFFIX = "w", ".sock"
UNIX_PATH_MAX = 107       # sun_path holds 108 bytes with the terminating NUL


def wake_dir(environ: dict[str, str] | None = None) -> str | None:
    """The directory of this job's spare sockets on this host: the controller's, when it listens on
    a Unix socket (``PLANARIA_CONTROL_URI=ipc://...``); None otherwise."""
    uri = (os.environ if environ is None else environ).get(PLANARIA_CONTROL_URI, "")
    return os.path.dirname(uri[len("ipc://"):]) if uri.startswith("ipc://") else None


class SpareSocket:
    """The datagram socket a spare sleeps on (with ``select``); ``close`` when it stops being one."""

    def __init__(self, directory: str, rank: int) -> None:
        self.path = os.path.join(directory, f"{PREFIX}{int(rank)}{SUFFIX}")
        if len(self.path.encode()) > UNIX_PATH_MAX:
            raise OSError(f"socket path too long: {self.path}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)            # left by an earlier attempt's process of this rank
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(self.path)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def drain(self) -> None:
        """Read what woke it (any number of datagrams)."""
        try:
            while self.sock.recv(64):
                pass
        except OSError:             # BlockingIOError: nothing left
            pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self.sock.close()


def wake_all(directory: str) -> int:
    """Send one datagram to every spare socket in ``directory``; how many took it. Never blocks:
    a full queue already holds a wake, a stale socket (its spare gone) refuses, both are skipped."""
    try:
        names = [n for n in os.listdir(directory) if n.startswith(PREFIX) and n.endswith(SUFFIX)
                 and n[len(PREFIX):-len(SUFFIX)].isdigit()]
    except OSError:
        return 0
    sent = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        for n in names:
            try:
                s.sendto(b"w", os.path.join(directory, n))
                sent += 1
            except OSError:
                pass
    return sent


class Waker:
    """What a spare sleeps on: the controller's ``wake`` (a pipe its agent thread writes) and, where
    there is one, its own datagram socket (``SpareSocket``)."""

    def __init__(self, pipe_fd: int, sock: SpareSocket | None) -> None:
        self._pipe = pipe_fd
        self._sock = sock

    def wait(self, timeout: float) -> bool:
        """Sleep until woken (True, the wakes read) or ``timeout`` seconds (False)."""
        import select
        fds: list[Any] = [self._pipe] if self._sock is None else [self._pipe, self._sock]
        ready, _, _ = select.select(fds, [], [], timeout)
        if not ready:
            return False
        with contextlib.suppress(OSError):
            while os.read(self._pipe, 4096):
                pass
        if self._sock is not None:
            self._sock.drain()
        return True

    def close(self) -> None:
        """No longer a spare: working ranks stop finding its socket (the pipe stays with the agent)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
