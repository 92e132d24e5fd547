"""FileStore in one process: bit-exact round trips, corruption and truncation detection, atomicity."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from planaria.checkpoint import CheckpointError, FileStore, SaveFailed, pack, unpack
from planaria.checkpoint.file import MANIFEST, rank_file_name, vdir_name


class OneRank:
    """The collective calls FileStore makes, for a job of one rank."""

    rank, size = 0, 1

    def gather(self, obj, root=0):
        return [obj]

    def bcast(self, obj=None, root=0):
        return obj

    def Barrier(self):
        pass

    def Allreduce(self, sendbuf, recvbuf, op=None):
        np.copyto(recvbuf, sendbuf)


COMM = OneRank()


def state_for(version: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(version)
    return {
        "u": rng.standard_normal((17, 5)),
        "ids": rng.integers(-2**40, 2**40, 33, dtype=np.int64),
        "flags": rng.integers(0, 2, 7).astype(bool),
        "c": (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64),
        "step": np.array(version, dtype=np.int32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "be": np.arange(5, dtype=">u2"),
        "rec": np.array([(1, 2.5), (3, -1.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
    }


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    if list(a) != list(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            return False
    return True


def rank_path(d: Path, v: int, r: int = 0) -> Path:
    return d / vdir_name(v) / rank_file_name(r)


def test_roundtrip_bit_exact(tmp_path: Path) -> None:
    fs = FileStore(tmp_path)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    assert fs.versions() == {1, 2}
    assert fs.restorable(COMM, set()) == 2
    assert same(fs.restore(COMM, 2, set()), state_for(2))
    assert same(fs.restore(COMM, 1, {0}), state_for(1))
    assert FileStore.latest_complete(tmp_path) == 1     # restoring 1 dropped the newer version 2


def test_nan_payloads_and_noncontiguous(tmp_path: Path) -> None:
    odd = np.frombuffer(np.array([0x7FF8DEADBEEF0001, 0xFFF0000000000001], dtype=np.uint64).tobytes(),
                        dtype=np.float64)
    big = np.arange(60, dtype=np.float64).reshape(6, 10)
    st_ = {"nan": odd.copy(), "t": big.T, "s": big[::2, 1::3]}
    fs = FileStore(tmp_path)
    fs.save(COMM, 5, st_)
    back = fs.restore(COMM, 5, set())
    assert back["nan"].tobytes() == odd.tobytes()
    assert np.array_equal(back["t"], big.T) and back["t"].shape == (10, 6)
    assert np.array_equal(back["s"], big[::2, 1::3])


def test_keeps_two_newest(tmp_path: Path) -> None:
    fs = FileStore(tmp_path)
    for v in range(1, 6):
        fs.save(COMM, v, state_for(v))
    assert fs.versions() == {4, 5}
    assert sorted(p.name for p in tmp_path.iterdir()) == [vdir_name(4), vdir_name(5)]


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "delete", "no_manifest", "bad_manifest",
                                    "header_flip"])
def test_damaged_newest_falls_back(tmp_path: Path, damage: str) -> None:
    fs = FileStore(tmp_path)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    p = rank_path(tmp_path, 2)
    raw = bytearray(p.read_bytes())
    if damage == "flip":
        raw[len(raw) - 3] ^= 0x10
        p.write_bytes(raw)
    elif damage == "header_flip":
        raw[20] ^= 0x01
        p.write_bytes(raw)
    elif damage == "truncate":
        p.write_bytes(raw[:-1])
    elif damage == "extend":
        p.write_bytes(raw + b"\0")
    elif damage == "delete":
        p.unlink()
    elif damage == "no_manifest":
        (tmp_path / vdir_name(2) / MANIFEST).unlink()
    else:
        (tmp_path / vdir_name(2) / MANIFEST).write_text('{"version": 2, "nra')
    fresh = FileStore(tmp_path)                       # no cached verification
    assert fresh.restorable(COMM, set()) == 1
    assert FileStore.latest_complete(tmp_path) == 1
    assert same(fresh.restore(COMM, 1, set()), state_for(1))
    if damage not in ("no_manifest", "bad_manifest"):
        with pytest.raises(CheckpointError):
            FileStore(tmp_path).read_rank(2, 0)


def test_same_size_flip_after_cached_check_is_still_caught(tmp_path: Path) -> None:
    """restorable may cache a verification; restore re-hashes what it actually read."""
    fs = FileStore(tmp_path)
    fs.save(COMM, 1, state_for(1))
    assert fs.restorable(COMM, set()) == 1
    p = rank_path(tmp_path, 1)
    st0 = p.stat()
    raw = bytearray(p.read_bytes())
    raw[-1] ^= 0xFF
    p.write_bytes(raw)
    os.utime(p, ns=(st0.st_atime_ns, st0.st_mtime_ns))   # same size, same mtime: the cache cannot tell
    with pytest.raises(CheckpointError, match="checksum differs"):
        fs.restore(COMM, 1, set())


def _flip_keeping_mtime(p: Path) -> None:
    """Flip one data bit of ``p`` in place, same size, and set its atime and mtime back."""
    st0 = p.stat()
    raw = bytearray(p.read_bytes())
    raw[len(raw) - 5] ^= 0x04
    with open(p, "r+b") as f:
        f.write(raw)
    os.utime(p, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    st1 = p.stat()
    assert (st1.st_size, st1.st_mtime_ns, st1.st_ino) == (st0.st_size, st0.st_mtime_ns, st0.st_ino)


def test_flip_with_mtime_set_back_is_not_restorable(tmp_path: Path) -> None:
    """A survivor's own file damaged right after its check: restorable falls back, no version is
    reported that restore then refuses (which cost a spare)."""
    fs = FileStore(tmp_path)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    assert fs.restorable(COMM, set()) == 2
    _flip_keeping_mtime(rank_path(tmp_path, 2))
    assert fs.restorable(COMM, set()) == 1
    assert same(fs.restore(COMM, 1, set()), state_for(1))


def test_settled_check_is_reused_until_the_ctime_changes(tmp_path: Path) -> None:
    """Files older than the settling time are hashed once; a flip with the mtime set back still
    changes the ctime, so the kept result is not reused for the damaged file."""
    from planaria.checkpoint.file import _SETTLED_NS
    fs = FileStore(tmp_path)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    time.sleep(_SETTLED_NS / 1e9 + 0.05)
    assert fs.restorable(COMM, set()) == 2
    assert len(fs._verified) == 2                       # both files' results kept
    assert fs.restorable(COMM, set()) == 2
    _flip_keeping_mtime(rank_path(tmp_path, 2))
    assert fs.restorable(COMM, set()) == 1
    assert same(fs.restore(COMM, 1, set()), state_for(1))


def test_leftover_temp_never_counts(tmp_path: Path) -> None:
    fs = FileStore(tmp_path)
    fs.save(COMM, 1, state_for(1))
    # a save of version 2 that died mid-write: only a temporary rank file, no manifest
    v2 = tmp_path / vdir_name(2)
    v2.mkdir()
    good = rank_path(tmp_path, 1).read_bytes()
    (v2 / f".{rank_file_name(0)}.tmp-12345").write_bytes(good)
    assert fs.versions() == {1}
    assert fs.restorable(COMM, set()) == 1
    assert FileStore.latest_complete(tmp_path) == 1
    # even a manifest naming the rank file does not make a temporary file count
    m = json.loads((tmp_path / vdir_name(1) / MANIFEST).read_text())
    m["version"] = 2
    (v2 / MANIFEST).write_text(json.dumps(m))
    assert FileStore(tmp_path).restorable(COMM, set()) == 1


def test_rank_file_from_other_version_is_rejected(tmp_path: Path) -> None:
    fs = FileStore(tmp_path)
    fs.save(COMM, 1, state_for(1))
    fs.save(COMM, 2, state_for(2))
    rank_path(tmp_path, 2).write_bytes(rank_path(tmp_path, 1).read_bytes())
    assert FileStore(tmp_path).restorable(COMM, set()) == 1


def test_manifest_cut_short_does_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash while the manifest is being written leaves at most part of it: the version does not count."""
    import planaria.checkpoint.file as fmod
    fs = FileStore(tmp_path)
    fs.save(COMM, 1, state_for(1))

    def crash(path, data):
        path.write_bytes(data[:len(data) // 2])
        raise OSError("power loss")
    monkeypatch.setattr(fmod, "_write_manifest", crash)
    with pytest.raises(SaveFailed, match="power loss") as info:
        fs.save(COMM, 2, state_for(2))
    assert isinstance(info.value.__cause__, OSError)        # the rank's own error, kept as the cause
    monkeypatch.undo()
    assert rank_path(tmp_path, 2).exists()           # the rank file made it
    half = tmp_path / vdir_name(2) / MANIFEST
    assert not half.exists()                         # the failed save removed what it had written
    m = json.loads((tmp_path / vdir_name(1) / MANIFEST).read_text())
    m["version"] = 2
    text = json.dumps(m, indent=1).encode()
    half.write_bytes(text[:len(text) - 2])           # what a crash could have left
    assert FileStore(tmp_path).restorable(COMM, set()) == 1
    assert FileStore.latest_complete(tmp_path) == 1
    assert FileStore(tmp_path).versions() == {1}


def test_resave_removes_stale_manifest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saving a version again (after going back to an older one) never leaves the old manifest valid for new files."""
    import planaria.checkpoint.file as fmod
    fs = FileStore(tmp_path)
    fs.save(COMM, 1, state_for(1))
    fs.save(COMM, 2, state_for(2))
    def die_on_rank_file(*args):
        raise OSError("killed")
    monkeypatch.setattr(fmod, "_write_rank", die_on_rank_file)
    with pytest.raises(SaveFailed):
        fs.save(COMM, 2, state_for(22))
    monkeypatch.undo()
    assert FileStore(tmp_path).restorable(COMM, set()) == 1


def test_version_whose_files_a_failed_save_took_does_not_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest of the version whose files a save takes stays until the save's pruning: when
    the save fails after overwriting the file, neither that version nor the new one counts, the
    newest earlier one does; a save that goes through then removes the taken version."""
    import planaria.checkpoint.file as fmod
    fs = FileStore(tmp_path, keep=2)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    real = fmod._write_rank

    def write_then_fail(*args, **kwargs):
        real(*args, **kwargs)[2]()              # the file taken from version 1, written and synced
        raise OSError("lost after the write")
    monkeypatch.setattr(fmod, "_write_rank", write_then_fail)
    with pytest.raises(SaveFailed, match="lost after the write"):
        fs.save(COMM, 3, state_for(3))
    monkeypatch.undo()
    fs.wait_pruned()
    assert (tmp_path / vdir_name(1) / MANIFEST).exists() and not rank_path(tmp_path, 1).exists()
    assert not (tmp_path / vdir_name(3) / MANIFEST).exists()
    fresh = FileStore(tmp_path)
    assert fresh.restorable_versions(COMM, set()) == {2}
    assert FileStore.latest_complete(tmp_path) == 2
    assert same(fresh.restore(COMM, 2, {0}), state_for(2))
    fs.save(COMM, 3, state_for(3))
    fs.wait_pruned()
    assert sorted(p.name for p in tmp_path.iterdir()) == [vdir_name(2), vdir_name(3)]
    assert FileStore(tmp_path).restorable_versions(COMM, set()) == {2, 3}


def test_sha256_manifest_of_earlier_saves_still_reads(tmp_path: Path) -> None:
    """Manifests written before the CRC-32 checksum record SHA-256: they are checked with it."""
    import hashlib
    fs = FileStore(tmp_path)
    fs.save(COMM, 1, state_for(1))
    mpath = tmp_path / vdir_name(1) / MANIFEST
    m = json.loads(mpath.read_text())
    entry = m["ranks"][0]
    assert set(entry) >= {"crc32", "size"} and "sha256" not in entry
    del entry["crc32"]
    entry["sha256"] = hashlib.sha256(rank_path(tmp_path, 1).read_bytes()).hexdigest()
    m["format"] = 1
    mpath.write_text(json.dumps(m))
    assert FileStore(tmp_path).restorable(COMM, set()) == 1
    assert FileStore.latest_complete(tmp_path) == 1
    assert same(FileStore(tmp_path).restore(COMM, 1, {0}), state_for(1))
    entry["sha256"] = "0" * 64                      # and a wrong one is caught
    mpath.write_text(json.dumps(m))
    assert FileStore(tmp_path).restorable(COMM, set()) is None
    with pytest.raises(CheckpointError, match="sha256 checksum differs"):
        FileStore(tmp_path).read_rank(1, 0)


@pytest.mark.parametrize("name", ["../outside.bin", "/abs/outside.bin", "..", "", "rank00000.bin\0x"])
def test_a_manifest_never_sends_a_restore_outside_the_versions_directory(tmp_path: Path, name: str) -> None:
    """A manifest entry whose file is not a bare name in the version's directory does not count,
    even when a file there has the size and checksum the entry records: the version is not
    restorable, no read opens it, and the inventory says why."""
    from planaria.checkpoint.inventory import scan_store
    store_dir = tmp_path / "store"
    fs = FileStore(store_dir)
    fs.save(COMM, 1, state_for(1))
    outside = tmp_path / "outside.bin"                   # a perfect copy, one directory up
    outside.write_bytes(rank_path(store_dir, 1).read_bytes())
    mpath = store_dir / vdir_name(1) / MANIFEST
    m = json.loads(mpath.read_text())
    if name == "/abs/outside.bin":
        name = str(outside)
    m["ranks"][0]["file"] = name
    mpath.write_text(json.dumps(m))
    assert FileStore(store_dir).restorable(COMM, set()) is None
    assert FileStore.latest_complete(store_dir) is None
    with pytest.raises(CheckpointError, match="no valid entry"):
        FileStore(store_dir).read_rank(1, 0)
    (v,) = scan_store(store_dir, verify=True).versions
    assert v.status == "incomplete" and v.ranks[0].status == "bad-name", v


def test_restore_keeps_the_restored_version_when_newer_ones_are_damaged(tmp_path: Path) -> None:
    """Restoring an older version drops the newer ones, never the one restored (here a job keeping
    one version restores the older of two an earlier job kept, the newer one being damaged)."""
    fs = FileStore(tmp_path, keep=2)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    raw = bytearray(rank_path(tmp_path, 2).read_bytes())
    raw[-1] ^= 0xFF
    rank_path(tmp_path, 2).write_bytes(raw)
    fresh = FileStore(tmp_path, keep=1)
    assert fresh.restorable(COMM, set()) == 1
    assert same(fresh.restore(COMM, 1, set()), state_for(1))
    assert fresh.versions() == {1}
    assert FileStore.latest_complete(tmp_path) == 1


def test_files_of_the_oldest_version_are_recycled(tmp_path: Path) -> None:
    """Saves overwrite the files of the oldest version kept (growing and shrinking states), never
    the newest complete one; every version kept reads back bit-exact."""
    fs = FileStore(tmp_path, keep=2)
    sizes = [5, 50, 7, 7, 300, 1]
    inodes = []
    for v, k in enumerate(sizes, start=1):
        fs.save(COMM, v, {"u": np.arange(k, dtype=np.float64) * v, "v": np.array(v)})
        inodes.append(rank_path(tmp_path, v).stat().st_ino)
        kept = fs.versions()
        assert kept == ({v - 1, v} if v > 1 else {1})
        for w in kept:
            back = FileStore(tmp_path).read_rank(w, 0)
            assert same(back, {"u": np.arange(sizes[w - 1], dtype=np.float64) * w, "v": np.array(w)})
    assert inodes[2] == inodes[0] and inodes[3] == inodes[1]      # v3 reused v1's file, v4 v2's
    assert sorted(p.name for p in tmp_path.iterdir()) == [vdir_name(5), vdir_name(6)]
    # keep=1: nothing to recycle (the only version is the newest complete one)
    one = FileStore(tmp_path / "one", keep=1)
    one.save(COMM, 1, state_for(1))
    ino = rank_path(tmp_path / "one", 1).stat().st_ino
    one.save(COMM, 2, state_for(2))
    assert same(one.read_rank(2, 0), state_for(2)) and rank_path(tmp_path / "one", 2).stat().st_ino != ino


def test_restore_reads_into_matching_arrays(tmp_path: Path) -> None:
    """restore(into=...) fills the caller's arrays when every one matches; otherwise new arrays."""
    fs = FileStore(tmp_path)
    fs.save(COMM, 1, state_for(1))
    mine = {k: np.zeros_like(a) for k, a in state_for(1).items()}
    back = fs.restore(COMM, 1, set(), into=mine)
    assert same(back, state_for(1)) and all(back[k] is mine[k] for k in back)
    partial = {k: np.zeros_like(a) for k, a in state_for(1).items()}
    partial["u"] = np.zeros((5, 17))                   # wrong shape: no array is written into
    back = fs.restore(COMM, 1, set(), into=partial)
    assert same(back, state_for(1)) and all(back[k] is not partial[k] for k in back)
    assert not partial["ids"].any() and not partial["c"].any()


def test_latest_complete_empty_and_missing(tmp_path: Path) -> None:
    assert FileStore.latest_complete(tmp_path / "nowhere") is None
    assert FileStore.latest_complete(tmp_path) is None
    assert FileStore(tmp_path).restorable(COMM, set()) is None


def test_object_arrays_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        FileStore(tmp_path).save(COMM, 1, {"o": np.array([object()])})


dtypes = st.one_of(hnp.integer_dtypes(endianness="="), hnp.unsigned_integer_dtypes(endianness="="),
                   hnp.floating_dtypes(endianness="="), hnp.complex_number_dtypes(endianness="="),
                   hnp.boolean_dtypes(), hnp.byte_string_dtypes(max_len=4), hnp.unicode_string_dtypes(max_len=3))
arrays = dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
def test_a_manifest_damaged_anywhere_never_raises_and_never_restores_wrong_data(tmp_path: Path) -> None:
    """Every byte of the newest manifest, one bit flipped at a time (bit 0: "size" becomes "sizd",
    a digit another; bit 5: a letter changes case): the version may still count (a flip in a
    description the rank file's own header overrides) or not, but nothing raises a KeyError, and
    what is restored is exact."""
    fs = FileStore(tmp_path)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    path = tmp_path / vdir_name(2) / MANIFEST
    raw = path.read_bytes()
    for pos in range(len(raw)):
        for bit in (0, 5):
            damaged = bytearray(raw)
            damaged[pos] ^= 1 << bit
            path.write_bytes(damaged)
            fresh = FileStore(tmp_path)
            v = fresh.restorable(COMM, set())
            assert v in (1, 2), (pos, bit)
            assert FileStore.latest_complete(tmp_path) in (1, 2)
            if v == 2:            # (restoring 1 would drop version 2: its reads are checked instead)
                assert same(fresh.restore(COMM, 2, set()), state_for(2)), (pos, bit)
            else:
                with pytest.raises(CheckpointError):
                    fresh.read_rank(2, 0)
                assert same(fresh.read_rank(1, 0), state_for(1))
    path.write_bytes(raw)
    assert FileStore(tmp_path).restorable(COMM, set()) == 2


states = st.dictionaries(st.text(min_size=1, max_size=6), arrays, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=states, cut=st.integers(min_value=1, max_value=10_000), flip=st.integers(min_value=0))
def test_property_roundtrip_and_any_damage_detected(tmp_path_factory, state, cut, flip) -> None:
    d = tmp_path_factory.mktemp("h")
    fs = FileStore(d)
    fs.save(COMM, 1, {"base": np.arange(3)})
    fs.save(COMM, 2, state)
    assert same(FileStore(d).read_rank(2, 0), state)
    meta, buf = pack(state)
    assert same(unpack(meta, buf), state)
    p = rank_path(d, 2)
    raw = bytearray(p.read_bytes())
    damaged = bytearray(raw)
    damaged[flip % len(raw)] ^= 1 << (flip % 8)
    p.write_bytes(damaged)
    assert FileStore(d).restorable(COMM, set()) == 1
    p.write_bytes(raw[:max(0, len(raw) - cut)])
    assert FileStore(d).restorable(COMM, set()) == 1
    assert FileStore.latest_complete(d) == 1
    p.write_bytes(raw)
    assert FileStore.latest_complete(d) == 2


def test_unpacked_views_are_aligned_for_mpi() -> None:
    """Views cut from a buffer at an odd offset are copied so MPI can take them as buffers."""
    import numpy as np

    from planaria.checkpoint.store import pack, unpack
    meta, buf = pack({"u": np.arange(5, dtype=np.float64)})
    shifted = np.zeros(buf.size + 3, dtype=np.uint8)
    shifted[3:] = buf
    out = unpack(meta, shifted[3:], copy=False)
    assert out["u"].flags.aligned and memoryview(out["u"]).format in ("d", "<d")
    assert np.array_equal(out["u"], np.arange(5, dtype=np.float64))


def test_crc32_is_zlibs_value_block_by_block() -> None:
    """The store's CRC-32 (ISA-L's when installed) gives zlib's value, fed in blocks of any size,
    so manifests written with either one check out with the other."""
    import zlib

    from planaria.checkpoint._fileio import Crc32
    raw = np.random.default_rng(7).integers(0, 256, 3 * (1 << 20) + 12345, dtype=np.uint8)
    h = Crc32()
    for lo, hi in [(0, 1), (1, 5000), (5000, 1 << 20), (1 << 20, raw.size)]:
        h.update(memoryview(raw[lo:hi]))  # type: ignore[arg-type]
    assert h.hexdigest() == f"{zlib.crc32(raw.tobytes()):08x}"


@pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="reads of only the page cache are Linux's")
def test_a_file_in_the_page_cache_is_read_in_small_blocks_and_one_from_the_disk_in_large_ones(
        tmp_path: Path) -> None:
    """A rolled-back rank reads its file from the page cache in blocks its checksum finds in the
    core's cache; a fresh rank reads its evicted file from the disk in large blocks. Either way
    every byte arrives and is checksummed once, in order, from where the file was left."""
    import zlib

    from planaria.checkpoint import _fileio
    from planaria.checkpoint.store import Phases
    raw = np.random.default_rng(3).integers(0, 256, 3 * _fileio._CACHED_BLOCK + 777, dtype=np.uint8)
    path = tmp_path / "f.bin"
    path.write_bytes(raw.tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        assert _fileio.read_block(fd, memoryview(bytearray(raw.size)), 0, True) == (_fileio._CACHED_BLOCK, True)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        k, cached = _fileio.read_block(fd, memoryview(bytearray(raw.size)), 0, True)
        assert not cached and k > _fileio._CACHED_BLOCK        # from the disk: as much as asked
        for evict in (False, True):
            if evict:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.lseek(fd, 5, os.SEEK_SET)
            dests = [memoryview(bytearray(100)), memoryview(bytearray(raw.size))]   # the second one past the end
            h = _fileio.Crc32()
            assert _fileio.read_into(fd, dests, h, Phases()) == raw.size - 5
            assert bytes(dests[0]) + bytes(dests[1][:raw.size - 105]) == raw[5:].tobytes()
            assert h.hexdigest() == f"{zlib.crc32(raw[5:].tobytes()):08x}"
            assert os.lseek(fd, 0, os.SEEK_CUR) == raw.size
            os.lseek(fd, 0, os.SEEK_SET)
            h = _fileio.Crc32()
            assert _fileio.hash_rest(fd, raw.size, h) == raw.size
            assert h.hexdigest() == f"{zlib.crc32(raw.tobytes()):08x}"
    finally:
        os.close(fd)


@pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="reads of only the page cache are Linux's")
def test_a_fresh_ranks_restore_starts_the_disk_reading_its_file_at_once(tmp_path: Path) -> None:
    """``prefetch`` (what a fresh rank's restore calls first) brings a file that is out of the page
    cache back into it without a read of its own; a missing file is no error."""
    from planaria.checkpoint import _fileio
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 4096)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        buf = bytearray(4096)

        def cached() -> bool:
            try:
                return os.preadv(fd, [buf], (1 << 20) - 4096, os.RWF_NOWAIT) == len(buf)
            except BlockingIOError:
                return False
        assert not cached()
        _fileio.prefetch(path)
        deadline = time.monotonic() + 10
        while not cached() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cached()
    finally:
        os.close(fd)
    _fileio.prefetch(tmp_path / "not-there.bin")


