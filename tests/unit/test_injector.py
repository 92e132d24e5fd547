"""Unit tests of the per-rank fault injector (planaria.inject.injector); no MPI."""
from __future__ import annotations

import builtins
import errno
import io
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from planaria.inject import Injector, Plan, PlanError


class _Killed(Exception):
    """Raised by the test kill callback instead of ending the process."""


class _Recorder:
    def __init__(self) -> None:
        self.kills: list[str] = []
        self.reports: list[tuple[str, dict]] = []

    def kill(self, reason: str) -> None:
        self.kills.append(reason)
        raise _Killed(reason)

    def report(self, topic: str, info: dict) -> None:
        self.reports.append((topic, info))


def make(spec: str, rank: int = 0, size: int = 4, **kw: object) -> tuple[Injector, _Recorder]:
    rec = _Recorder()
    inj = Injector(Plan.parse(spec), rank, size, kill=rec.kill, report=rec.report, **kw)  # type: ignore[arg-type]
    return inj, rec


# --------------------------------------------------------------------------- activity


def test_inactive_rank_is_inert() -> None:
    inj, rec = make("kill:rank=1,iter=3;drop:src=2,dst=0,p=1;hang:rank=3,iter=1", rank=0)
    assert not inj.active and not inj.has_message_faults
    for i in range(100):
        inj.step(i)
        inj.check()
        assert inj.message_fault(1) is None
    assert rec.kills == [] and rec.reports == []
    empty = Injector(Plan(), 0, 1, kill=rec.kill)
    assert not empty.active
    empty.step(0)


def test_injector_validates_plan_against_size() -> None:
    with pytest.raises(PlanError, match="rank 9 out of range"):
        make("kill:rank=9,iter=1", size=4)


# --------------------------------------------------------------------------- kills


def test_iteration_kill_fires_exactly_at_iteration() -> None:
    inj, rec = make("kill:rank=2,iter=50", rank=2)
    assert inj.active
    for i in range(50):
        inj.step(i)
    assert rec.kills == []
    with pytest.raises(_Killed):
        inj.step(50)
    assert rec.kills == ["injected kill at iteration 50"]
    assert rec.reports == [("inject", {"kind": "kill", "detail": "injected kill at iteration 50", "rank": 2})]
    inj.step(51)  # fires once only
    assert len(rec.kills) == 1


def test_iteration_kill_fires_when_iteration_skipped_past() -> None:
    inj, rec = make("kill:rank=0,iter=5")
    inj.step(0)
    with pytest.raises(_Killed):
        inj.step(9)
    assert rec.kills == ["injected kill at iteration 5"]


def test_kill_with_rank_set_only_hits_members() -> None:
    for rank, killed in [(0, False), (1, True), (2, False), (3, True)]:
        inj, rec = make("kill:rank=1+3,iter=1", rank=rank)
        inj.step(0)
        if killed:
            with pytest.raises(_Killed):
                inj.step(1)
        else:
            inj.step(1)
        assert bool(rec.kills) is killed


def test_time_kill_via_check() -> None:
    t0 = time.time()
    inj, rec = make("kill:rank=1,time=0.2", rank=1, clock_start=t0)
    inj.check()
    inj.step(0)
    assert rec.kills == []
    deadline = time.time() + 2.0
    with pytest.raises(_Killed):
        while time.time() < deadline:
            inj.check()
            time.sleep(0.01)
    assert time.time() - t0 >= 0.2
    assert rec.kills == ["injected kill at t=0.20s"]


def test_time_kill_in_the_past_fires_on_step() -> None:
    inj, rec = make("kill:rank=0,time=5", clock_start=time.time() - 10)
    with pytest.raises(_Killed):
        inj.step(0)
    assert rec.kills == ["injected kill at t=5.00s"]


def test_timer_thread_kills_only_when_allowed() -> None:
    got = threading.Event()
    reasons: list[str] = []

    def kill(reason: str) -> None:
        reasons.append(reason)
        got.set()

    inj = Injector(Plan.parse("kill:rank=0,time=0.1"), 0, 2, kill=kill, kill_from_thread=True)
    inj.start_timers()
    assert got.wait(2.0)
    assert reasons == ["injected kill at t=0.10s"]
    inj.close()

    quiet = Injector(Plan.parse("kill:rank=0,time=0.05"), 0, 2, kill=kill)
    reasons.clear()
    got.clear()
    quiet.start_timers()
    assert not got.wait(0.2)  # kill_from_thread not set: only check() fires it
    quiet.check()
    assert reasons == ["injected kill at t=0.05s"]
    quiet.close()


