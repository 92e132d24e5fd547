"""The controller's address and its agents' listener, made before the controller itself.

The ranks need the controller's address, not the controller: ``planaria run`` binds the agent
channel's Unix socket here (a plain listening socket whose connections wait in its backlog until
the controller's thread accepts them) and starts mpiexec at once; the controller, with ZeroMQ's
import, comes up while mpiexec starts the ranks. Nothing here imports ZeroMQ or the event code.
"""
from __future__ import annotations

import _socket          # the C module behind socket (its import is not on the way to mpiexec)
import os
from pathlib import Path
from typing import TYPE_CHECKING

from planaria.util.agentsock import address_for

if TYPE_CHECKING:
    from planaria.launch.jobdir import JobDir

UNIX_PATH_MAX = 100
BACKLOG = 1024          # agents that may wait to be accepted (the controller accepts them all each turn)


def default_address(jobdir: JobDir) -> str:
    """``ipc://<jobdir>/control.sock``, or a short private temp dir if that path is too long."""
    path = jobdir.socket_path
    if len(str(path)) > UNIX_PATH_MAX:
        import tempfile

        short = Path(tempfile.mkdtemp(prefix="planaria-"))  # mode 0700
        path = short / "control.sock"
    return f"ipc://{path}"


def listen_unix(path: str) -> _socket.socket:
    """A non-blocking Unix stream socket listening on ``path`` (mode 0600; a stale file is replaced);
    ``_socket``'s (``planaria.launch.channels`` makes it a ``socket.socket`` to accept with)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        if os.path.exists(path):
            os.unlink(path)
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def early_listener(uri: str) -> _socket.socket | None:
    """The agent channel's listener for a controller that will bind ``uri``, bound now; None when
    ``uri`` has no channel (TCP) or the socket cannot be made (the controller then starts first)."""
    path = address_for(uri)
    if path is None:
        return None
    try:
        return listen_unix(path)
    except OSError:
        return None
