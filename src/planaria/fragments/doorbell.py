"""Wake-ups for the fragments loop: a rank sleeps until a peer rings or one of its CFs ends.

Without it an idle rank has to wake every 0.5 ms to test MPI for messages: at 9 ranks on
2 cores those wake-ups took over half the machine, and a message waited for the next one. With
it the sender of every runtime message rings the receiver's doorbell right after the ``isend``,
a pool thread rings its own rank when a CF ends, and the loop blocks in ``select`` until then.

The doorbell is a hint, never the message: the message itself always goes through MPI, and the
loop still tests MPI at least every ``fallback`` seconds, so a lost or impossible ring (a peer on
another host, a peer that has not bound its bell yet) costs latency, never correctness.

Each rank binds a Linux abstract-namespace datagram socket whose name every rank of the run can
compute (job namespace and the process's rank in the world communicator, which
``Comm.world_ranks`` gives without communication), so no start-up exchange is needed, runs on disjoint communicators
at once never share a name, and nothing is left on disk by a killed rank. A ring is one ``sendto`` and wakes the receiver
directly; pyzmq would route each ring through an I/O thread on both sides, two more thread
hand-offs per message on a machine whose cores are the scarce resource.
``PLANARIA_FRAGMENT_WAKEUPS=poll`` turns it off.
"""
from __future__ import annotations

import select
import signal
import socket
import sys
import threading
from collections.abc import Sequence

from planaria.fragments import settings
from planaria.util.env import PLANARIA_FRAGMENT_WAKEUPS
from planaria.util.jobinfo import all_on_this_host, job_key, job_namespace


class Doorbell:
    """This rank's bell and the means to ring the others'. ``armed`` is False when it cannot work."""

    def __init__(self, rank: int, size: int, short: float = 0.0005, long: float = 0.02,
                 ids: Sequence[int] | None = None) -> None:
        """``ids``: each member's world rank (``Comm.world_ranks``), unique in the job; default
        ``0..size-1`` (the communicator is the world)."""
        self.rank, self.size = rank, size
        self.short = short
        self.armed = False
        self._in: socket.socket | None = None
        self._out: socket.socket | None = None
        self._sig: socket.socket | None = None
        self._old_wakeup_fd = -1
        self.fallback = short
        if size < 2:
            return
        mode = settings.choice(PLANARIA_FRAGMENT_WAKEUPS, ("doorbell", "poll"), "doorbell")
        ns = job_namespace()
        if mode == "poll" or ns is None or not sys.platform.startswith("linux"):
            return
        key = job_key(ns)
        self._names = [f"\0planaria-fr-{key}-{i}" for i in (range(size) if ids is None else ids)]
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.setblocking(False)
            s.bind(self._names[rank])
            o = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            o.setblocking(False)
        except OSError:       # a name taken (two runs at once in one process) or no AF_UNIX: poll as before
            return
        self._in, self._out, self.armed = s, o, True
        # sleep long only when every peer can ring us; a rank on another host never will
        self.fallback = long if all_on_this_host(size) else short

    def ring(self, dest: int) -> None:
        """Wake rank ``dest`` (after a message to it was sent). Never blocks, never raises."""
        if self._out is None:
            return
        try:
            self._out.sendto(b"!", self._names[dest])
        except OSError:
            # not bound (yet, or any more), on another host, or its queue is full: a full queue
            # already holds a wake-up, and in the other cases the peer finds the message by polling
            pass

    def wake_on_signals(self) -> None:
        """Let a signal wake the waiting loop at once, whichever thread the kernel delivers it to
        (Python's handler runs in the main thread only, and ``select`` there is interrupted only if
        the signal lands on it). Main thread only; ``close`` puts the previous wakeup fd back."""
        if self._in is None or self._sig is not None or threading.current_thread() is not threading.main_thread():
            return
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            s.setblocking(False)
            s.connect(self._names[self.rank])
            self._old_wakeup_fd = signal.set_wakeup_fd(s.fileno(), warn_on_full_buffer=False)
        except (OSError, ValueError):
            s.close()
            return
        self._sig = s

    def ring_self(self) -> None:
        """Wake this rank's loop (from a pool thread, after it queued a finished CF)."""
        self.ring(self.rank)

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until a ring or ``timeout`` (default: ``fallback``); consume the rings. True if rung."""
        t = self.fallback if timeout is None else timeout
        if self._in is None:
            if t > 0:
                select.select([], [], [], t)
            return False
        try:
            r, _, _ = select.select([self._in], [], [], t)
        except InterruptedError:        # pragma: no cover - PEP 475 retries; kept for clarity
            return False
        if not r:
            return False
        self.drain()
        return True

    def drain(self) -> None:
        """Consume pending rings without sleeping."""
        if self._in is None:
            return
        while True:
            try:
                self._in.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return

    def close(self) -> None:
        if self._sig is not None:
            try:
                signal.set_wakeup_fd(self._old_wakeup_fd)
            except ValueError:          # pragma: no cover - closed from another thread
                pass
        for s in (self._in, self._out, self._sig):
            if s is not None:
                s.close()
        self._in = self._out = self._sig = None
        self.armed = False
