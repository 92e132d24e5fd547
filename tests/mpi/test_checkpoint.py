"""Checkpoint stores through real process failures, as mpiexec jobs on real ULFM and on the simulation."""
from __future__ import annotations

import pytest

from tests.mpi.mpijob import SCRIPTS, mpiexec

pytestmark = [pytest.mark.mpi]

RECOVER = str(SCRIPTS / "checkpoint_recover.py")
RESTART = str(SCRIPTS / "checkpoint_restart.py")
PARTIAL = str(SCRIPTS / "checkpoint_partial.py")
AGREED = str(SCRIPTS / "checkpoint_agreed.py")
FILE_VERDICT = str(SCRIPTS / "checkpoint_file_verdict.py")
FILE_SAVE_FAILS = str(SCRIPTS / "checkpoint_file_save_fails.py")
COMPLETE = str(SCRIPTS / "checkpoint_complete.py")

# case -> (processes, world ranks expected to print OK)
CASES = {
    "memory": (7, [0, 3, 4, 5, 6]),          # victims 2 then 1; spares 5, 6
    "memory2": (8, [0, 2, 4, 5, 6, 7]),
    "xor": (8, [2, 3, 4, 5, 6, 7]),
    "xor_two": (8, [1, 3, 4, 5, 6, 7]),
    "file": (5, [0, 1, 2, 4]),
    "multi": (8, [1, 3, 4, 5, 6, 7]),
    "memory_midsave": (6, [0, 1, 3, 4, 5]),  # victim 2 dies instead of saving; spare 5
    "xor_midsave": (7, [0, 2, 3, 4, 5, 6]),  # victim 1; spare 6
}
BACKENDS = ["ulfm", "sim"]


def _detail(res) -> str:
    return f"\n--- stdout\n{res.out}\n--- stderr\n{res.err[-3000:]}"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_recover_fresh_rank(case: str, backend: str, tmp_path) -> None:
    n, survivors = CASES[case]
    res = mpiexec(n, [RECOVER, case, backend, str(tmp_path)], ft=(backend == "ulfm"), timeout=120)
    detail = _detail(res)
    assert "FAIL" not in res.out, detail
    assert res.ok_ranks(case) == survivors, f"ranks reporting OK {res.ok_ranks(case)}, expected {survivors}{detail}"
    assert res.code == 0, f"exit code {res.code}{detail}"


@pytest.mark.timeout(200)
@pytest.mark.parametrize("backend", BACKENDS)
def test_file_restart_new_job(backend: str, tmp_path) -> None:
    """A job writes versions 1..3 and ends; new jobs find the newest complete version and restore it."""
    from planaria.checkpoint import FileStore
    from planaria.checkpoint.file import rank_file_name, vdir_name
    ft = backend == "ulfm"
    res = mpiexec(4, [RESTART, "write", backend, str(tmp_path)], ft=ft, timeout=60)
    assert res.ok_ranks("write") == [0, 1, 2, 3] and res.code == 0, _detail(res)
    assert FileStore.latest_complete(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [vdir_name(2), vdir_name(3)]
    res = mpiexec(4, [RESTART, "read:3", backend, str(tmp_path)], ft=ft, timeout=60)
    assert res.ok_ranks("read:3") == [0, 1, 2, 3] and res.code == 0, _detail(res)
    # damage rank 2's newest file: the next restart must fall back to version 2
    p = tmp_path / vdir_name(3) / rank_file_name(2)
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    p.write_bytes(raw)
    res = mpiexec(4, [RESTART, "read:2", backend, str(tmp_path)], ft=ft, timeout=60)
    assert res.ok_ranks("read:2") == [0, 1, 2, 3] and res.code == 0, _detail(res)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", BACKENDS)
def test_restore_refused_when_a_survivor_lacks_the_version(backend: str) -> None:
    """Memory and XOR: CheckpointError everywhere, survivors unchanged, an older version restores after."""
    res = mpiexec(4, [PARTIAL, backend], ft=(backend == "ulfm"), timeout=60)
    assert "FAIL" not in res.out, _detail(res)
    assert res.ok_ranks("partial") == [0, 1, 2, 3] and res.code == 0, _detail(res)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", BACKENDS)
def test_restore_with_offers_waits_for_no_status(backend: str) -> None:
    """Memory and XOR told every rank's offers: the fresh rank does not wait for a late survivor
    that sends it nothing; offers that show a rank lacking the version still refuse everywhere."""
    res = mpiexec(4, [AGREED, backend], ft=(backend == "ulfm"), timeout=60)
    assert "FAIL" not in res.out, _detail(res)
    assert res.ok_ranks("agreed") == [0, 1, 2, 3] and res.code == 0, _detail(res)


def _every_rank_ok(script: str, tag: str, backend: str, tmp_path, n: int = 4) -> None:
    """Run ``script`` on ``n`` ranks with a scratch directory: no check failed, every rank reported
    ``tag`` ok, exit 0."""
    res = mpiexec(n, [script, backend, str(tmp_path)], ft=(backend == "ulfm"), timeout=60)
    assert "FAIL" not in res.out, _detail(res)
    assert res.ok_ranks(tag) == list(range(n)) and res.code == 0, _detail(res)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", BACKENDS)
def test_file_restore_with_a_fresh_rank_is_all_or_nothing(backend: str, tmp_path) -> None:
    """A damaged file of a survivor, or of the fresh rank: the restore raises on every rank."""
    _every_rank_ok(FILE_VERDICT, "fileverdict", backend, tmp_path)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", BACKENDS)
def test_file_save_failed_on_one_rank_raises_everywhere_and_counts_nowhere(backend: str, tmp_path) -> None:
    """A rank losing the file it took from the oldest version: the save raises on every rank,
    neither that version nor the new one counts, the previous newest one does."""
    _every_rank_ok(FILE_SAVE_FAILS, "filesavefails", backend, tmp_path)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("backend", BACKENDS)
def test_wait_complete_holds_every_rank_until_the_version_is_held_everywhere(backend: str, tmp_path) -> None:
    """A save returns before the partners hold their copies; ``wait_complete`` returns only once
    every rank holds the version (memory, XOR, and a memory + file multi-level store)."""
    _every_rank_ok(COMPLETE, "complete", backend, tmp_path)


POSITIONS = str(SCRIPTS / "checkpoint_xor_positions.py")
CHANGES = str(SCRIPTS / "checkpoint_xor_changes.py")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_xor_state_changes_between_saves(backend: str) -> None:
    """XOR saves of states that grow, shrink and change dtype between versions, each restored
    on rebuilt ranks bit-exact; descriptions exchanged only at a change (and at the first save)."""
    res = mpiexec(7, [CHANGES, backend], ft=(backend == "ulfm"), timeout=90)
    detail = _detail(res)
    assert "FAIL" not in res.out, detail
    assert res.ok_ranks("changes") == list(range(7)), detail
    assert res.code == 0, f"exit code {res.code}{detail}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("group_size", [2, 3, 4])
def test_xor_rebuilds_every_position(group_size: int) -> None:
    """Each rank in turn rebuilt by its group (groups of 2, 3 and 4 on 7 ranks: a trailing group
    of one joins the one before), rebuilt ranks serving as sources next: every state bit-exact."""
    res = mpiexec(7, [POSITIONS, "ulfm", str(group_size)], ft=True, timeout=90)
    detail = _detail(res)
    assert "FAIL" not in res.out, detail
    assert res.ok_ranks("positions") == list(range(7)), detail
    assert res.code == 0, f"exit code {res.code}{detail}"
