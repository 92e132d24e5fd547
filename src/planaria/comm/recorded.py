"""The buffer collectives' message-log prologue, shared by the ulfm and sim backends.

A recorded call counts itself in the message log (the sequence number a status probe compares) and
notes its buffer in the flight record, then hands over to the backend's ``complete``: ULFM calls
mpi4py's blocking C method, sim posts the nonblocking one and polls for failures. The hand-over
is one Python call; the buffer collectives it serves move whole buffers, where it does not show.
"""
from __future__ import annotations

from collections.abc import Callable

from planaria.comm import flight as _flight
from planaria.comm.base import named

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any


def rooted(name: str, complete: Callable[[Any, Any, Any, int], None], kind: int = 0,
           noted_recv: bool = False) -> Callable[..., None]:
    """A communicator method ``name(sendbuf, recvbuf, root=0)`` (mpi4py's ``Gather``...): the message
    log's sequence number, a flight-record note of kind ``kind`` (none when 0) on the send buffer
    (``noted_recv``: the receive buffer), then ``complete(self, sendbuf, recvbuf, root)``."""
    def method(self: Any, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        if self._ml_on:
            self._ml_seq += 1
            if kind:
                _flight.note(self._fl, self._ml_seq, kind, recvbuf if noted_recv else sendbuf)
        complete(self, sendbuf, recvbuf, root)
    return named(method, name)


def to_all(name: str, complete: Callable[[Any, Any, Any], None], kind: int = 0) -> Callable[..., None]:
    """``rooted`` for a collective without a root (``Allgather``...), the send buffer noted."""
    def method(self: Any, sendbuf: Any, recvbuf: Any) -> None:
        if self._ml_on:
            self._ml_seq += 1
            if kind:
                _flight.note(self._fl, self._ml_seq, kind, sendbuf)
        complete(self, sendbuf, recvbuf)
    return named(method, name)
