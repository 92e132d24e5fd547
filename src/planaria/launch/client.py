"""Tool side of the control plane: find a job, send one request to its controller, wait (bounded)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgpack
import zmq

from planaria.events import curve
from planaria.launch.jobdir import JobDir, jobs_root
from planaria.errors import PlanariaError


class ToolError(PlanariaError):
    """A tool request that cannot be served (no such job, job not running, no answer in time)."""


def find_job(spec: str | None) -> JobDir:
    """The job named ``spec``: a job directory path, a job id under the jobs root, or ``latest``/None."""
    if spec and Path(spec).is_dir():
        return JobDir.open(spec)
    root = jobs_root()
    if not spec or spec == "latest":
        jobs = sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []
        if not jobs:
            raise ToolError(f"no job under {root}")
        return JobDir.open(jobs[-1])
    path = root / spec
    if not path.is_dir():
        raise ToolError(f"no job {spec!r} (looked for {path})")
    return JobDir.open(path)


def request(jobdir: JobDir, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send ``msg`` to the job's controller and return its reply; ToolError after ``timeout`` seconds."""
    try:
        uri = jobdir.control_uri()
        secret = jobdir.secret()
    except OSError as exc:
        raise ToolError(f"job {jobdir.id} has no controller ({exc.strerror or exc})") from None
    status = _status(jobdir)
    if status not in (None, "running", "starting", "restarting"):
        raise ToolError(f"job {jobdir.id} is not running (status: {status})")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        curve.client(sock, secret, uri)
        sock.connect(uri)
        payload = dict(msg)
        payload["tok"] = secret
        sock.send(msgpack.packb(payload, use_bin_type=True))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                if time.monotonic() >= deadline:
                    raise ToolError(f"no answer from job {jobdir.id}'s controller within {timeout:g} s")
                continue
            reply = msgpack.unpackb(sock.recv(), raw=False, strict_map_key=False)
            if isinstance(reply, dict) and reply.get("tok") == secret:
                reply.pop("tok", None)
                return reply
    finally:
        sock.close(0)
        ctx.term()


def _status(jobdir: JobDir) -> str | None:
    try:
        return str(jobdir.manifest().get("status"))
    except (OSError, ValueError):
        return None
