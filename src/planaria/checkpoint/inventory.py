"""What file checkpoints a directory holds, read without MPI: ``planaria checkpoints``.

For every version directory of a ``FileStore``: its manifest (ranks, sizes, checksums), which
rank files are there and match it (by size; with ``verify``, by re-reading each file and
checking its checksum, CRC-32 or the SHA-256 of older manifests), and the version a restart would
resume from, chosen by ``FileStore.latest_complete`` itself. A ``MultiLevel`` store writes the
description of its levels (``multilevel.json``) into each file level's directory; memory and XOR
levels live in the processes' memory and are never visible here.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from planaria.checkpoint._fileio import digest_of
from planaria.checkpoint.file import (
    MANIFEST, FileStore, _bare_name, _hash_file, _listed_versions, read_manifest, vdir_name,
)
from planaria.checkpoint.multilevel import LEVELS_FILE

#: the version of the ``--json`` structure
FORMAT = 1
_RANK_FILE = re.compile(r"^rank(\d{5})\.bin$")
_SEARCH_DEPTH = 3           # how deep under a job directory store directories are looked for


@dataclass
class RankFile:
    """One rank's file of a version: what the manifest records and what is on disk."""

    rank: int
    file: str
    size: int | None                 # on disk (None: missing)
    expected_size: int | None        # in the manifest (None: no manifest)
    checksum_kind: str | None        # crc32, sha256
    checksum: str | None             # the manifest's value
    status: str                      # ok, present, missing, wrong-size, damaged, unreadable, no-checksum, unlisted, bad-name


@dataclass
class Version:
    """One version directory of a store."""

    version: int
    directory: str                   # the store's directory
    level: int | None                # its level in a MultiLevel store (1-based), None otherwise
    manifest: bool
    nranks: int | None               # ranks the manifest names
    ranks: list[RankFile]
    total_bytes: int
    status: str                      # complete, incomplete, damaged, no-manifest
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.status == "complete"


@dataclass
class Store:
    """One ``FileStore`` directory, and its level when a ``MultiLevel`` store wrote it."""

    directory: str
    multilevel: dict[str, Any] | None
    restart_version: int | None      # FileStore.latest_complete's choice
    versions: list[Version]


@dataclass
class Inventory:
    """Every store directory found, and the version a restart would resume from."""

    verified: bool
    nranks: int | None               # only versions of that many ranks count for a restart (None: any)
    stores: list[Store]
    restart_version: int | None      # the newest any level gives back (MultiLevel.restorable's rule)
    restart_directory: str | None
    unverified_choice: int | None    # the choice by sizes only: differs from restart_version when damaged

    @property
    def damaged_choice(self) -> bool:
        """True when verifying found the version a restart would take by appearances damaged."""
        return self.verified and self.unverified_choice != self.restart_version

    def to_json(self) -> dict[str, Any]:
        """The documented ``--json`` structure (docs/checkpoint.md)."""
        stores = [{"directory": s.directory, "multilevel": s.multilevel, "restart_version": s.restart_version}
                  for s in self.stores]
        versions = [asdict(v) | {"complete": v.complete} for s in self.stores for v in s.versions]
        versions.sort(key=lambda v: (v["version"], v["level"] or 0, v["directory"]))
        out: dict[str, Any] = {
            "format": FORMAT, "verified": self.verified, "nranks": self.nranks,
            "restart": {"version": self.restart_version, "directory": self.restart_directory,
                        "damaged_choice": self.damaged_choice, "unverified_choice": self.unverified_choice},
            "stores": stores, "versions": versions}
        return out


