"""Checkpoints in files (a directory every rank can reach, e.g. a parallel file system).

Layout under ``directory``::

    v00000007/rank00003.bin      one file per logical rank
    v00000007/manifest.json      written by rank 0: the version counts only with it

A rank file is ``MAGIC`` + 8-byte little-endian header length + header (a Python literal:
names, dtypes, shapes, offsets) + the data of each array, written with one ``writev`` from the
arrays' own memory (no packed copy). A save: every rank writes its file (from the second save on
with ``keep >= 2``, over its file of the oldest version kept, renamed: double buffering, as in
the memory stores, so the writes land in page-cache pages that exist already), starts its
writeback and checksums it (CRC-32) meanwhile; rank 0 gathers every rank's entry (file, size,
checksum, dtypes and shapes); every other rank fsyncs its file as soon as its entry is sent,
while rank 0 writes the manifest and then fsyncs its file, the manifest and the directory; an
agreement ends the save (if any rank failed, every rank raises and rank 0 removes the manifest).
Rank 0 then deletes the versions older than the ``keep`` newest complete ones, in the
background, the version whose files the save took among them: its manifest stays until then,
and that version does not count meanwhile (its rank files are gone from its directory, or differ
from its manifest). Removed when the save begins, that manifest would put a file removal on
rank 0's path, where it waits behind the journal commits the ranks' fsyncs start (1-4 ms at 2 MB
per rank, up to 75 ms at 256 MB, measured).

The manifest can reach the disk before a rank file does: what makes a version usable is its
manifest *and* every rank file matching the size and checksum the manifest records, which
``restorable`` (and ``latest_complete``) check. What is detected: a missing manifest (the save
did not finish), a manifest cut short (not valid JSON), a missing rank file, a rank file whose
size or checksum differs from the manifest (truncation, corruption, a file from another save,
a save cut short), an unreadable header. Such a version is unusable and ``restorable`` falls back
to the previous complete one. Manifests written before CRC-32 record SHA-256, which is checked
instead (``_fileio.digest_of``).
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from planaria.checkpoint._fileio import (
    DIGEST, digest_of, hash_rest, new_digest, prefetch, read_exact, read_into, retrying, write_file,
)
from planaria.checkpoint.store import (
    KEEP, WARM, CheckpointError, CheckpointStore, Meta, Phases, SaveFailed, Verdict, all_true, check_fresh,
    check_logical, check_version, describe, unpack, wait_sends,
)
from planaria.comm.base import Comm

MAGIC = b"PLNCKPT1"
MANIFEST = "manifest.json"
_VDIR = re.compile(r"^v(\d{8})$")
# A verified hash is reused for a rank file only while its (device, inode, size, mtime, ctime)
# are those it had when it was hashed. Size and mtime alone do not do: whoever can write the
# file can also set its mtime back with os.utime, and a flipped bit then passed as verified
# (found by damaging checkpoint files between runs). The ctime cannot be set by a user: every
# write, utime, chmod or rename sets it to the current time, and a file replaced under the same
# name has another inode. File-system clocks may be coarse (one kernel tick, a few ms, or a
# server's clock on NFS), so a change in the same tick as the hashed state could keep the ctime
# (git's "racy clean" problem): a result is therefore kept only if, when the file was read, its
# ctime was at least _SETTLED_NS old; a file changed more recently is hashed again next time.
# Hashing every time would also be safe, but costs a full read of each rank's file at every
# recovery; with this rule that read happens once per file, or while the file is very new.
_SETTLED_NS = 1_000_000_000
# A rank that read its file sleeps this long between tests for the fresh rank's verdict instead
# of spinning: the ranks still reading and checksumming theirs (and the fresh rank) get its core
# (8 ranks on 2 cores, 32 MB per rank: the fresh rank's restore 31-34 ms against 39-40 ms).
_VERDICT_NAP = 100e-6


def vdir_name(version: int) -> str:
    return f"v{version:08d}"


def rank_file_name(rank: int) -> str:
    return f"rank{rank:05d}.bin"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_manifest(path: Path, data: bytes) -> None:
    """The manifest under its own name (fsynced by the caller, with the rank files). Not written
    under a temporary name and renamed: a manifest cut short by a crash is not valid JSON, and
    ``read_manifest`` rejects it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        mv = memoryview(data)
        while mv:
            mv = mv[os.write(fd, mv):]
    finally:
        os.close(fd)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_rank(path: Path, parts: list[memoryview], fsync: bool, ph: Phases,
                reuse: Path | None = None) -> tuple[int, str, Callable[[], None]]:
    """A rank file, written under its own name (only a manifest that matches it makes it count):
    (size, checksum, finish); see ``write_file``."""
    return write_file(path, parts, fsync, ph, reuse)


