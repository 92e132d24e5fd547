"""A matched message (``Mprobe``, ``mprobe``, ``Improbe``, ``improbe``) of a recorded communicator.

Receiving it counts one message from its source in the message log (``comm._ml_recvd``), as a
receive does: otherwise a status probe would see that message as sent and never received. Both
backends return one when their communicator is recorded; the source comes from the probe's status.
"""
from __future__ import annotations


from mpi4py import MPI

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any


class Matched(MPI.Message):
    """mpi4py's ``Message`` (the same handle) whose receives count in the message log of ``comm``;
    an MPI error is raised as ``comm``'s failure error when the backend maps them (``_convert``)."""

    def __new__(cls, msg: Any, comm: Any = None, source: int = -1) -> Matched:
        return MPI.Message.__new__(cls, msg)

    def __init__(self, msg: Any, comm: Any, source: int) -> None:
        self._comm, self._source = comm, source

    def _received(self) -> None:
        if self._source >= 0 and self._comm._ml_on:
            self._comm._ml_recvd[self._source] += 1

    def _request(self, req: Any) -> Any:
        own = getattr(self._comm, "_own_request", None)      # the backend's request class, if it has one
        return own(req) if own is not None else req

    def _error(self, e: MPI.Exception) -> Exception:
        convert = getattr(self._comm, "_convert", None)
        return convert(e) if convert is not None else e

    def Recv(self, buf: Any, status: Any = None) -> None:
        try:
            MPI.Message.Recv(self, buf, status)
        except MPI.Exception as e:
            raise self._error(e) from e
        self._received()

    def recv(self, status: Any = None) -> Any:
        try:
            obj = MPI.Message.recv(self, status)
        except MPI.Exception as e:
            raise self._error(e) from e
        self._received()
        return obj

    def Irecv(self, buf: Any) -> Any:
        """Its receive, posted; the message is matched already, so it counts now."""
        try:
            req = MPI.Message.Irecv(self, buf)
        except MPI.Exception as e:
            raise self._error(e) from e
        self._received()
        return self._request(req)

    def irecv(self) -> Any:
        try:
            req = MPI.Message.irecv(self)
        except MPI.Exception as e:
            raise self._error(e) from e
        self._received()
        return self._request(req)
