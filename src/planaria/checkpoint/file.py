"""Checkpoints in files (a directory every rank can reach, e.g. a parallel file system).

Layout under ``directory``::

    v00000007/rank00003.bin      one file per logical rank
    v00000007/manifest.json      written last, by rank 0: the version is complete only with it

A rank file is ``MAGIC`` + 8-byte little-endian header length + header (a Python literal:
names, dtypes, shapes, offsets) + the packed data. It is written under a temporary name,
fsynced and renamed; after every rank wrote (a gather to rank 0), rank 0 writes the manifest
(per rank: file, size, sha256, dtypes and shapes) the same way, and fsyncs the directory.

What is detected: a missing manifest (the save did not finish), a missing rank file, a rank
file whose size or sha256 differs from the manifest (truncation, corruption, a file from
another save), an unreadable header. Such a version is unusable and ``restorable`` falls
back to the previous complete one. Temporary files never count.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from planaria.checkpoint.store import (
    KEEP, CheckpointError, CheckpointStore, Meta, check_fresh, check_logical, check_version, pack, unpack,
)
from planaria.comm.base import Comm

MAGIC = b"PLNCKPT1"
MANIFEST = "manifest.json"
_VDIR = re.compile(r"^v(\d{8})$")
_BLOCK = 8 << 20
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


def _write_atomic(path: Path, chunks: list[Any]) -> tuple[int, str]:
    """Write ``chunks`` to ``path`` via a temporary name + fsync + rename; return (size, sha256)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    h = hashlib.sha256()
    size = 0
    with open(tmp, "wb") as f:
        for ch in chunks:
            mv = memoryview(ch).cast("B")
            for pos in range(0, len(mv), _BLOCK):
                part = mv[pos:pos + _BLOCK]
                h.update(part)
                f.write(part)
            size += len(mv)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return size, h.hexdigest()


def _header(meta: Meta) -> bytes:
    return repr({"names": list(meta.names), "descrs": list(meta.descrs), "shapes": list(meta.shapes),
                 "offsets": list(meta.offsets), "nbytes": meta.nbytes}).encode()