def _header(meta: Meta) -> bytes:
    return repr({"names": list(meta.names), "descrs": list(meta.descrs), "shapes": list(meta.shapes),
                 "offsets": list(meta.offsets), "nbytes": meta.nbytes}).encode()


@lru_cache(maxsize=64)
def _described(text: bytes) -> Meta:
    """The description a header's text holds, parsed once per distinct text (a rank's file holds
    the same one save after save; parsing it costs about 40 us, a fifth of reading 2 MB)."""
    h = ast.literal_eval(text.decode())
    return Meta(tuple(h["names"]), tuple(h["descrs"]), tuple(tuple(s) for s in h["shapes"]),
                tuple(h["offsets"]), int(h["nbytes"]))


def _parse_header(head: bytes, size: int) -> Meta:
    """The description in ``head`` (magic, header length, header) of a rank file of ``size`` bytes."""
    start = len(MAGIC) + 8
    if len(head) < start or head[:len(MAGIC)] != MAGIC:
        raise CheckpointError("not a planaria checkpoint file (bad magic)")
    hlen = int.from_bytes(head[len(MAGIC):start], "little")
    if hlen > size - start or len(head) < start + hlen:
        raise CheckpointError("checkpoint file header runs past the end of the file")
    try:
        meta = _described(bytes(head[start:start + hlen]))
    except (ValueError, SyntaxError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"unreadable checkpoint header: {e}") from None
    if size - start - hlen != meta.nbytes:
        raise CheckpointError(f"checkpoint data holds {size - start - hlen} bytes, header says {meta.nbytes}")
    return meta


def _matching(meta: Meta, into: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """``into``'s arrays for every array of ``meta`` (same name, dtype, shape; C-contiguous, writeable,
    not overlapping each other), in ``meta``'s order; None unless all of them qualify."""
    out: dict[str, np.ndarray] = {}
    spans = []
    for name, dt, shape in zip(meta.names, meta.dtypes(), meta.shapes, strict=True):
        a = into.get(name)
        if not (isinstance(a, np.ndarray) and a.dtype == dt and a.shape == tuple(shape)
                and a.flags.c_contiguous and a.flags.writeable):
            return None
        out[name] = a
        if a.nbytes:
            start = a.__array_interface__["data"][0]
            spans.append((start, start + a.nbytes))
    spans.sort()
    if any(b[0] < a[1] for a, b in pairwise(spans)):
        return None
    return out


def read_manifest(directory: str | os.PathLike[str], version: int) -> dict[str, Any] | None:
    """The manifest of ``version`` (None when missing or unreadable)."""
    # os, not pathlib: every rank of a restore reads a manifest first thing, caches cold (a third less)
    path = os.path.join(directory, vdir_name(version), MANIFEST)
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            m = json.loads(read_exact(fd, os.fstat(fd).st_size))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    if not isinstance(m, dict) or m.get("version") != version or not isinstance(m.get("ranks"), list):
        return None
    if len(m["ranks"]) != m.get("nranks"):
        return None
    return m


def _listed_versions(directory: Path) -> list[int]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(mo.group(1)) for mo in map(_VDIR.match, names) if mo)


def _hash_file(path: Path, name: str = DIGEST) -> tuple[int, str]:
    """(size, checksum ``name``) of the file at ``path``; a transient read error is retried."""
    return retrying(lambda: _hash_once(path, name))