def is_store_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` looks like a ``FileStore`` directory (version directories, or a levels' description)."""
    p = Path(path)
    return p.is_dir() and (bool(_listed_versions(p)) or (p / LEVELS_FILE).is_file())


def find_stores(root: str | os.PathLike[str], depth: int = _SEARCH_DEPTH) -> list[Path]:
    """Store directories at or under ``root`` (at most ``depth`` levels down), plus the other file
    levels the ``multilevel.json`` of those found name; sorted, without repeats."""
    found: list[Path] = []
    todo = [(Path(root), 0)]
    while todo:
        p, d = todo.pop()
        if is_store_dir(p):
            found.append(p)
            continue
        if d < depth:
            try:
                subs = [Path(e.path) for e in os.scandir(p) if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            todo += [(s, d + 1) for s in subs]
    for p in list(found):
        for lv in (read_levels(p) or {}).get("levels", []):
            other = lv.get("directory") if isinstance(lv, dict) else None
            if other and is_store_dir(other) and all(not os.path.samefile(other, f) for f in found):
                found.append(Path(other))
    return sorted(found)


def read_levels(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``MultiLevel`` description in a file level's directory (None when absent or unreadable)."""
    try:
        m = json.loads((Path(directory) / LEVELS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and isinstance(m.get("levels"), list) else None


def _check_rank(vdir: Path, entry: dict[str, Any], rank: int, verify: bool) -> RankFile:
    """A rank's file against its manifest entry (size always, checksum with ``verify``)."""
    want = digest_of(entry)
    name = str(entry.get("file", ""))
    rf = RankFile(rank, name, None, entry.get("size"), want[0] if want else None, want[1] if want else None, "present")
    if not _bare_name(name):             # never a file outside the version's directory
        rf.status = "bad-name"
        return rf
    try:
        rf.size = (vdir / name).stat().st_size
    except OSError:
        rf.status = "missing"
        return rf
    if entry.get("rank") != rank or rf.size != rf.expected_size:
        rf.status = "wrong-size" if entry.get("rank") == rank else "unlisted"
        return rf
    if want is None:
        rf.status = "no-checksum"
    elif verify:
        try:
            size, got = _hash_file(vdir / name, want[0])
        except OSError:
            rf.status = "unreadable"
            return rf
        rf.status = "ok" if (size, got) == (rf.expected_size, want[1]) else "damaged"
    return rf


def _problem(rf: RankFile) -> str:
    what = {"missing": "missing", "wrong-size": f"{rf.size} bytes, the manifest says {rf.expected_size}",
            "damaged": f"{rf.checksum_kind} checksum differs from the manifest (damaged)",
            "unreadable": "cannot be read", "no-checksum": "the manifest records no checksum",
            "unlisted": "the manifest's entry names another rank",
            "bad-name": "the manifest's entry names no file of the version's directory"}[rf.status]
    return f"rank {rf.rank} ({rf.file}): {what}"


def scan_version(directory: Path, version: int, verify: bool, level: int | None) -> Version:
    """One version directory: its rank files against its manifest."""
    vdir = directory / vdir_name(version)
    m = read_manifest(directory, version)
    if m is None:
        ranks = sorted((int(mo.group(1)), n) for n in _names(vdir) if (mo := _RANK_FILE.match(n)))
        files = [RankFile(r, n, _size(vdir / n), None, None, None, "unlisted") for r, n in ranks]
        why = "no valid manifest: the save did not finish" + (
            "" if not (vdir / MANIFEST).exists() else " (the manifest is unreadable or cut short)")
        return Version(version, str(directory), level, False, None, files,
                       sum(f.size or 0 for f in files), "no-manifest", [why])
    entries = m["ranks"]
    files = [_check_rank(vdir, e if isinstance(e, dict) else {}, i, verify) for i, e in enumerate(entries)]
    problems = [_problem(f) for f in files if f.status not in ("ok", "present")]
    if any(f.status in ("damaged", "unreadable") for f in files):
        status = "damaged"
    elif problems:
        status = "incomplete"
    else:
        status = "complete"
    return Version(version, str(directory), level, True, int(m["nranks"]), files,
                   sum(f.size or 0 for f in files), status, problems)


def _names(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def scan_store(directory: str | os.PathLike[str], verify: bool = False, nranks: int | None = None) -> Store:
    """Every version directory of one ``FileStore`` directory, and the version a restart would take."""
    d = Path(directory)
    levels = read_levels(d)
    level = levels.get("this") if levels else None
    versions = [scan_version(d, v, verify, level if isinstance(level, int) else None) for v in _listed_versions(d)]
    choice = FileStore.latest_complete(d, nranks=nranks, verify=verify)
    return Store(str(d), levels, choice, versions)


def inventory(directories: list[Path], verify: bool = False, nranks: int | None = None) -> Inventory:
    """The inventory of the store ``directories``; the restart's choice is the newest version any
    of them gives back (a ``MultiLevel`` store's ``restorable``), the lowest level on a tie."""
    stores = [scan_store(d, verify, nranks) for d in directories]
    best: tuple[int, str] | None = None
    for s in sorted(stores, key=lambda s: ((s.multilevel or {}).get("this") or 0, s.directory)):
        if s.restart_version is not None and (best is None or s.restart_version > best[0]):
            best = (s.restart_version, s.directory)
    unverified = best[0] if best else None
    if verify:
        sizes_only = [FileStore.latest_complete(d, nranks=nranks, verify=False) for d in directories]
        unverified = max((v for v in sizes_only if v is not None), default=None)
    return Inventory(verify, nranks, stores, best[0] if best else None, best[1] if best else None, unverified)
