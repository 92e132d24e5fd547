"""Job directory: ``.planaria/jobs/<id>/`` with manifest, secret, events and summary."""
from __future__ import annotations

import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from planaria.util.env import PLANARIA_HOME
from planaria.util.fsutil import atomic_write

MANIFEST = "manifest.json"
SECRET = "secret"
CONTROL_URI = "control.uri"
CONTROL_SOCK = "control.sock"
EVENTS = "events.jsonl"
OUTPUT = "output.log"
SUMMARY = "summary.json"


def jobs_root(cwd: str | os.PathLike[str] | None = None) -> Path:
    """Directory holding all job dirs: ``$PLANARIA_HOME/jobs`` or ``./.planaria/jobs``."""
    home = os.environ.get(PLANARIA_HOME)
    if home:
        return Path(home) / "jobs"
    return Path(cwd if cwd is not None else os.getcwd()) / ".planaria" / "jobs"


def new_job_id(now: float | None = None) -> str:
    """A job id like ``20261121-224700-ab12`` (local time plus 4 random hex digits)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}-{os.urandom(2).hex()}"


def _jsonable(obj: Any) -> Any:
    """Convert msgpack-decoded values (bytes, tuples) into JSON-friendly ones."""
    if isinstance(obj, bytes):
        try:
            return obj.decode("utf-8")
        except UnicodeDecodeError:
            return obj.hex()
    if isinstance(obj, dict):
        return {str(_jsonable(k)): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def dump_json(obj: Any) -> str:
    """Serialize ``obj`` as indented JSON (bytes decoded, unknown types as str)."""
    import json     # after mpiexec has started: not on its way

    return json.dumps(_jsonable(obj), indent=2, sort_keys=True, default=str) + "\n"


class JobDir:
    """One job's directory and the files in it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.id = self.path.name
        self._lock = threading.Lock()
        self._events_fd = -1           # events.jsonl, opened for appending on first use and kept open

    @classmethod
    def create(cls, root: str | os.PathLike[str] | None = None) -> "JobDir":
        """Create a fresh job dir (mode 0700) with its secret file (mode 0600) written first."""
        base = Path(root) if root is not None else jobs_root()
        base.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            path = base / new_job_id()
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                continue
            jd = cls(path)
            jd._write_secret()
            jd.events_path.touch(mode=0o644)
            jd.output_path.touch(mode=0o644)
            return jd
        raise RuntimeError(f"cannot create a job directory under {base}")

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "JobDir":
        """Open an existing job dir."""
        p = Path(path)
        if not p.is_dir():
            raise FileNotFoundError(f"no job directory {p}")
        return cls(p)

    # --- paths -------------------------------------------------------
    def file(self, name: str) -> Path:
        """Path of a file inside the job dir."""
        return self.path / name

    @property
    def secret_path(self) -> Path:
        """Path of the secret token file."""
        return self.path / SECRET

    @property
    def events_path(self) -> Path:
        """Path of ``events.jsonl``."""
        return self.path / EVENTS

    @property
    def output_path(self) -> Path:
        """Path of ``output.log``."""
        return self.path / OUTPUT

    @property
    def socket_path(self) -> Path:
        """Path of the controller's Unix socket."""
        return self.path / CONTROL_SOCK

    # --- secret -------------------------------------------------------
    def _write_secret(self) -> None:
        token = os.urandom(32).hex()           # as secrets.token_hex, without its import
        fd = os.open(str(self.secret_path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, token.encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def secret(self) -> str:
        """The job's secret token."""
        return self.secret_path.read_text(encoding="ascii").strip()

    # --- JSON files ---------------------------------------------------
    def write_json(self, name: str, obj: Any) -> Path:
        """Atomically write ``obj`` as JSON to ``name``."""
        return atomic_write(self.path / name, dump_json(obj))

    def read_json(self, name: str) -> Any:
        """Read a JSON file of the job dir."""
        import json

        return json.loads((self.path / name).read_text(encoding="utf-8"))

    def write_manifest(self, manifest: dict[str, Any]) -> Path:
        """Atomically write ``manifest.json``."""
        return self.write_json(MANIFEST, manifest)

    def manifest(self) -> dict[str, Any]:
        """Read ``manifest.json``."""
        return self.read_json(MANIFEST)

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into the manifest and rewrite it atomically."""
        try:
            data = self.manifest()
        except (FileNotFoundError, ValueError):
            data = {}
        data.update(fields)
        self.write_manifest(data)
        return data

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """Atomically write ``summary.json``."""
        return self.write_json(SUMMARY, summary)

    def write_control_uri(self, uri: str) -> Path:
        """Atomically write ``control.uri``."""
        return atomic_write(self.path / CONTROL_URI, uri + "\n")

    def control_uri(self) -> str:
        """Read ``control.uri``."""
        return (self.path / CONTROL_URI).read_text(encoding="utf-8").strip()

    # --- append-only logs ----------------------------------------------
    def append_event(self, record: dict[str, Any]) -> None:
        """Append one record (one JSON line) to ``events.jsonl``."""
        self.append_events([record])

    def append_events(self, records: list[dict[str, Any]]) -> None:
        """Append records to ``events.jsonl`` in one write."""
        import json

        text = "".join(json.dumps(_jsonable(r), sort_keys=True, default=str) + "\n" for r in records)
        data = text.encode("utf-8")
        with self._lock:
            if self._events_fd < 0:
                # kept open: a launcher out of descriptors (thousands of agent connections) can still
                # write its record; O_APPEND keeps each write whole at the end of the file
                self._events_fd = os.open(self.events_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                weakref.finalize(self, os.close, self._events_fd)
            view = memoryview(data)
            while view:
                n = os.write(self._events_fd, view)
                view = view[n:]

    def events(self) -> list[dict[str, Any]]:
        """All records of ``events.jsonl``."""
        import json

        if not self.events_path.exists():
            return []
        out = []
        for line in self.events_path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out
