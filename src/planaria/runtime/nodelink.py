"""A rank's way to its node agent (``planaria.launch.nodeagent``), when the job asks for node agents.

The first rank of a host to get here starts the host's node agent (a process in its own session,
so that it outlives the rank that started it); the others connect to it. An ``flock`` on
``nodes/<host>.lock`` in the job directory makes the start happen once per host, and a start that
failed is tried once only (``nodes/<host>.failed``): the other ranks of the host then connect to the
controller at once instead of each waiting ``START_TIMEOUT`` in turn. The node agent is started as a command
(``python -m planaria.launch.nodeagent``), not imported: the runtime layer does not import the
launcher's.
"""
from __future__ import annotations

import _socket          # the C module behind ``socket``: gethostname without socket's import (~2 ms of a rank's start)
import fcntl
import os
import sys
import time

from planaria.events.channel import connect
from planaria.util.env import PLANARIA_JOB_DIR, PLANARIA_NODE_AGENTS, PLANARIA_SECRET_FILE

ENV = PLANARIA_NODE_AGENTS           # "1": ranks reach the controller through their node's agent
START_TIMEOUT = 10.0                   # seconds to wait for a started node agent to listen
_UNIX_PATH_MAX = 100


def socket_path(jobdir: str, uri: str, node: str) -> str:
    """Where the node agent of ``node`` listens: next to the controller's socket when that is a Unix
    one (the job directory, or the short private directory a long path was moved to), else in the
    job directory's ``nodes/``, or a private directory under /tmp when that path is too long."""
    if uri.startswith("ipc://"):
        return os.path.join(os.path.dirname(uri[len("ipc://"):]), f"node-{node}.sock")
    path = os.path.join(jobdir, "nodes", f"{node}.sock")
    if len(path) <= _UNIX_PATH_MAX:
        return path
    return os.path.join("/tmp", f"planaria-{os.getuid()}-{os.path.basename(jobdir.rstrip('/'))}", f"{node}.sock")


def wanted() -> bool:
    """Whether this job's ranks go through node agents."""
    return os.environ.get(ENV) == "1"


def connect_node(uri: str) -> _socket.socket | None:
    """A connection to this host's node agent, started here if no rank has started it yet; None
    when the job does not use node agents or it cannot be reached (the agent then connects
    to the controller itself)."""
    jobdir, secret_file = os.environ.get(PLANARIA_JOB_DIR), os.environ.get(PLANARIA_SECRET_FILE)
    if not wanted() or not jobdir or not secret_file:
        return None
    host = _socket.gethostname()
    path = socket_path(jobdir, uri, host)
    if len(path) > _UNIX_PATH_MAX:
        return None
    sock = connect(path)
    if sock is not None:
        return sock
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(jobdir, "nodes"), mode=0o700, exist_ok=True)
        lock = os.open(os.path.join(jobdir, "nodes", f"{host}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:
        return None
    failed = os.path.join(jobdir, "nodes", f"{host}.failed")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)       # the start happens once; the others wait here
        sock = connect(path)
        if sock is None and not os.path.exists(failed):
            sock = _start(path, uri, secret_file, os.path.join(jobdir, "nodes", f"{host}.log"))
            if sock is None:                   # the host's other ranks go straight to the controller
                try:
                    open(failed, "w").close()
                except OSError:
                    pass
        return sock
    finally:
        os.close(lock)                         # closing releases the lock


def _start(path: str, uri: str, secret_file: str, log_path: str) -> _socket.socket | None:
    """Start the node agent for ``path`` (its messages to ``log_path``) and connect once it listens;
    None when it does not within ``START_TIMEOUT`` or has ended (it could not reach the controller)."""
    try:
        log = open(log_path, "ab")
    except OSError:
        log = None
    try:
        import subprocess        # only the rank that starts its node's agent needs it
        proc = subprocess.Popen([sys.executable, "-m", "planaria.launch.nodeagent", "--listen", path, "--uri", uri,
                          "--secret-file", secret_file], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=log if log is not None else subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    finally:
        if log is not None:
            log.close()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        sock = connect(path)
        if sock is not None:
            return sock
        if proc.poll() is not None:
            return None
        time.sleep(0.02)
    return None
