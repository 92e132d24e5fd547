"""The file store's I/O: a rank file written from the arrays' own memory, checksummed while it
is fsynced; read back block by block, each block checksummed as soon as it is in.

The checksum is CRC-32 (the CRC of zlib, gzip and Ethernet): it catches every burst of up to 32
flipped bits and any other damage but for one chance in 2**32, which is what a checkpoint file
needs (it guards against damage, not against an adversary). It is computed with ISA-L's
carry-less-multiply kernel (the ``isal`` package, 14 GB/s on one core of the machine the
benchmarks ran on) when that is installed, else with ``zlib.crc32`` (2.6-3.5 GB/s; SHA-256: 1.2
GB/s); both give the same value, so manifests do not depend on which one wrote them. Manifests
written before CRC-32 record SHA-256 and are still read (``digest_of``).
"""
from __future__ import annotations

import errno
import hashlib
import os
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, TypeVar

from planaria.checkpoint.store import Phases

#: the checksum a manifest records for every rank file written now
DIGEST = "crc32"
_IOV_MAX = 512                      # buffers per writev (Linux allows 1024)
# bytes per read of a file's blocks that are not in the page cache, each block checksummed once
# it is in: large, so that the kernel keeps many requests in flight to the disk, where 1 MB reads
# wait for one another behind its readahead window (256 MB evicted from the page cache: 0.17-0.25
# s against 0.21-1.6 s)
_READ_BLOCK = 64 << 20
# bytes per read of blocks that are in the page cache: small, so that the checksum finds each
# block still in the core's cache (a cached 32 MB file read and checksummed: 3.5 ms in 256 KB
# blocks, 5.8 ms in 64 MB blocks, of which the copy alone takes 2.6 ms)
_CACHED_BLOCK = 256 << 10
# a read of only what is in the page cache (Linux); 0 where there is none
_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
# bytes at the start of its rank file that a restore asks the kernel to read ahead as it begins
_PREFETCH = 8 << 20
# the buffer a checksum of a whole file reads into (a file's blocks from the disk, at most this)
_HASH_BUFFER = 8 << 20
# Below this size a save starts its file's writeback on its own thread before checksumming: a
# new thread must first be scheduled, which on a machine with more processes than cores can
# take milliseconds, far more than starting the writeback of a small file (0.1 ms for 2 MB).
_WRITEBACK_THREAD_MIN = 64 << 20


T = TypeVar("T")
#: errors a later try may not meet: the device, or a network file system's server, failed for a
#: moment. "No such file" or "permission denied" are answers, not accidents, and are not retried.
TRANSIENT = frozenset({errno.EIO, errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT, errno.ESTALE})
#: seconds waited before the second and the third try
RETRY_DELAYS = (0.005, 0.05)


def retrying(fn: Callable[[], T]) -> T:
    """``fn()``, tried again after a short wait while it raises an ``OSError`` that may be
    transient (``TRANSIENT``), at most ``len(RETRY_DELAYS)`` times: one failed read while a
    recovery checks or reads the files must not cost a checkpoint version."""
    for delay in RETRY_DELAYS:
        try:
            return fn()
        except OSError as e:
            if e.errno not in TRANSIENT:
                raise
        time.sleep(delay)
    return fn()


