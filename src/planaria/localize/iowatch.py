"""Record I/O errors the application meets, for the rule "repeated I/O errors on one node" (paper 000 §2.2).

Wraps ``open`` (builtins, ``io``) and ``os.open``: an ``OSError`` whose errno says the device or
file system failed (EIO, ENOSPC, EROFS, EDQUOT, ESTALE, ENXIO) is appended to the message log's
``ioerrors`` and re-raised unchanged. Errors such as "no such file" are the program's business
and are not recorded. Installed after fault injection so injected I/O errors are seen too.
"""
from __future__ import annotations

import builtins
import errno
import io
import os
import sys
import time
from typing import Any

_DEVICE_ERRORS = {errno.EIO, errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ESTALE, errno.ENXIO}
_installed = False


def install() -> None:
    """Start recording device-level I/O errors of file opens (idempotent)."""
    global _installed
    if _installed:
        return
    from planaria.comm import msglog
    lg = msglog.log()
    if lg is None:
        return

    def wrap(orig: Any) -> Any:
        def opener(file: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return orig(file, *args, **kwargs)
            except OSError as exc:
                if exc.errno in _DEVICE_ERRORS:
                    lg.push("io", (time.time(), f"{os.strerror(exc.errno)}: {file!s}"[:200],
                                   msglog.call_site(sys._getframe(1))))
                raise
        opener.__name__ = getattr(orig, "__name__", "open")
        opener.__doc__ = orig.__doc__
        return opener
    builtins.open = wrap(builtins.open)  # type: ignore[assignment]
    io.open = wrap(io.open)  # type: ignore[assignment]
    os.open = wrap(os.open)  # type: ignore[assignment]
    _installed = True
