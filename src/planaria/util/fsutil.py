"""Small file-system helpers: atomic writes (temporary file in the same directory, fsync, rename)."""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def _replacing(target: Path, suffix: str) -> Iterator[tuple[int, str]]:
    """A temporary file beside ``target`` (its descriptor and path) for the body to write and rename
    onto ``target``; on an error it is removed, after the body the directory is fsynced."""
    import tempfile     # (with random) not on the way to mpiexec: planaria run's first write follows it

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=str(target.parent))
    try:
        yield fd, tmp
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(target.parent)


@contextmanager
def atomic_output(path: str | os.PathLike[str], suffix: str = ".tmp", mode: int = 0o644) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on a clean exit it is fsynced, given
    ``mode`` and renamed onto ``path`` (then the directory is fsynced), on an error removed.

    For writers that stream or need a file name (a raster library); ``atomic_write`` for bytes.
    """
    target = Path(path)
    with _replacing(target, suffix) as (fd, tmp):
        os.close(fd)
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)


def atomic_write(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same dir, fsync, rename)."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    with _replacing(target, ".tmp") as (fd, tmp):
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    return target


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename in directory ``path`` durable (best effort: some file systems refuse)."""
    try:
        dfd = os.open(str(path), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def output_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``atomic_write`` could not write ``path`` (a directory, a missing or read-only
    directory), checked before work whose result would be lost; None when it can."""
    p = Path(path)
    if p.is_dir():
        return "is a directory"
    if not p.parent.is_dir():
        return f"directory {p.parent} does not exist"
    if not os.access(p.parent, os.W_OK | os.X_OK):
        return f"directory {p.parent} is not writable"
    return None
