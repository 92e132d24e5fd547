"""Waking a sleeping spare on this host in one hop: a Unix datagram socket per spare.

A spare sleeps between two tests of its MPI receive (``planaria.recovery``); a recovery's shrink
waits for it, so the working rank that starts one wakes it. Through the job's controller that
takes two hops (the rank's channel, then the spare's agent thread), each waiting for a core that
8 busy-polling ranks share. So a spare on a host whose controller listens on a Unix socket also
binds ``w<rank>.sock`` next to that socket, and a working rank sends one datagram to every such
socket it finds there: the spare's own thread wakes on it. The controller's ``wake`` still reaches
every spare, on any host; whichever comes first wakes it.

Without ``planaria run`` (a bare ``mpiexec``), a spare binds a name in Linux's abstract socket
namespace instead, made of the job's name (``planaria.util.jobinfo``) and its rank in the job,
and a working rank sends its datagram to the names of the spares' ranks: one hop, no files. The
abstract namespace is per host (per network namespace), so this reaches only the spares on the
waking rank's host; ``Waker.reaches_all`` says whether that is every spare.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

from planaria.util.env import PLANARIA_CONTROL_URI
from planaria.util.jobinfo import job_key

PREFIX, SUFFIX = "w", ".sock"
#: what a wake's byte says: news on the spare's MPI receive (a recovery, a release: it may have to
#: test it until the news arrives), or only a working rank's restore footprint (``warm``)
NEWS, WARM = b"w", b"m"
UNIX_PATH_MAX = 107       # sun_path holds 108 bytes with the terminating NUL


def wake_dir(environ: dict[str, str] | None = None) -> str | None:
    """The directory of this job's spare sockets on this host: the controller's, when it listens on
    a Unix socket (``PLANARIA_CONTROL_URI=ipc://...``); None otherwise."""
    uri = (os.environ if environ is None else environ).get(PLANARIA_CONTROL_URI, "")
    return os.path.dirname(uri[len("ipc://"):]) if uri.startswith("ipc://") else None


def socket_path(directory: str, rank: int) -> str:
    """The file of rank ``rank``'s spare socket in ``directory`` (``wake_dir``)."""
    return os.path.join(directory, f"{PREFIX}{int(rank)}{SUFFIX}")


def abstract_name(namespace: str, rank: int) -> str | None:
    """The abstract socket name of the spare of job rank ``rank`` in the job ``namespace``; None
    where there are no abstract sockets (other systems than Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    return f"\0planaria-spare-{job_key(namespace)}-{int(rank)}"


class SpareSocket:
    """The datagram socket a spare sleeps on (with ``select``), bound to ``address``: a file
    (``socket_path``) or an abstract name (``abstract_name``); ``close`` when it stops being one."""

    def __init__(self, address: str) -> None:
        self.path = address
        self._file = not address.startswith("\0")
        if len(self.path.encode()) > UNIX_PATH_MAX:
            raise OSError(f"socket path too long: {self.path}")
        if self._file:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)        # left by an earlier attempt's process of this rank
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(self.path)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def drain(self) -> bytes:
        """Read what woke it (any number of datagrams); their bytes."""
        got = []
        try:
            while data := self.sock.recv(64):
                got.append(data)
        except OSError:             # BlockingIOError: nothing left
            pass
        return b"".join(got)

    def close(self) -> None:
        if self._file:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.sock.close()


def wake_all(directory: str, warm: bool = False) -> set[int]:
    """Send one datagram to every spare socket in ``directory`` (``WARM`` when it only brings a
    footprint, else ``NEWS``); the ranks of those that took it. Never blocks: a full queue already
    holds a wake, a stale socket (its spare gone) refuses, both are skipped."""
    try:
        ranks = [int(n[len(PREFIX):-len(SUFFIX)]) for n in os.listdir(directory)
                 if n.startswith(PREFIX) and n.endswith(SUFFIX) and n[len(PREFIX):-len(SUFFIX)].isdigit()]
    except OSError:
        return set()
    reached = set()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        for r in ranks:
            try:
                s.sendto(WARM if warm else NEWS, socket_path(directory, r))
                reached.add(r)
            except OSError:
                pass
    return reached


def wake_ranks(namespace: str, ranks: Sequence[int], warm: bool = False) -> int:
    """Send one datagram (as ``wake_all``) to the abstract socket of each spare of job rank in
    ``ranks``; how many took it. Never blocks: a full queue already holds a wake; a spare on
    another host, or one not bound (any more), refuses, and is skipped."""
    names = [n for n in (abstract_name(namespace, r) for r in ranks) if n is not None]
    sent = 0
    if not names:
        return 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        for n in names:
            try:
                s.sendto(WARM if warm else NEWS, n)
                sent += 1
            except OSError:
                pass
    return sent


class Waker:
    """What a spare sleeps on: the controller's ``wake`` (a pipe its agent thread writes; None
    without ``planaria run``) and, where there is one, its own datagram socket (``SpareSocket``).
    ``reaches_all``: every working rank can wake it (through the controller, or all on this host)."""

    def __init__(self, pipe_fd: int | None, sock: SpareSocket | None, reaches_all: bool = True) -> None:
        self._pipe = pipe_fd
        self._sock = sock
        self.reaches_all = reaches_all

    def wait(self, timeout: float) -> str:
        """Sleep until woken or ``timeout`` seconds (""); the wakes read say what woke it: "warm"
        when every one only brought a footprint, else "news". Several wakes are read at once, so
        a spare that reads its footprint still knows whether news is on its way."""
        import select
        fds: list[Any] = [f for f in (self._pipe, self._sock) if f is not None]
        ready, _, _ = select.select(fds, [], [], timeout)
        if not ready:
            return ""
        got = []
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                while data := os.read(self._pipe, 4096):
                    got.append(data)
        if self._sock is not None:
            got.append(self._sock.drain())
        read = b"".join(got)
        return "warm" if read and not read.replace(WARM, b"") else "news"

    def close(self) -> None:
        """No longer a spare: working ranks stop finding its socket (the pipe stays with the agent)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