def _fast_crc32() -> Callable[[Any, int], int]:
    """ISA-L's ``crc32`` when the ``isal`` package is there (same values as zlib's, 4-5x faster), else zlib's."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.crc32
    fn: Callable[[Any, int], int] = isal_zlib.crc32
    return fn


_crc32 = _fast_crc32()


class Crc32:
    """CRC-32 (``_crc32``: zlib's value) with hashlib's ``update``/``hexdigest``."""

    name = "crc32"

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: Any) -> None:
        self.value = _crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


#: checksums a manifest entry may record, the preferred first
DIGESTS: dict[str, Callable[[], Any]] = {"crc32": Crc32, "sha256": hashlib.sha256}


def new_digest(name: str = DIGEST) -> Any:
    """A new checksum object of ``name`` (``crc32`` or ``sha256``)."""
    return DIGESTS[name]()


def digest_of(entry: dict[str, Any]) -> tuple[str, str] | None:
    """(checksum name, hex value) a manifest entry records, or None when it records none."""
    for name in DIGESTS:
        value = entry.get(name)
        if isinstance(value, str):
            return name, value
    return None


class _Thread:
    """``fn()`` on a helper thread; ``join`` returns its result or raises its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._out: list[Any] = []
        self._err: list[BaseException] = []

        def run() -> None:
            try:
                self._out.append(fn())
            except BaseException as e:       # noqa: BLE001 - handed to join()
                self._err.append(e)
        self._t = threading.Thread(target=run, name="planaria-ckpt-io", daemon=True)
        self._t.start()

    def join(self) -> Any:
        self._t.join()
        if self._err:
            raise self._err[0]
        return self._out[0] if self._out else None


def _libc_sync_file_range() -> Callable[..., int] | None:
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int) -> None:
    """Start writing ``fd``'s dirty pages to the disk without waiting for them (best effort)."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)      # GIL released during the call


def write_all(fd: int, parts: list[memoryview]) -> int:
    """Write every byte of ``parts`` with as few ``os.writev`` calls as the kernel allows."""
    todo = [p for p in parts if len(p)]
    total = 0
    while todo:
        k = os.writev(fd, todo[:_IOV_MAX])
        total += k
        while todo and k >= len(todo[0]):
            k -= len(todo[0])
            todo.pop(0)
        if todo and k:
            todo[0] = todo[0][k:]
    return total


def _writeback_threaded(size: int) -> bool:
    """Whether a file of ``size`` bytes starts its writeback on a helper thread (see ``_WRITEBACK_THREAD_MIN``)."""
    return _SYNC_FILE_RANGE is not None and size >= _WRITEBACK_THREAD_MIN


def write_file(path: str | os.PathLike[str], parts: list[memoryview], fsync: bool, ph: Phases,
               reuse: str | os.PathLike[str] | None = None) -> tuple[int, str, Callable[[], None]]:
    """Write ``parts`` as the file ``path`` with ``writev``, start its writeback to the disk on a
    helper thread and checksum the same bytes meanwhile. Returns (size, checksum, finish):
    ``finish()`` fsyncs the file and closes it.

    ``reuse``: a file that is no longer needed, renamed to ``path`` and overwritten in place,
    so the write lands in page-cache pages that already exist (new pages are first-touch page
    faults, which on a virtual machine can cost more than the copy); else ``path`` is created
    (or truncated). The writeback is started with ``sync_file_range(SYNC_FILE_RANGE_WRITE)``
    (Linux; elsewhere nothing is started early), which leaves the pages cached; on a helper
    thread for large files (``_WRITEBACK_THREAD_MIN``), before the checksum for others; the fsync is
    left to ``finish``, so files fsynced together then share one journal commit."""
    reused = False
    if reuse is not None:
        try:
            os.replace(reuse, path)
            reused = True
        except OSError:
            pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (0 if reused else os.O_TRUNC), 0o644)
    try:
        size = write_all(fd, parts)
        if reused:
            os.ftruncate(fd, size)               # the old file may have been longer
        ph.mark("write")

        helper = None
        if fsync and _writeback_threaded(size):
            helper = _Thread(lambda: start_writeback(fd))
        elif fsync:
            start_writeback(fd)
            ph.mark("writeback")
        h = new_digest()
        for p in parts:
            h.update(p)
        ph.mark("hash")
    except BaseException:
        os.close(fd)
        raise

    def finish() -> None:
        try:
            if helper is not None:
                helper.join()
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        ph.mark("fsync")
    return size, h.hexdigest(), finish


def read_exact(fd: int, n: int) -> bytes:
    """``n`` bytes from ``fd`` (fewer only at the end of the file)."""
    out = bytearray()
    while len(out) < n:
        k = os.read(fd, n - len(out))
        if not k:
            break
        out += k
    return bytes(out)


def prefetch(path: str | os.PathLike[str]) -> None:
    """Ask the kernel to start reading the first ``_PREFETCH`` bytes of ``path`` from the disk now
    (best effort; nothing when it is in the page cache already). A fresh rank's restore does this
    before it reads the manifest, so that the disk works meanwhile and the reads that follow wait
    less often: each wait, on a machine with more busy processes than cores, ends in a queue for
    a core (a 2 MB file out of the page cache, read beside 7 busy processes on 2 cores: median 2.4
    ms against 4.9 ms without; alone, 2.6 against 2.1 ms, so ranks that kept their files do not)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, _PREFETCH, os.POSIX_FADV_WILLNEED)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(fd)


def read_block(fd: int, view: memoryview, offset: int, cached: bool) -> tuple[int, bool]:
    """One read of ``fd`` at ``offset`` into the start of ``view``: (bytes read, whether the next
    block may be in the page cache). While ``cached``, at most ``_CACHED_BLOCK`` bytes, and only
    what the page cache holds (``RWF_NOWAIT``); from the first block that is not all there on,
    ``_READ_BLOCK`` bytes from the disk. 0 bytes: the end of the file."""
    if cached and _NOWAIT:
        want = min(len(view), _CACHED_BLOCK)
        try:
            k = os.preadv(fd, [view[:want]], offset, _NOWAIT)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        else:
            if k:
                return k, k == want
    return os.preadv(fd, [view[:_READ_BLOCK]], offset), False


def read_into(fd: int, dests: list[memoryview], h: Any, ph: Phases) -> int:
    """Fill the buffers ``dests`` in turn from ``fd`` (from its current offset, which it leaves
    after the bytes read), feeding ``h`` each block as it arrives; returns the bytes read (fewer
    than asked only at the end of the file).

    Each block is checksummed right after it is read, while it is still in the cache
    (``read_block``: small blocks while the file is in the page cache, large ones from the
    disk, where the kernel's readahead fetches the next blocks meanwhile). No helper thread: with
    more processes than cores it waits for a core, and handing it each block cost more than the
    checksum (ISA-L: under 0.1 ms per block)."""
    got, offset, cached = 0, os.lseek(fd, 0, os.SEEK_CUR), True
    for dest in dests:
        pos = 0
        while pos < len(dest):
            k, cached = read_block(fd, dest[pos:], offset, cached)
            if not k:                              # the end of the file
                break
            h.update(dest[pos:pos + k])
            pos, offset, got = pos + k, offset + k, got + k
        if pos < len(dest):
            break
    os.lseek(fd, offset, os.SEEK_SET)
    ph.mark("read")
    return got


def hash_rest(fd: int, size: int, h: Any) -> int:
    """Feed ``h`` the bytes of ``fd`` from its current offset to its end (``size``: the file's
    size, for the buffer), read as ``read_into`` reads them into one buffer used for every block;
    the bytes read."""
    buf = memoryview(bytearray(max(1, min(size, _HASH_BUFFER))))
    got, offset, cached = 0, os.lseek(fd, 0, os.SEEK_CUR), True
    while True:
        k, cached = read_block(fd, buf, offset, cached)
        if not k:
            return got
        h.update(buf[:k])
        offset, got = offset + k, got + k
