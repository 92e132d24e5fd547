"""ZeroMQ CURVE on the control plane's TCP sockets: encrypted, with the server authenticated.

When the controller's address is TCP (ranks or tools on other hosts) and for the agents' TCP
collection-tree sockets, every ZeroMQ connection runs CurveZMQ: a server (the controller's ROUTER,
an agent's tree ROUTER) proves it holds the server key, and everything after the handshake,
the job secret (``tok``) included, is encrypted. The key pairs are derived from the job secret
(256 random bits in the 0600 job directory, which every party of the job already reads), so no
other file or variable has to reach remote hosts: a party without the secret cannot know the
server's public key, and a client without it fails the handshake (the controller records the
failure, see ``HANDSHAKE_FAILED``). Clients are then authenticated by ``tok`` as on the local
transports. Unix sockets (``ipc://``, the 0700 job directory) stay as they are.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import zmq
from zmq.utils import z85

#: the largest message a CURVE-protected server accepts (an authenticated peer announcing more is cut off)
MAX_MESSAGE = 16 << 20


class Keys(NamedTuple):
    """The job's two CurveZMQ key pairs (Z85 text, as libzmq takes them)."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes


@functools.lru_cache(maxsize=8)
def keys(secret: str) -> Keys:
    """The key pairs of the job whose secret is ``secret``: each secret key is a SHA-256 of the
    job secret and its role, its public key computed from it (Curve25519, by libzmq)."""
    import hashlib          # here: a one-host job (IPC, no CURVE) does not load OpenSSL's _hashlib
    out = []
    for role in (b"server", b"client"):
        sk = z85.encode(hashlib.sha256(b"planaria-curve\0" + role + b"\0" + secret.encode()).digest())
        out += [zmq.curve_public(sk), sk]
    return Keys(*out)


def available() -> bool:
    """libzmq was built with CURVE (pyzmq's wheels are)."""
    return bool(zmq.has("curve"))


def is_tcp(endpoint: str) -> bool:
    """Whether ``endpoint`` crosses the network (so CURVE applies)."""
    return endpoint.startswith("tcp://")


def serve(sock: zmq.Socket, secret: str) -> None:
    """Make ``sock`` (before its bind) a CURVE server for the job; messages over ``MAX_MESSAGE`` are refused."""
    k = keys(secret)
    sock.curve_server = True
    sock.curve_secretkey = k.server_secret
    sock.curve_publickey = k.server_public
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)


def client(sock: zmq.Socket, secret: str, endpoint: str) -> None:
    """Make ``sock`` (before its connect) a CURVE client of the job's servers when ``endpoint`` is TCP."""
    if not is_tcp(endpoint):
        return
    k = keys(secret)
    sock.curve_serverkey = k.server_public
    sock.curve_publickey = k.client_public
    sock.curve_secretkey = k.client_secret


#: socket-monitor events of a connection refused before any message (wrong or no key, not ZMTP)
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


def handshake_failure(event: dict[str, Any]) -> str | None:
    """What a socket-monitor event (``zmq.utils.monitor.parse_monitor_message``) says went wrong
    in a handshake, or None when it is not a handshake failure."""
    ev = int(event.get("event") or 0)
    if not ev & HANDSHAKE_FAILED:
        return None
    if ev == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return f"handshake failed: protocol error {_protocol(int(event.get('value') or 0))}"
    if ev == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"handshake failed: authentication (status {event.get('value')})"
    return f"handshake failed: {zmq.strerror(int(event.get('value') or 0))}"


def _protocol(code: int) -> str:
    """libzmq's ``ZMQ_PROTOCOL_ERROR_*`` code by name (e.g. ZMTP_MECHANISM_MISMATCH)."""
    for name in dir(zmq):
        if name.startswith("PROTOCOL_ERROR_") and getattr(zmq, name) == code:
            return name[len("PROTOCOL_ERROR_"):]
    return hex(code)