def _parse(raw: bytearray | bytes) -> tuple[Meta, memoryview]:
    mv = memoryview(raw)
    if len(mv) < len(MAGIC) + 8 or bytes(mv[:len(MAGIC)]) != MAGIC:
        raise CheckpointError("not a planaria checkpoint file (bad magic)")
    hlen = int.from_bytes(mv[len(MAGIC):len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    if hlen > len(mv) - start:
        raise CheckpointError("checkpoint file header runs past the end of the file")
    try:
        h = ast.literal_eval(bytes(mv[start:start + hlen]).decode())
        meta = Meta(tuple(h["names"]), tuple(h["descrs"]), tuple(tuple(s) for s in h["shapes"]),
                    tuple(h["offsets"]), int(h["nbytes"]))
    except (ValueError, SyntaxError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"unreadable checkpoint header: {e}") from None
    data = mv[start + hlen:]
    if len(data) != meta.nbytes:
        raise CheckpointError(f"checkpoint data holds {len(data)} bytes, header says {meta.nbytes}")
    return meta, data


def read_manifest(directory: str | os.PathLike[str], version: int) -> dict[str, Any] | None:
    """The manifest of ``version`` (None when missing or unreadable)."""
    path = Path(directory) / vdir_name(version) / MANIFEST
    try:
        m = json.loads(path.read_text())
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


def _hash_file(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(_BLOCK)
            if not block:
                break
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def _entry_ok(vdir: Path, entry: dict[str, Any]) -> bool:
    path = vdir / entry["file"]
    try:
        if path.stat().st_size != entry["size"]:
            return False
        return _hash_file(path) == (entry["size"], entry["sha256"])
    except (OSError, KeyError, TypeError):
        return False



def _usable_everywhere(comm: Comm, cands: list[int], flags: np.ndarray) -> set[int]:
    """The candidate versions every rank flagged usable (collective: a MIN over the flags)."""
    if not len(cands):
        comm.Barrier()
        return set()
    from mpi4py import MPI
    out = np.zeros_like(flags)
    comm.Allreduce(flags, out, op=MPI.MIN)
    return {v for v, ok in zip(cands, out.tolist()) if ok}

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
        # (path, dev, inode, size, mtime_ns, ctime_ns) -> sha256; see _SETTLED_NS
        self._verified: dict[tuple[str, int, int, int, int, int], str] = {}

    def __repr__(self) -> str:
        return f"FileStore({str(self.directory)!r})"

    # -- save ----------------------------------------------------------------------------------
    def save(self, comm: Comm, version: int, state: dict[str, np.ndarray]) -> None:
        version = check_version(version)
        r = comm.rank
        vdir = self.directory / vdir_name(version)
        if r == 0:
            try:
                (vdir / MANIFEST).unlink()       # a manifest from an abandoned future of this version
            except FileNotFoundError:
                pass
        vdir.mkdir(parents=True, exist_ok=True)
        meta, buf = pack(state)
        hdr = _header(meta)
        path = vdir / rank_file_name(r)
        size, sha = _write_atomic(path, [MAGIC, len(hdr).to_bytes(8, "little"), hdr, buf])
        # not remembered: its ctime is now, so a change in the same clock tick would go unseen
        entry = {"rank": r, "file": path.name, "size": size, "sha256": sha,
                 "arrays": [{"name": nm, "dtype": str(np.dtype(dt)), "shape": list(sh)}
                            for nm, dt, sh in zip(meta.names, meta.dtypes(), meta.shapes)]}
        entries = comm.gather(entry, root=0)
        if r == 0:
            assert entries is not None
            manifest = {"format": 1, "version": version, "nranks": comm.size, "ranks": entries}
            _write_atomic(vdir / MANIFEST, [json.dumps(manifest, indent=1).encode()])
            self._prune(keep_from=None)
        comm.Barrier()

    def _prune(self, keep_from: int | None) -> None:
        """Rank 0: remove versions older than the ``keep`` newest complete ones (and those newer than ``keep_from``)."""
        vs = _listed_versions(self.directory)
        complete = [v for v in vs if read_manifest(self.directory, v) is not None]
        kept = complete[-self.keep:]
        oldest = kept[0] if kept else None
        for v in vs:
            stale = (oldest is not None and v < oldest) or (keep_from is not None and v > keep_from)
            if stale:
                shutil.rmtree(self.directory / vdir_name(v), ignore_errors=True)

    def versions(self) -> set[int]:
        return {v for v in _listed_versions(self.directory) if read_manifest(self.directory, v) is not None}

    # -- checks ----------------------------------------------------------------------------------
    def _rank_ok(self, version: int, manifest: dict[str, Any], rank: int) -> bool:
        try:
            entry = manifest["ranks"][rank]
            if entry["rank"] != rank:
                return False
            path = self.directory / vdir_name(version) / entry["file"]
            st = path.stat()
        except (OSError, KeyError, IndexError, TypeError):
            return False
        if st.st_size != entry["size"]:
            return False
        key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        sha = self._verified.get(key)
        if sha is None:
            settled = time.time_ns() - st.st_ctime_ns >= _SETTLED_NS    # taken before the read
            try:
                size, sha = _hash_file(path)
            except OSError:
                return False
            if size != st.st_size:
                return False
            if settled:
                self._verified[key] = sha
        return sha == entry["sha256"]

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
    def read_rank(self, version: int, rank: int, nranks: int | None = None) -> dict[str, np.ndarray]:
        """Read and verify the state of ``rank`` at ``version`` (no MPI); raises CheckpointError."""
        m = read_manifest(self.directory, version)
        if m is None:
            raise CheckpointError(f"file checkpoint version {version}: no valid manifest in {self.directory}")
        if nranks is not None and m["nranks"] != nranks:
            raise CheckpointError(f"file checkpoint version {version} was written by {m['nranks']} ranks, "
                                  f"not {nranks}")
        try:
            entry = m["ranks"][rank]
        except IndexError:
            raise CheckpointError(f"file checkpoint version {version} has no rank {rank}") from None
        path = self.directory / vdir_name(version) / entry["file"]
        try:
            size = path.stat().st_size
            if size != entry["size"]:
                raise CheckpointError(f"{path}: {size} bytes, manifest says {entry['size']}")
            raw = bytearray(size)
            with open(path, "rb", buffering=0) as f:
                mv = memoryview(raw)
                got = 0
                while got < size:
                    k = f.readinto(mv[got:])
                    if not k:
                        break
                    got += k
        except OSError as e:
            raise CheckpointError(f"{path}: {e}") from None
        if got != size:
            raise CheckpointError(f"{path}: read {got} bytes, expected {size}")
        h = hashlib.sha256()
        for pos in range(0, size, _BLOCK):
            h.update(mv[pos:pos + _BLOCK])
        if h.hexdigest() != entry["sha256"]:
            raise CheckpointError(f"{path}: sha256 differs from the manifest (corrupted)")
        meta, data = _parse(raw)
        return unpack(meta, data, copy=False)     # views of a buffer nobody else keeps

    def restore(self, comm: Comm, version: int, fresh: set[int],
                into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        version = check_version(version)
        check_fresh(comm, fresh)
        out = self.read_rank(version, comm.rank, comm.size)   # ``into`` unused: the read buffer is new anyway
        comm.Barrier()
        if comm.rank == 0:
            self._prune(keep_from=version)
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
        me = logical[comm.rank]
        mine = self.read_rank(version, me, old_size) if me is not None else None
        found = {f: self.read_rank(version, f, old_size) for f in lost if f % comm.size == comm.rank}
        comm.Barrier()
        if comm.rank == 0:
            self._prune(keep_from=version)
        return mine, found

    # -- restart from scratch ------------------------------------------------------------------
    @staticmethod
    def latest_complete(directory: str | os.PathLike[str], nranks: int | None = None,
                        verify: bool = True) -> int | None:
        """The newest version under ``directory`` whose manifest and rank files check out (no MPI).

        ``verify`` hashes every rank file (sha256 against the manifest); without it only
        presence and sizes are checked. ``nranks``: only versions written by that many ranks.
        """
        d = Path(directory)
        for v in reversed(_listed_versions(d)):
            m = read_manifest(d, v)
            if m is None or (nranks is not None and m["nranks"] != nranks):
                continue
            vdir = d / vdir_name(v)
            ok = True
            for i, entry in enumerate(m["ranks"]):
                try:
                    if entry["rank"] != i:
                        ok = False
                    elif verify:
                        ok = _entry_ok(vdir, entry)
                    else:
                        ok = (vdir / entry["file"]).stat().st_size == entry["size"]
                except (OSError, KeyError, TypeError):
                    ok = False
                if not ok:
                    break
            if ok:
                return v
        return None
