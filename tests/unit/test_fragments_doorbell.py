"""The fragments loop's doorbell: a ring from another process wakes a waiting rank; without a job
namespace, or told to poll, it is not armed and waiting is a plain bounded sleep."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from planaria.fragments.doorbell import Doorbell

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux-only")


def _env(ns: str) -> dict[str, str]:
    return {"PMIX_NAMESPACE": ns, "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}


CHILD = textwrap.dedent("""
    import sys, time
    from planaria.fragments.doorbell import Doorbell
    b = Doorbell(1, 2)
    print("bound", b.armed, b.fallback, flush=True)
    t = time.monotonic()
    rung = b.wait(10.0)
    print("woke", rung, round(time.monotonic() - t, 3), flush=True)
""")


@pytest.mark.timeout(30)
def test_a_ring_from_another_process_wakes_the_waiting_rank(monkeypatch):
    ns = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv("PLANARIA_FRAGMENT_WAKEUPS", "doorbell")
    for k, v in _env(ns).items():
        monkeypatch.setenv(k, v)
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env={**os.environ})
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split() == ["bound", "True", "0.02"]   # all ranks on this host
        me = Doorbell(0, 2)
        assert me.armed
        me.ring(1)
        out, _ = child.communicate(timeout=20)
        word, rung, waited = out.split()
        assert (word, rung) == ("woke", "True") and float(waited) < 5.0     # not the 10 s timeout
        me.close()
    finally:
        child.kill()
        child.wait()


def test_ring_self_wakes_wait_and_rings_are_consumed(monkeypatch):
    for k, v in _env(f"test-{uuid.uuid4().hex}").items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PLANARIA_FRAGMENT_WAKEUPS", raising=False)
    b = Doorbell(0, 2)
    assert b.armed
    b.ring_self()
    b.ring_self()
    assert b.wait(5.0) is True                 # both rings consumed by one wake-up
    t = time.monotonic()
    assert b.wait(0.05) is False               # nothing pending: waits out its timeout
    assert time.monotonic() - t >= 0.04
    b.ring(1)                                  # nobody bound as rank 1: no error
    b.close()
    b.ring_self()                              # closed: a no-op, as from a pool thread after the run
    assert not b.armed


def test_not_armed_without_a_namespace_or_when_told_to_poll(monkeypatch):
    for k in ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME", "PLANARIA_JOB_ID"):
        monkeypatch.delenv(k, raising=False)
    b = Doorbell(0, 2)
    assert not b.armed and b.fallback == b.short
    t = time.monotonic()
    assert b.wait(0.02) is False and time.monotonic() - t >= 0.015
    for k, v in _env(f"test-{uuid.uuid4().hex}").items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PLANARIA_FRAGMENT_WAKEUPS", "poll")
    assert not Doorbell(0, 2).armed
    monkeypatch.setenv("PLANARIA_FRAGMENT_WAKEUPS", "bogus")
    with pytest.raises(ValueError, match="PLANARIA_FRAGMENT_WAKEUPS"):
        Doorbell(0, 2)


def test_ranks_on_other_hosts_keep_the_short_fallback(monkeypatch):
    # a peer on another host cannot ring: this rank must keep testing MPI often
    for k, v in _env(f"test-{uuid.uuid4().hex}").items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PLANARIA_FRAGMENT_WAKEUPS", raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1")
    b = Doorbell(0, 2)
    assert b.armed and b.fallback == b.short
    b.close()
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    b = Doorbell(0, 2)
    assert b.fallback == 0.02
    b.close()


def test_one_process_has_no_bell():
    b = Doorbell(0, 1)
    assert not b.armed
    b.ring(0)
    b.ring_self()
    b.close()


@pytest.mark.timeout(30)
def test_a_signal_delivered_to_another_thread_wakes_the_loop(monkeypatch):
    # Python runs handlers in the main thread only; a SIGTERM the kernel hands to a pool thread
    # must still end the loop's sleep at once, or a launcher's SIGKILL may come first
    import signal
    import threading
    for k, v in _env(f"test-{uuid.uuid4().hex}").items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PLANARIA_FRAGMENT_WAKEUPS", raising=False)
    seen: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda s, _f: seen.append(s))
    b = Doorbell(0, 2)
    try:
        b.wake_on_signals()

        def other_thread() -> None:
            time.sleep(0.2)
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)   # lands on this thread
        threading.Thread(target=other_thread).start()
        t = time.monotonic()
        assert b.wait(10.0) is True and time.monotonic() - t < 5.0
        assert seen == [signal.SIGUSR1]
    finally:
        b.close()
        signal.signal(signal.SIGUSR1, old)
    assert signal.set_wakeup_fd(-1) == -1          # close() put the previous wakeup fd back
