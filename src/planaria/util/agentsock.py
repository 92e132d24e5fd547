"""Where a job's agent channel listens: ``agents.sock`` next to the controller's Unix socket.

Kept apart from ``planaria.events.channel`` so that the launcher can name (and bind) it before it
imports the event machinery and ZeroMQ."""
from __future__ import annotations

import os

SOCKET_NAME = "agents.sock"


def address_for(control_uri: str) -> str | None:
    """The channel's socket path for a controller at ``control_uri`` (Unix sockets only), else None."""
    if not control_uri.startswith("ipc://"):
        return None
    return os.path.join(os.path.dirname(control_uri[len("ipc://"):]), SOCKET_NAME)
