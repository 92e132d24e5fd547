"""The small C parts of planaria, built on first use with the system's C compiler into the user's cache.

Two hot paths are C where Python costs too much: the rank recorder every rank starts under
(``launch/rankfate.c``, a program) and the flight record's note before every count-checked
collective (``comm/flightnote.c``, an extension module). Each has a Python version that does the
same, used where the C one is not built. A build is named by a checksum of its source and of the
compiler's arguments, so a changed source or interpreter builds anew; a build that fails is noted
next to where it would be (``.failed``, with the compiler's message) and not tried again. The
compiler writes a temporary file named for the building host and process, renamed into place when
done; one whose process is gone (a launcher that exited while its compiler ran) is removed by the
next build of the same file on that host. Builds run through ``cc`` directly, not a build system:
one file, no dependencies, and it must happen on the user's machine without a package index.
"""
from __future__ import annotations

import os
import zlib
from collections.abc import Sequence

from planaria.util import procstat


def cache_dir() -> str:
    """Where builds live: ``$XDG_CACHE_HOME/planaria`` (``~/.cache/planaria``)."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "planaria")


def build_path(src: str, name: str, args: Sequence[str] = (), suffix: str = "",
               extra: Sequence[str] = ()) -> str | None:
    """The path ``src`` builds to with the compiler arguments ``args``: ``<cache>/<name>-<checksum>-<machine><suffix>``,
    or None when the source (or a file of ``extra``) cannot be read. The checksum covers the source,
    ``args`` and the files of ``extra`` (headers whose change must build anew)."""
    text = b""
    for path in (src, *extra):
        try:
            with open(path, "rb") as fh:
                text += fh.read() + b"\0"
        except OSError:
            return None
    if args:
        text += "\0".join(args).encode()
    return os.path.join(cache_dir(), f"{name}-{zlib.crc32(text):08x}-{os.uname().machine}{suffix}")


def built(src: str, name: str, args: Sequence[str] = (), suffix: str = "", build: bool = True,
          extra: Sequence[str] = ()) -> str | None:
    """The build of ``src`` (see ``build_path``), made now when there is none and ``build`` is set;
    None when there is none: no source, no C compiler, or a build that failed."""
    out = build_path(src, name, args, suffix, extra)
    if out is None:
        return None
    if os.path.exists(out):
        return out
    if not build or os.path.exists(f"{out}.failed"):
        return None
    return compile_to(src, out, args)


def compile_to(src: str, out: str, args: Sequence[str] = ()) -> str | None:
    """Compile ``src`` into ``out`` with the system's ``cc`` and ``args``; None (and ``out.failed``
    saying why) if that fails, None without a note when there is no compiler (one may be installed later)."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    try:
        os.makedirs(os.path.dirname(out), mode=0o700, exist_ok=True)
    except OSError:
        return None
    host = os.uname().nodename
    _sweep(out, host)
    tmp = f"{out}.{host}.{os.getpid()}.tmp"
    try:
        res = subprocess.run([cc, *args, "-o", tmp, src], capture_output=True, text=True, timeout=120)
        why = "" if res.returncode == 0 else res.stderr[-4000:] or f"{cc} exited {res.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        why = str(exc)
    try:
        if not why:
            os.replace(tmp, out)        # at once: processes building it together each rename their own
            return out
        with open(f"{out}.failed", "w") as fh:
            fh.write(why)
    except OSError:
        pass
    try:
        os.unlink(tmp)
    except OSError:
        pass
    return None


def _sweep(out: str, host: str) -> None:
    """Remove the temporary builds of ``out`` that processes of ``host`` left and no longer write
    (their process is gone); another host's (a shared cache) are left to that host."""
    folder, base = os.path.split(out)
    head = f"{base}.{host}."
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pid = name[len(head):-len(".tmp")] if name.startswith(head) and name.endswith(".tmp") else ""
        if pid.isdigit() and procstat.pid_alive(int(pid)) is False:       # unknown counts as running
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