def _hash_once(path: Path, name: str) -> tuple[int, str]:
    h = new_digest(name)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = hash_rest(fd, os.fstat(fd).st_size, h)
    finally:
        os.close(fd)
    return size, h.hexdigest()


def _entry(manifest: dict[str, Any], rank: int) -> dict[str, Any] | None:
    """Rank ``rank``'s entry of ``manifest`` when it is well formed (that rank, a bare file name, an
    integer size and a checksum), else None: a manifest damaged in a way JSON still parses (a
    flipped bit in a key) must count as one without that rank, never raise."""
    try:
        e = manifest["ranks"][rank]
    except (IndexError, KeyError, TypeError):
        return None
    if (isinstance(e, dict) and e.get("rank") == rank and _bare_name(e.get("file"))
            and type(e.get("size")) is int and digest_of(e) is not None):
        return e
    return None


def _bare_name(name: Any) -> bool:
    """Whether ``name`` names a file in the version's own directory (no separator, not . or ..):
    a manifest can never make a restore read a file elsewhere."""
    return (isinstance(name, str) and name not in ("", ".", "..") and os.path.basename(name) == name
            and "\0" not in name)


def _entry_ok(vdir: Path, entry: dict[str, Any], verify: bool,
              verified: dict[tuple[Any, ...], str] | None = None) -> bool:
    """Whether the rank file of a well-formed ``entry`` (``_entry``) has its size and, with
    ``verify``, its checksum. ``verified``: checksums already computed, by the file's (path,
    device, inode, size, mtime, ctime, digest), used and added to (see ``_SETTLED_NS``)."""
    path = vdir / entry["file"]
    want = digest_of(entry)
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != entry["size"] or want is None:
        return False
    if not verify:
        return True
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, want[0])
    got = verified.get(key) if verified is not None else None
    if got is None:
        settled = time.time_ns() - st.st_ctime_ns >= _SETTLED_NS    # taken before the read
        try:
            size, got = _hash_file(path, want[0])
        except OSError:
            return False
        if size != st.st_size:
            return False
        if settled and verified is not None:
            verified[key] = got
    return got == want[1]


def _usable_everywhere(comm: Comm, cands: list[int], flags: np.ndarray) -> set[int]:
    """The candidate versions every rank flagged usable (collective: a MIN over the flags)."""
    if not len(cands):
        comm.Barrier()
        return set()
    from mpi4py import MPI
    out = np.zeros_like(flags)
    comm.Allreduce(flags, out, op=MPI.MIN)
    return {v for v, ok in zip(cands, out.tolist(), strict=True) if ok}


def _write_root_manifest(vdir: Path, version: int, nranks: int,
                         entries: list[dict[str, Any] | None]) -> tuple[int, OSError | None]:
    """Rank 0: the version's manifest, when every rank wrote its file; (1 if written, the error)."""
    if not all(e is not None for e in entries):
        return 0, None
    manifest = {"format": 2, "version": version, "nranks": nranks, "ranks": entries}
    try:
        # no ``indent``: with it json encodes in Python, 5x slower than its C encoder, on rank 0
        # between the gather and the fsync (about 1 ms per 1,000 ranks); ``python -m json.tool`` shows it
        _write_manifest(vdir / MANIFEST, json.dumps(manifest).encode())
    except OSError as e:
        return 0, e
    return 1, None


def _read_everywhere(comm: Comm, verdict: Verdict | None, listening: tuple[np.ndarray, list[Any]] | None,
                     ok: bool) -> bool:
    """Whether every rank read its file (``ok`` here): the fresh rank's verdict on the others'
    statuses (``listening``: on it, its receives of them), or an agreement without ``verdict``."""
    if verdict is None:
        return all_true(comm, ok)
    if listening is None:                        # not the fresh rank: tell it, hear its verdict
        sends = verdict.tell(0 if ok else -1)
        out = verdict.outcome(nap=_VERDICT_NAP)
        wait_sends(sends)
        return out
    status, reqs = listening
    for q in reqs:
        q.Wait()
    out = ok and bool((status >= 0).all())
    verdict.announce(out)
    return out


