"""Reading a child process's output in tests without ever blocking past a deadline."""
from __future__ import annotations

import selectors
import time
from typing import IO


def wait_for_line(stream: IO[str], text: str, timeout: float) -> str:
    """Read lines until one contains ``text``; that line, or "" at end of stream or after ``timeout`` seconds."""
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if sel.select(timeout=max(0.0, deadline - time.monotonic())):
                line = stream.readline()
                if not line:
                    return ""
                if text in line:
                    return line
        return ""
    finally:
        sel.close()