def test_random_kill_targets_scheduled_victim() -> None:
    plan = Plan.parse("kill:mtbf=1,seed=11,count=1")
    (t, _, victim, reason) = plan.kill_schedule(4)[0]
    start = time.time() - t - 0.01  # the kill is just due
    for rank in range(4):
        rec = _Recorder()
        inj = Injector(plan, rank, 4, kill=rec.kill, clock_start=start)
        assert inj.active is (rank == victim)
        if rank == victim:
            with pytest.raises(_Killed):
                inj.check()
            assert rec.kills == [reason]
            assert reason.startswith("injected random kill (mtbf=1s, seed=11) at t=")
        else:
            inj.check()
            assert rec.kills == []


# --------------------------------------------------------------------------- hang


def test_hang_blocks_the_calling_thread() -> None:
    inj, rec = make("hang:rank=0,iter=2")
    progress: list[int] = []

    def loop() -> None:
        for i in range(10):
            inj.step(i)
            progress.append(i)

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    time.sleep(0.2)
    assert th.is_alive()
    assert progress == [0, 1]
    assert rec.reports and rec.reports[0][0] == "hang"
    assert rec.reports[0][1]["detail"] == "injected hang at iteration 2"
    assert rec.kills == []


def test_time_hang_via_check() -> None:
    inj, rec = make("hang:rank=0,time=0", clock_start=time.time())
    th = threading.Thread(target=inj.check, daemon=True)
    th.start()
    th.join(0.2)
    assert th.is_alive()
    assert [t for t, _ in rec.reports] == ["hang"]


# --------------------------------------------------------------------------- bitflip


@pytest.mark.parametrize("dtype", ["float64", "float32", "int16", "uint8", "complex128", ">f8"])
def test_bitflip_flips_exactly_one_bit(dtype: str) -> None:
    arr = np.arange(24, dtype=dtype).reshape(4, 6)
    before = arr.copy()
    inj, rec = make("bitflip:rank=0,array=u,iter=3,seed=5")
    inj.watch("u", arr)
    for i in range(3):
        inj.step(i)
    assert np.array_equal(arr, before)
    inj.step(3)
    a = before.reshape(-1).view(np.uint8)
    b = arr.reshape(-1).view(np.uint8)
    diff = np.unpackbits(a ^ b)
    assert diff.sum() == 1
    info = rec.reports[-1][1]
    assert info["kind"] == "bitflip"
    k, bit = info["index"], info["bit"]
    changed = np.flatnonzero(arr.reshape(-1) != before.reshape(-1))
    if len(changed):  # NaN-free here, so the element compares unequal
        assert list(changed) == [k]
    # the flipped bit is bit `bit` of the element's value (LSB = 0), whatever the byte order
    itemsize = arr.dtype.itemsize
    ai = int.from_bytes(before.reshape(-1)[k : k + 1].tobytes(), "big" if arr.dtype.byteorder == ">" else "little")
    bi = int.from_bytes(arr.reshape(-1)[k : k + 1].tobytes(), "big" if arr.dtype.byteorder == ">" else "little")
    assert ai ^ bi == 1 << bit
    assert 0 <= bit < itemsize * 8
    inj.step(4)
    assert np.unpackbits(a ^ arr.reshape(-1).view(np.uint8)).sum() == 1  # once only


def test_bitflip_explicit_index_and_bit() -> None:
    arr = np.zeros(10, dtype=np.float64)
    inj, rec = make("bitflip:rank=0,array=x,iter=0,index=7,bit=62")
    inj.watch("x", arr)
    inj.step(0)
    assert arr[7] == 2.0 and np.count_nonzero(arr) == 1
    assert "flipped bit 62 of x[7] (float64)" in rec.reports[-1][1]["detail"]


def test_bitflip_default_is_deterministic_per_seed() -> None:
    def pick(seed: int) -> tuple[int, int]:
        arr = np.zeros(1000, dtype=np.float64)
        inj, rec = make(f"bitflip:rank=0,array=x,iter=0,seed={seed}")
        inj.watch("x", arr)
        inj.step(0)
        return rec.reports[-1][1]["index"], rec.reports[-1][1]["bit"]

    assert pick(1) == pick(1)
    assert len({pick(s) for s in range(5)}) > 1


def test_bitflip_waits_for_registration_and_rejects_bad_arrays() -> None:
    arr = np.zeros(4)
    inj, rec = make("bitflip:rank=0,array=x,iter=1,index=0,bit=0")
    inj.step(1)  # not registered yet: deferred
    assert rec.reports == []
    inj.watch("x", arr)
    inj.step(2)
    assert arr.view(np.uint64)[0] == 1
    with pytest.raises(ValueError):
        inj.watch("y", np.zeros((4, 4))[:, 1])
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        inj.watch("z", ro)
    inj2, _ = make("bitflip:rank=0,array=x,iter=0,index=99")
    inj2.watch("x", np.zeros(4))
    with pytest.raises(PlanError, match="index 99"):
        inj2.step(0)


# --------------------------------------------------------------------------- ioerror