def _io_errors(path_glob: str, count: int):
    """planaria's own injector (in this process, rank 0 of 1): the next ``count`` opens of files
    matching ``path_glob`` fail with EIO."""
    from planaria.inject.injector import Injector
    from planaria.inject.plan import Plan

    def no_kill(reason: str) -> None:
        raise AssertionError(reason)
    return Injector(Plan.parse(f"ioerror:rank=0,path={path_glob},count={count}"), 0, 1, kill=no_kill)


@pytest.mark.parametrize("errors", [1, 2])
def test_transient_read_errors_in_a_recovery_cost_no_version(tmp_path: Path, errors: int) -> None:
    """EIO on the first opens of a rank file while a recovery checks it and reads it: each is tried
    again, the newest version stays restorable and restores exactly."""
    fs = FileStore(tmp_path)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    fresh = FileStore(tmp_path)                   # nothing checked before: every check opens the file
    inj = _io_errors(f"{tmp_path}/*{rank_file_name(0)}*", errors)
    try:
        assert fresh.restorable_versions(COMM, set()) == {1, 2}
    finally:
        inj.close()
    inj = _io_errors(f"{tmp_path}/*{rank_file_name(0)}*", errors)
    try:
        assert same(fresh.restore(COMM, 2, set()), state_for(2))
    finally:
        inj.close()


def test_a_read_error_that_persists_still_fails_and_an_answer_is_not_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three EIO in a row at version 2's file: it does not count, version 1 does; a file that is
    not there is reported at once, without waiting to try again."""
    fs = FileStore(tmp_path)
    for v in (1, 2):
        fs.save(COMM, v, state_for(v))
    inj = _io_errors(f"{rank_path(tmp_path, 2)}", 3)
    try:
        assert FileStore(tmp_path).restorable_versions(COMM, set()) == {1}
    finally:
        inj.close()
    inj = _io_errors(f"{rank_path(tmp_path, 2)}", 3)
    try:
        with pytest.raises(CheckpointError, match="injected I/O error"):
            FileStore(tmp_path).restore(COMM, 2, set())
    finally:
        inj.close()
    rank_path(tmp_path, 2).unlink()
    import planaria.checkpoint._fileio as fileio
    waits: list[float] = []
    monkeypatch.setattr(fileio.time, "sleep", waits.append)
    with pytest.raises(CheckpointError, match="No such file"):
        FileStore(tmp_path).restore(COMM, 2, set())
    assert waits == []                                   # not tried again
