"""Record I/O errors the application meets, for the rule "repeated I/O errors on one node" ([Gao 2024] §2.2).

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
import threading
import time

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any

_DEVICE_ERRORS = {errno.EIO, errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.ESTALE, errno.ENXIO}
_mine: set[int] = set()     # ids of the wrappers this module installed
_local = threading.local()  # nesting depth of our wrappers (one may sit under another wrapper)


def install() -> None:
    """Record device-level I/O errors of file opens; re-wraps when someone wrapped ``open`` on top of us.

    The localization service calls it every tick: a wrapper installed later (fault injection,
    a library) would otherwise raise before the error reaches ours.
    """
    from planaria.comm import msglog
    lg = msglog.log()
    if lg is None:
        return

    def wrap(orig: Any) -> Any:
        def opener(file: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(_local, "depth", 0)
            _local.depth = depth + 1
            try:
                return orig(file, *args, **kwargs)
            except OSError as exc:
                if depth == 0 and exc.errno in _DEVICE_ERRORS:   # record once, at the outermost wrapper
                    lg.push("io", (time.time(), f"{os.strerror(exc.errno)}: {file!s}"[:200],
                                   msglog.call_site(sys._getframe(1))))
                raise
            finally:
                _local.depth = depth
        opener.__name__ = getattr(orig, "__name__", "open")
        opener.__doc__ = orig.__doc__
        _mine.add(id(opener))
        return opener
    if id(builtins.open) not in _mine:
        builtins.open = wrap(builtins.open)
    if id(io.open) not in _mine:
        io.open = wrap(io.open)
    if id(os.open) not in _mine:
        os.open = wrap(os.open)