def test_ioerror_matching_paths_only_and_close_restores(tmp_path: Path) -> None:
    good = tmp_path / "data.txt"
    bad = tmp_path / "ckpt.h5"
    good.write_text("x")
    bad.write_text("y")
    orig = (builtins.open, io.open, os.open)
    inj, rec = make("ioerror:rank=0,iter=2,path=*.h5")
    try:
        inj.step(1)
        assert open(bad).read() == "y"  # not triggered yet
        inj.step(2)
        assert rec.reports[-1][1]["kind"] == "ioerror"
        for opener in (open, io.open, lambda p: os.open(p, os.O_RDONLY), lambda p: Path(p).open()):
            with pytest.raises(OSError) as info:
                opener(str(bad))
            assert info.value.errno == errno.EIO
            assert info.value.filename == str(bad)
        with open(good) as fh:
            assert fh.read() == "x"
        fd = os.open(good, os.O_RDONLY)
        os.close(fd)
    finally:
        inj.close()
    assert (builtins.open, io.open, os.open) == orig
    assert open(bad).read() == "y"


def test_ioerror_immediate_with_count(tmp_path: Path) -> None:
    f = tmp_path / "a.bin"
    f.write_bytes(b"1")
    inj, _ = make(f"ioerror:rank=0,path={tmp_path}/*,count=2")
    try:
        for _ in range(2):
            with pytest.raises(OSError):
                open(f, "rb")
        assert open(f, "rb").read() == b"1"  # count exhausted
    finally:
        inj.close()


def test_ioerror_other_rank_untouched(tmp_path: Path) -> None:
    f = tmp_path / "a.h5"
    f.write_text("z")
    orig = builtins.open
    inj, _ = make("ioerror:rank=1", rank=0)
    try:
        assert builtins.open is orig and open(f).read() == "z"
    finally:
        inj.close()


# --------------------------------------------------------------------------- messages


def test_message_fault_probability_and_determinism() -> None:
    spec = "drop:src=0,dst=1,p=0.3,seed=4;delay:src=0,dst=1-2,p=0.5,ms=20,seed=4"
    inj, _ = make(spec, rank=0)
    assert inj.active and inj.has_message_faults
    n = 4000
    to1 = [inj.message_fault(1) for _ in range(n)]
    to2 = [inj.message_fault(2) for _ in range(n)]
    assert all(inj.message_fault(3) is None for _ in range(100))  # dst not in any set
    drops = sum(x == -1.0 for x in to1)
    assert abs(drops / n - 0.3) < 0.04
    delayed2 = [x for x in to2 if x is not None]
    assert abs(len(delayed2) / n - 0.5) < 0.04
    assert set(delayed2) == {0.02}
    assert all(x is None or x == -1.0 or x == 0.02 for x in to1)
    assert inj.messages_dropped == drops

    again, _ = make(spec, rank=0)
    assert [again.message_fault(1) for _ in range(n)] == to1
    other, _ = make(spec.replace("seed=4", "seed=5"), rank=0)
    assert [other.message_fault(1) for _ in range(n)] != to1


def test_message_fault_only_for_senders_in_src() -> None:
    inj, _ = make("drop:src=1,dst=*,p=1", rank=0)
    assert not inj.has_message_faults and not inj.active
    assert inj.message_fault(1) is None
    sender, _ = make("drop:src=1,dst=*,p=1", rank=1)
    assert sender.has_message_faults
    assert sender.message_fault(0) == -1.0
    never, _ = make("drop:p=0", rank=1)
    assert all(never.message_fault(0) is None for _ in range(200))


def test_message_streams_differ_per_rank() -> None:
    a, _ = make("drop:p=0.5,seed=1", rank=0)
    b, _ = make("drop:p=0.5,seed=1", rank=1)
    assert [a.message_fault(2) for _ in range(200)] != [b.message_fault(2) for _ in range(200)]


def test_from_env_plan_drives_injector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANARIA_INJECT", "kill:rank=0,iter=1")
    rec = _Recorder()
    inj = Injector(Plan.from_env(), 0, 2, kill=rec.kill)
    inj.step(0)
    with pytest.raises(_Killed):
        inj.step(1)


def test_phase_kill_fires_on_entering_the_phase_only() -> None:
    from planaria.inject.plan import Plan

    class Killed(Exception):
        pass

    def kill(reason: str) -> None:
        raise Killed(reason)

    from planaria.inject.injector import Injector
    inj = Injector(Plan.parse("kill:rank=1,iter=5,phase=recover"), 1, 4, kill=kill)
    assert inj.active
    inj.step(3)
    inj.phase("recover")            # before iteration 5: not yet
    inj.phase("checkpoint")
    inj.step(6)
    try:
        inj.phase("recover")
        raise AssertionError("phase kill did not fire")
    except Killed as e:
        assert "entering recover" in str(e)
    inj.phase("recover")            # fires once
    other = Injector(Plan.parse("kill:rank=1,phase=checkpoint"), 2, 4, kill=kill)
    other.phase("checkpoint")       # another rank: nothing