class FileStore(CheckpointStore):
    """Checkpoints as per-rank files plus a manifest written last (see the module docstring).

    Needs no duplication: the files outlive the processes (on a shared file system, every
    rank and every replacement can read them). ``fresh`` ranks simply read their rank's file.
    """

    name = "file"
    speed_rank = 2

    def __init__(self, directory: str | os.PathLike[str], keep: int = KEEP, fsync: bool = True) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, not {keep}")
        self.directory = Path(directory)
        self.keep = int(keep)
        self.fsync = fsync
        # (path, dev, inode, size, mtime_ns, ctime_ns, checksum name) -> its value; see _SETTLED_NS
        self._verified: dict[tuple[str, int, int, int, int, int, str], str] = {}
        self._footprint: list[int] = []
        self._pruner: threading.Thread | None = None
        self._saved: list[int] = []          # versions this store saved (and kept), oldest first

    def __repr__(self) -> str:
        return f"FileStore({str(self.directory)!r})"

    # -- save ----------------------------------------------------------------------------------
    def save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        """Each rank writes its file straight from its arrays, then checksums it while the disk
        takes it; rank 0 writes the manifest (a gather of the checksums) while the others fsync
        their files, then fsyncs its own, the manifest and the directory; an agreement ends the save.

        Double buffering, as the memory stores: once ``keep`` (>= 2) versions were saved, each
        rank renames its file of the oldest one to its new file and overwrites it, so the newest
        complete version stays untouched. The manifest may reach the disk before some rank file:
        a version counts only when every rank file matches the size and checksum its manifest
        records, which ``restorable`` checks, so a crash before the save ended leaves a version
        that does not count. If any rank fails to write, every rank raises ``SaveFailed`` (with
        that rank's ``OSError`` as the cause there) and rank 0 removes the manifest.
        """
        ph = Phases()
        version = check_version(version)
        r = comm.rank
        self._join_prune()                       # the previous save's deletions, normally long done
        ph.mark("prune")
        old, vdir = self._begin(version, r)
        meta = describe(state)
        hdr = _header(meta)
        parts = [memoryview(MAGIC + len(hdr).to_bytes(8, "little") + hdr)]
        # ndarrays export the buffer protocol; numpy's stubs do not declare it
        parts += [memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))  # type: ignore[arg-type]
                  for a in state.values() if a.nbytes]
        ph.mark("prepare")
        reuse = self.directory / vdir_name(old) / rank_file_name(r) if old is not None else None
        entry, finish, problem = self._write_own(vdir, r, meta, parts, ph, reuse)
        entries = comm.gather(entry, root=0)
        ph.mark("gather")
        written = 0
        if r == 0 and problem is None:
            assert entries is not None
            written, problem = _write_root_manifest(vdir, version, comm.size, entries)
            ph.mark("manifest")
        if finish is not None:
            synced = self._commit(finish, r == 0 and bool(written), vdir)
            problem = problem or synced
        ok = all_true(comm, problem is None)
        ph.mark("agree")
        if not ok:
            if r == 0:
                try:
                    (vdir / MANIFEST).unlink()
                except OSError:
                    pass
            why = problem if problem is not None else "another rank could not write its file"
            raise SaveFailed(f"file checkpoint version {version} was not saved: {why}") from problem
        self._footprint = [meta.nbytes]
        self._saved = (self._saved + [version])[-self.keep:]
        if r == 0:
            self._prune_later(keep_from=None)
        self.last_save = ph.out

    def _begin(self, version: int, r: int) -> tuple[int | None, Path]:
        """The version whose files this save overwrites (None: new files) and the version's directory;
        rank 0 removes a manifest of this version left from an abandoned future."""
        self._saved = [v for v in self._saved if v < version]
        old = self._saved[0] if self.keep >= 2 and len(self._saved) >= self.keep else None
        if r == 0:
            # it may not count any more (normally there is none, and finding none costs a lookup);
            # the manifest of ``old`` goes with its directory once the save is done (see above)
            (self.directory / vdir_name(version) / MANIFEST).unlink(missing_ok=True)
        return old, self.directory / vdir_name(version)

    def _write_own(self, vdir: Path, r: int, meta: Any, parts: list[memoryview], ph: Phases,
                   reuse: Path | None) -> tuple[dict[str, Any] | None, Callable[[], None] | None, OSError | None]:
        """Write this rank's file: its manifest entry, what puts it on disk, or the error."""
        path = vdir / rank_file_name(r)
        try:
            vdir.mkdir(parents=True, exist_ok=True)
            size, digest, finish = _write_rank(path, parts, self.fsync, ph, reuse)
        except OSError as e:
            return None, None, e
        # not remembered: its ctime is now, so a change in the same clock tick would go unseen
        entry = {"rank": r, "file": path.name, "size": size, DIGEST: digest,
                 "arrays": [{"name": nm, "dtype": str(np.dtype(dt)), "shape": list(sh)}
                            for nm, dt, sh in zip(meta.names, meta.dtypes(), meta.shapes, strict=True)]}
        return entry, finish, None

    def _commit(self, finish: Callable[[], None], manifest: bool, vdir: Path) -> OSError | None:
        """Put this rank's file on disk (and, at rank 0 once it is written, the manifest and the
        directory); the error, if any."""
        try:
            finish()                         # this rank's file is on disk
            if manifest and self.fsync:
                _fsync_path(vdir / MANIFEST)
                _fsync_dir(vdir)             # the manifest's name, and the rank files' beside it
        except OSError as e:
            return e
        return None

    def footprint(self) -> list[int]:
        """The data size of this rank's last save: a fresh rank reads its file into a buffer of it."""
        return list(self._footprint)

    def _prune_later(self, keep_from: int | None) -> None:
        """Rank 0: ``_prune`` on a helper thread (deleting files takes time nobody needs to wait for);
        every call of this store that reads the directory first waits for it to finish."""
        self._join_prune()
        self._pruner = threading.Thread(target=self._prune, args=(keep_from,), name="planaria-ckpt-prune")
        self._pruner.start()

    def _join_prune(self) -> None:
        if self._pruner is not None:
            self._pruner.join()
            self._pruner = None

    def _prune(self, keep_from: int | None) -> None:
        """Remove versions older than the ``keep`` newest complete ones up to ``keep_from``, and those
        newer than ``keep_from`` (a restore of ``keep_from``); ``None``: no upper bound."""
        vs = _listed_versions(self.directory)
        complete = [v for v in vs if (keep_from is None or v <= keep_from)
                    and read_manifest(self.directory, v) is not None]
        kept = complete[-self.keep:]
        oldest = kept[0] if kept else None
        for v in vs:
            stale = (oldest is not None and v < oldest) or (keep_from is not None and v > keep_from)
            if stale:
                shutil.rmtree(self.directory / vdir_name(v), ignore_errors=True)

    def versions(self) -> set[int]:
        """The ``keep`` newest versions with a manifest (older ones may still be being deleted)."""
        self._join_prune()
        complete = [v for v in _listed_versions(self.directory) if read_manifest(self.directory, v) is not None]
        return set(complete[-self.keep:])

    def wait_pruned(self) -> None:
        """Wait until the deletion of old versions a save started (on rank 0, in the background) is done."""
        self._join_prune()

    # -- checks ----------------------------------------------------------------------------------
    def _rank_ok(self, version: int, manifest: dict[str, Any], rank: int) -> bool:
        """Whether rank ``rank``'s file of ``version`` matches ``manifest`` (a checksum computed
        before is reused while the file is unchanged)."""
        entry = _entry(manifest, rank)
        return entry is not None and _entry_ok(self.directory / vdir_name(version), entry, True, self._verified)

    def restorable_versions(self, comm: Comm, fresh: set[int]) -> set[int]:
        check_fresh(comm, fresh)
        cands = None
        if comm.rank == 0:
            cands = [v for v in _listed_versions(self.directory)
                     if (m := read_manifest(self.directory, v)) is not None and m["nranks"] == comm.size]
        cands = comm.bcast(cands, root=0)
        mine = [v for v in cands if (m := read_manifest(self.directory, v)) is not None
                and self._rank_ok(v, m, comm.rank)]
        flags = np.array([1 if v in mine else 0 for v in cands], dtype=np.int32)
        return _usable_everywhere(comm, cands, flags)

    # -- restore ---------------------------------------------------------------------------------
    def read_rank(self, version: int, rank: int, nranks: int | None = None, ph: Phases | None = None,
                  into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Read and verify the state of ``rank`` at ``version`` (no MPI); raises CheckpointError.
        A read error that may be transient is tried again twice (``retrying``).

        With ``into`` holding, for every array of the checkpoint, an array of the same name,
        dtype and shape (C-contiguous, writeable, not overlapping another), the data is read
        straight into those arrays, which are returned; on a CheckpointError they may hold part
        of the checkpoint. Otherwise the arrays returned are views of one new buffer."""
        ph = ph or Phases()
        m = read_manifest(self.directory, version)
        if m is None:
            raise CheckpointError(f"file checkpoint version {version}: no valid manifest in {self.directory}")
        if nranks is not None and m["nranks"] != nranks:
            raise CheckpointError(f"file checkpoint version {version} was written by {m['nranks']} ranks, "
                                  f"not {nranks}")
        entry = _entry(m, rank)
        want = digest_of(entry) if entry is not None else None
        if entry is None or want is None:
            raise CheckpointError(f"file checkpoint version {version}: the manifest holds no valid entry "
                                  f"(file, size, checksum) for rank {rank}")
        path = os.path.join(self.directory, vdir_name(version), entry["file"])
        taken: list[np.ndarray] = []             # the buffer of a first try, used again by the next

        def once() -> tuple[int, bytes, Meta, dict[str, np.ndarray] | None, Any, Any, int]:
            ph.mark("open")
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                if size != entry["size"]:
                    raise CheckpointError(f"{path}: {size} bytes, manifest says {entry['size']}")
                start = len(MAGIC) + 8
                head = read_exact(fd, start)
                if len(head) == start:
                    head += read_exact(fd, min(int.from_bytes(head[len(MAGIC):], "little"), size - start))
                h = new_digest(want[0])
                h.update(head)
                meta = _parse_header(head, size)
                mine = _matching(meta, into) if into else None
                buf = None
                if mine is None:                 # into memory a waiting spare faulted in (``footprint``), else new
                    if not taken or taken[0].nbytes != meta.nbytes:
                        taken[:] = [WARM.take(meta.nbytes)]
                    buf = taken[0]
                    views = [memoryview(buf)]  # type: ignore[arg-type]  # an ndarray: a buffer, unknown to numpy's stubs
                else:                            # straight into the arrays the rank holds
                    views = [memoryview(a.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # as above
                             for a in mine.values() if a.nbytes]
                ph.mark("read")
                return size, head, meta, mine, buf, h, read_into(fd, views, h, ph)
            finally:
                os.close(fd)

        try:
            size, head, meta, mine, buf, h, got = retrying(once)
        except OSError as e:
            raise CheckpointError(f"{path}: {e}") from None
        if got != meta.nbytes:
            raise CheckpointError(f"{path}: read {len(head) + got} bytes, expected {size}")
        if h.hexdigest() != want[1]:
            raise CheckpointError(f"{path}: {want[0]} checksum differs from the manifest (corrupted)")
        if mine is not None:
            return mine
        return unpack(meta, buf, copy=False)     # views of a buffer nobody else keeps

    def restore(self, comm: Comm, version: int, fresh: set[int],
                into: dict[str, np.ndarray] | None = None, offers: list[Any] | None = None) -> dict[str, np.ndarray]:
        """Every rank reads and verifies its own file; then every rank raises ``CheckpointError``
        when any rank could not. With one fresh rank, each other rank tells it whether it could
        and it tells them the outcome (``Verdict``): its restore ends once its own read is checked
        and their statuses are in, without the rounds of a collective; else one agreement (an
        ``Allreduce``). With ``into`` the data is read straight into the arrays that match (see
        ``read_rank``). ``offers``: not used (this store agrees on versions through ``restorable``)."""
        del offers
        ph = Phases()
        version = check_version(version)
        fresh = check_fresh(comm, fresh)
        if comm.rank in fresh:                   # its file is the one likely out of the page cache
            prefetch(os.path.join(self.directory, vdir_name(version), rank_file_name(comm.rank)))  # as the manifest names it
        self._join_prune()
        verdict = Verdict(comm, fresh) if len(fresh) == 1 else None
        listening = verdict.listen() if verdict is not None and comm.rank in fresh else None
        out, problem = None, None
        try:
            out = self.read_rank(version, comm.rank, comm.size, ph, into=into)
        except CheckpointError as e:
            problem = e
        ok = _read_everywhere(comm, verdict, listening, problem is None)
        ph.mark("agree")
        if not ok:
            raise problem or CheckpointError(f"file checkpoint version {version}: another rank could not "
                                             "read its file")
        if comm.rank == 0:
            self._prune(keep_from=version)   # the newer versions go now: they belong to an abandoned future
        self._saved = [v for v in self._saved if v <= version]
        self.last_restore = ph.out
        assert out is not None
        return out

    # -- continuing on fewer ranks ---------------------------------------------------------------
    def recoverable_lost_versions(self, comm: Comm, logical: list[int | None], old_size: int) -> set[int]:
        """Versions written by ``old_size`` ranks whose files check out: each survivor verifies its own
        file, and the file of lost rank ``f`` is verified by rank ``f % comm.size`` (who reads it)."""
        lost = check_logical(comm, logical, old_size)
        cands = None
        if comm.rank == 0:
            cands = [v for v in _listed_versions(self.directory)
                     if (m := read_manifest(self.directory, v)) is not None and m["nranks"] == old_size]
        cands = comm.bcast(cands, root=0)
        me = logical[comm.rank]
        mine_to_read = ([me] if me is not None else []) + [f for f in lost if f % comm.size == comm.rank]
        flags = np.zeros(len(cands), dtype=np.int32)
        for k, v in enumerate(cands):
            m = read_manifest(self.directory, v)
            flags[k] = int(m is not None and m["nranks"] == old_size
                           and all(self._rank_ok(v, m, x) for x in mine_to_read))
        return _usable_everywhere(comm, cands, flags)

    def recover_lost(self, comm: Comm, version: int, logical: list[int | None],
                     old_size: int) -> tuple[dict[str, np.ndarray] | None, dict[int, dict[str, np.ndarray]]]:
        """Every survivor reads its own file; the file of lost rank ``f`` is read by rank ``f % comm.size``."""
        version = check_version(version)
        lost = check_logical(comm, logical, old_size)
        self._join_prune()
        me = logical[comm.rank]
        mine = self.read_rank(version, me, old_size) if me is not None else None
        found = {f: self.read_rank(version, f, old_size) for f in lost if f % comm.size == comm.rank}
        comm.Barrier()
        if comm.rank == 0:
            self._prune(keep_from=version)
        self._saved = []                     # the files of the old layout are not recycled
        return mine, found

    # -- restart from scratch ------------------------------------------------------------------
    @staticmethod
    def latest_complete(directory: str | os.PathLike[str], nranks: int | None = None,
                        verify: bool = True) -> int | None:
        """The newest version under ``directory`` whose manifest and rank files check out (no MPI).

        ``verify`` checksums every rank file (CRC-32, or the SHA-256 of older manifests); without it only
        presence and sizes are checked. ``nranks``: only versions written by that many ranks.
        """
        d = Path(directory)
        for v in reversed(_listed_versions(d)):
            m = read_manifest(d, v)
            if m is None or (nranks is not None and m["nranks"] != nranks):
                continue
            vdir = d / vdir_name(v)
            if all((e := _entry(m, i)) is not None and _entry_ok(vdir, e, verify) for i in range(len(m["ranks"]))):
                return v
        return None
