"""The checkpoint inventory (``planaria checkpoints``) over directories the real FileStore and
MultiLevel wrote (ranks as threads of this process), and MultiLevel's intervals in checkpoints."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from planaria.checkpoint import FileStore, MemoryStore, MultiLevel
from planaria.checkpoint.file import MANIFEST, rank_file_name, vdir_name
from planaria.checkpoint.inventory import find_stores, inventory, scan_store
from planaria.checkpoint.multilevel import LEVELS_FILE, checkpoint_number, levels_holding


class Group:
    """What the ranks of a threaded job share: a barrier and one slot per rank."""

    def __init__(self, n: int) -> None:
        self.n, self.bar, self.slots = n, threading.Barrier(n, timeout=20), [None] * n


class ThreadComm:
    """The collective calls FileStore makes, for ``n`` ranks running as threads."""

    def __init__(self, group: Group, rank: int) -> None:
        self.g, self.rank, self.size = group, rank, group.n

    def _all(self, obj):
        self.g.bar.wait()
        self.g.slots[self.rank] = obj
        self.g.bar.wait()
        out = list(self.g.slots)
        self.g.bar.wait()
        return out

    def gather(self, obj, root=0):
        out = self._all(obj)
        return out if self.rank == root else None

    def bcast(self, obj=None, root=0):
        return self._all(obj)[root]

    def Barrier(self):
        self._all(None)

    def Allreduce(self, sendbuf, recvbuf, op=None):      # FileStore only takes a MIN
        np.copyto(recvbuf, np.minimum.reduce(self._all(np.array(sendbuf))))


def save_all(stores: list, versions: list[int]) -> None:
    """Each rank (a thread) saves ``versions`` into its own store object, in order."""
    group = Group(len(stores))
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        comm = ThreadComm(group, r)
        try:
            for v in versions:
                stores[r].save(comm, v, {"x": np.full(100 + 10 * r, float(v + r)), "v": np.array(v)})
            for level, _ in getattr(stores[r], "levels", [(stores[r], 1)]):
                level.wait_pruned()                      # rank 0 deletes old versions in the background
        except BaseException as e:      # noqa: BLE001 - reported below
            errors.append(e)
            group.bar.abort()
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.fixture
def three_versions(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    save_all([FileStore(d, keep=3) for _ in range(3)], [0, 10, 20])
    return d


def flip(path: Path, offset: int = -1) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.timeout(30)
def test_complete_store_lists_every_version_rank_and_checksum(three_versions):
    d = three_versions
    for verify in (False, True):
        inv = inventory([d], verify=verify)
        (s,) = inv.stores
        assert [v.version for v in s.versions] == [0, 10, 20]
        assert all(v.complete and v.nranks == 3 for v in s.versions)
        v20 = s.versions[-1]
        manifest = json.loads((d / vdir_name(20) / MANIFEST).read_text())
        assert [f.checksum for f in v20.ranks] == [e["crc32"] for e in manifest["ranks"]]
        assert [f.size for f in v20.ranks] == [(d / vdir_name(20) / rank_file_name(r)).stat().st_size for r in range(3)]
        assert v20.total_bytes == sum(f.size for f in v20.ranks)
        assert {f.status for f in v20.ranks} == ({"ok"} if verify else {"present"})
        assert inv.restart_version == 20 == FileStore.latest_complete(d)
        assert not inv.damaged_choice
    out = inventory([d], verify=True).to_json()
    assert out["format"] == 1 and out["restart"]["version"] == 20
    assert [v["version"] for v in out["versions"]] == [0, 10, 20]
    assert out["versions"][0]["ranks"][2]["checksum_kind"] == "crc32"


@pytest.mark.timeout(30)
def test_a_missing_rank_file_makes_the_version_incomplete(three_versions):
    d = three_versions
    (d / vdir_name(20) / rank_file_name(1)).unlink()
    inv = inventory([d])
    v20 = inv.stores[0].versions[-1]
    assert v20.status == "incomplete" and [f.status for f in v20.ranks] == ["present", "missing", "present"]
    assert v20.problems == ["rank 1 (rank00001.bin): missing"]
    assert inv.restart_version == 10 == FileStore.latest_complete(d, verify=False)


@pytest.mark.timeout(30)
def test_a_flipped_byte_is_seen_only_by_verify_and_the_restart_falls_back(three_versions):
    d = three_versions
    flip(d / vdir_name(20) / rank_file_name(2))
    quick = inventory([d])
    assert quick.stores[0].versions[-1].complete and quick.restart_version == 20 and not quick.damaged_choice
    inv = inventory([d], verify=True)
    v20 = inv.stores[0].versions[-1]
    assert v20.status == "damaged" and [f.status for f in v20.ranks] == ["ok", "ok", "damaged"]
    assert "rank 2 (rank00002.bin): crc32 checksum differs" in v20.problems[0]
    assert inv.restart_version == 10 == FileStore.latest_complete(d)      # the store's own choice
    assert inv.damaged_choice and inv.unverified_choice == 20


@pytest.mark.timeout(30)
def test_no_manifest_and_rank_count(three_versions):
    d = three_versions
    (d / vdir_name(20) / MANIFEST).write_text('{"version": 20, "nra')          # cut short by a crash
    inv = inventory([d], verify=True)
    v20 = inv.stores[0].versions[-1]
    assert v20.status == "no-manifest" and len(v20.ranks) == 3 and "cut short" in v20.problems[0]
    assert inv.restart_version == 10
    assert inventory([d], nranks=4).restart_version is None                  # written by 3 ranks


@pytest.mark.timeout(30)
def test_sha256_manifests_of_earlier_saves_are_checked(three_versions):
    import hashlib
    d = three_versions
    mpath = d / vdir_name(10) / MANIFEST
    m = json.loads(mpath.read_text())
    for e in m["ranks"]:
        del e["crc32"]
        e["sha256"] = hashlib.sha256((d / vdir_name(10) / e["file"]).read_bytes()).hexdigest()
    mpath.write_text(json.dumps(m))
    v10 = inventory([d], verify=True).stores[0].versions[1]
    assert v10.complete and {f.checksum_kind for f in v10.ranks} == {"sha256"}
    flip(d / vdir_name(10) / rank_file_name(0), 20)
    assert inventory([d], verify=True).stores[0].versions[1].status == "damaged"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("every,steps,expect_file", [
    (50, 400, [0, 200, 400]),                 # checkpoints 0..8 every 50 steps: the file level every 4th
    (1, 9, [0, 4, 8]),
    (50, 120, [0]),                           # 0, 50, 100, and 120 (a final one: checkpoint 3)
])
def test_levels_count_checkpoints_under_the_driver_spacing(every, steps, expect_file):
    versions = sorted({*range(0, steps + 1, every), steps})
    everys = [1, 4]
    got = {v: levels_holding(v, every, everys) for v in versions}
    assert [v for v, lv in got.items() if 1 in lv] == expect_file
    assert all(0 in lv for lv in got.values())                 # the memory level: every checkpoint
    assert checkpoint_number(120, 50) == 3
    ml = MultiLevel([(MemoryStore(), 1), (FileStore("unused"), 4)])
    assert [len(ml.saves_in(v)) for v in (0, 4, 5)] == [2, 2, 1]          # no spacing: versions count
    ml.set_spacing(every)
    assert [v for v in versions if len(ml.saves_in(v)) == 2] == expect_file


@pytest.mark.timeout(30)
def test_multilevel_file_level_is_described_and_found_in_a_job_directory(tmp_path):
    job = tmp_path / "job"
    stores = [MultiLevel([(FileStore(job / "fast", keep=2), 1), (FileStore(job / "deep" / "ck", keep=2), 2)],
                         spacing=10) for _ in range(2)]
    save_all(stores, [0, 10, 20, 30])
    desc = json.loads((job / "deep" / "ck" / LEVELS_FILE).read_text())
    assert desc["spacing"] == 10 and desc["this"] == 2 and [lv["every"] for lv in desc["levels"]] == [1, 2]
    found = find_stores(job)
    assert found == [job / "deep" / "ck", job / "fast"]
    inv = inventory(found, verify=True)
    held = {(v.version, v.level) for s in inv.stores for v in s.versions}
    assert held == {(20, 1), (30, 1), (0, 2), (20, 2)}
    assert inv.restart_version == 30 and inv.restart_directory == str(job / "fast")
    assert scan_store(job / "deep" / "ck").restart_version == 20


CLI = [sys.executable, "-m", "planaria.cli.main", "checkpoints"]


@pytest.mark.timeout(60)
def test_command_exit_status_and_one_line_errors(three_versions, tmp_path):
    d = three_versions
    env = dict(os.environ, PLANARIA_HOME=str(tmp_path / "home"), COLUMNS="200")
    run = lambda *a: subprocess.run([*CLI, *a], capture_output=True, text=True, timeout=30, env=env)  # noqa: E731
    ok = run(str(d), "--verify")
    assert ok.returncode == 0 and "a restart resumes from version 20" in ok.stdout, ok.stdout + ok.stderr
    other = run(str(d), "--nranks", "4")
    assert other.returncode == 3 and "version 20: written by 3 ranks: a restart on 4 does not use it" in other.stdout
    flip(d / vdir_name(20) / rank_file_name(0))
    bad = run(str(d), "--verify", "--json")
    assert bad.returncode == 1, bad.stderr
    assert json.loads(bad.stdout)["restart"] == {"version": 10, "directory": str(d), "damaged_choice": True,
                                                 "unverified_choice": 20}
    for v in (0, 10):
        (d / vdir_name(v) / rank_file_name(1)).unlink()
    assert run(str(d), "--verify").returncode == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, words in (([str(tmp_path / "nowhere")], "no job"), ([str(empty)], "no file checkpoints")):
        res = run(*args)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and words in res.stderr, res.stderr
        assert res.stderr.startswith("planaria checkpoints: ")
