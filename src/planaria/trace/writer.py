"""Per-process JSON-lines trace files: records buffered, appended at a size threshold and at exit.

Each rank writes ``trace-r<rank>.jsonl`` in the trace directory. A flush appends whole lines
with one ``write`` and flushes to the OS, so whatever was flushed survives a kill of the
process; ``close`` also fsyncs. Records are small dicts with a kind ``k`` (see docs/fragments.md).
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

DEFAULT_FLUSH_BYTES = 256 * 1024
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=repr, check_circular=False).encode


def trace_path(directory: str | os.PathLike[str], rank: int) -> Path:
    return Path(directory) / f"trace-r{rank}.jsonl"


class TraceWriter:
    """Buffered, append-only JSON-lines writer for one rank; thread-safe."""

    def __init__(self, directory: str | os.PathLike[str], rank: int, flush_bytes: int = DEFAULT_FLUSH_BYTES) -> None:
        self.path = trace_path(directory, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rank, self.flush_bytes = rank, max(0, int(flush_bytes))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        self._buf: list[str] = []
        self._size = 0
        self._lock = threading.Lock()
        self.flushes = 0
        self.bytes_written = 0
        self.t0 = time.time()

    def write(self, rec: dict[str, Any]) -> None:
        """Buffer one record; append the buffer to the file once it reaches the threshold."""
        line = _ENCODE(rec) + "\n"
        with self._lock:
            if self._fd < 0:
                return
            self._buf.append(line)
            self._size += len(line)
            if self._size >= self.flush_bytes:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buf or self._fd < 0:
            return
        data = "".join(self._buf).encode("utf-8")
        self._buf.clear()
        self._size = 0
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.flushes += 1
        self.bytes_written += len(data)

    def close(self) -> None:
        """Flush, fsync and close (idempotent)."""
        with self._lock:
            if self._fd < 0:
                return
            self._flush_locked()
            try:
                os.fsync(self._fd)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = -1


def read_traces(directory: str | os.PathLike[str], problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every record of every ``trace-r*.jsonl`` in ``directory``.

    A torn last line (a killed writer) is skipped silently; any other line that is not a JSON
    record is skipped and named in ``problems``. ValueError when the files hold no record at all.
    """
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: not a directory")
    files = sorted(d.glob("trace-r*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{d}: no trace-r*.jsonl files")
    out: list[dict[str, Any]] = []
    bad_total = 0
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().split("\n")
        bad: list[int] = []
        for no, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            if isinstance(rec, dict):
                out.append(rec)
            elif no < len(lines):            # the last piece has no newline: a torn write
                bad.append(no)
        bad_total += len(bad)
        if bad and problems is not None:
            problems.append(f"{f.name}: {len(bad)} line(s) are not trace records (line {bad[0]}"
                            + (f" and {len(bad) - 1} more)" if len(bad) > 1 else ")") + ", skipped")
    if not out:
        raise ValueError(f"{d}: no trace records in {len(files)} file(s)"
                         + (f" ({bad_total} line(s) are not trace records)" if bad_total else ""))
    return out
