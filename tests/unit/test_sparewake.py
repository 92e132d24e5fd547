"""A spare's wake socket: found and woken by a datagram, silent without one, gone once closed."""
from __future__ import annotations

import os
import socket
import sys
import uuid

import pytest

from planaria.runtime import sparewake


def test_wake_dir_only_for_a_unix_control_socket():
    assert sparewake.wake_dir({"PLANARIA_CONTROL_URI": "ipc:///tmp/j/control.sock"}) == "/tmp/j"
    assert sparewake.wake_dir({"PLANARIA_CONTROL_URI": "tcp://10.0.0.1:5555"}) is None
    assert sparewake.wake_dir({}) is None


def test_a_spare_sleeps_until_a_working_rank_wakes_it(tmp_path):
    r, w = os.pipe()
    os.set_blocking(r, False)
    sock = sparewake.SpareSocket(sparewake.socket_path(str(tmp_path), 7))
    waker = sparewake.Waker(r, sock)
    assert not waker.wait(0.05)                       # nothing yet: the timeout
    assert sparewake.wake_all(str(tmp_path)) == {7}
    assert sparewake.wake_all(str(tmp_path)) == {7}   # two wakes before it looks: one wait ends
    assert waker.wait(1.0)
    assert not waker.wait(0.05)                       # both were read
    os.write(w, b"w")                                 # the controller's wake, through the agent
    assert waker.wait(1.0)
    waker.close()
    assert not (tmp_path / "w7.sock").exists()
    assert sparewake.wake_all(str(tmp_path)) == set()  # a rank that took over is not woken again
    os.close(r)
    os.close(w)


def test_a_wait_says_whether_news_came_with_the_footprints(tmp_path):
    """Wakes that only brought footprints say "warm"; one recovery's wake read with them says
    "news": the spare must go on testing its receive after reading the footprints."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    sock = sparewake.SpareSocket(sparewake.socket_path(str(tmp_path), 5))
    waker = sparewake.Waker(r, sock)
    try:
        sparewake.wake_all(str(tmp_path), warm=True)
        sparewake.wake_all(str(tmp_path), warm=True)
        assert waker.wait(1.0) == "warm"
        sparewake.wake_all(str(tmp_path), warm=True)
        sparewake.wake_all(str(tmp_path))                 # a recovery started
        sparewake.wake_all(str(tmp_path), warm=True)
        assert waker.wait(1.0) == "news"
        os.write(w, sparewake.WARM)                       # the same through the controller's pipe
        assert waker.wait(1.0) == "warm"
        os.write(w, sparewake.WARM + sparewake.NEWS)
        sparewake.wake_all(str(tmp_path), warm=True)
        assert waker.wait(1.0) == "news"
        assert waker.wait(0.05) == ""
    finally:
        waker.close()
        os.close(r)
        os.close(w)


def test_stale_and_foreign_sockets_are_skipped(tmp_path):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(tmp_path / "w3.sock"))
    stale.close()                                     # its spare is gone: the file stays, nobody reads
    (tmp_path / "wx.sock").write_text("")             # not a spare's name
    live = sparewake.SpareSocket(sparewake.socket_path(str(tmp_path), 4))
    try:
        assert sparewake.wake_all(str(tmp_path)) == {4}
    finally:
        live.close()
    assert sparewake.wake_all(str(tmp_path / "missing")) == set()


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux's")


@linux_only
def test_without_a_controller_a_spare_sleeps_on_a_name_of_its_job_and_rank():
    job = f"prterun-test-{uuid.uuid4().hex}@1"
    spare = sparewake.SpareSocket(sparewake.abstract_name(job, 8))
    other_job = sparewake.SpareSocket(sparewake.abstract_name(job + "x", 8))
    waker = sparewake.Waker(None, spare, reaches_all=True)
    try:
        assert not waker.wait(0.05)
        assert sparewake.wake_ranks(job, [8, 9]) == 1      # rank 9 is no spare: refused, skipped
        assert waker.wait(1.0) == "news"
        assert sparewake.wake_ranks(job, [8], warm=True) == 1
        assert waker.wait(1.0) == "warm"
        assert not waker.wait(0.05)
        assert not sparewake.Waker(None, other_job).wait(0.05)   # another job's spare of rank 8 slept on
    finally:
        waker.close()
        other_job.close()
    assert sparewake.wake_ranks(job, [8]) == 0               # closed: a rank that took over is not woken
    with pytest.raises(OSError):                             # one name, one socket
        a = sparewake.SpareSocket(sparewake.abstract_name(job, 3))
        try:
            sparewake.SpareSocket(sparewake.abstract_name(job, 3))
        finally:
            a.close()


def test_job_names_and_hosts_from_the_launchers_environment(monkeypatch):
    from planaria.util import jobinfo
    for k in ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME", "PLANARIA_JOB_ID",
              "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert jobinfo.job_namespace() is None and not jobinfo.all_on_this_host(2)
    monkeypatch.setenv("PMI_KVSNAME", "kvs_1")
    assert jobinfo.job_namespace() == "kvs_1"
    monkeypatch.setenv("PMIX_NAMESPACE", "prterun-h-1@1")
    assert jobinfo.job_namespace() == "prterun-h-1@1"
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "9")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
    assert not jobinfo.all_on_this_host(2)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "9")
    assert jobinfo.all_on_this_host(2) and not jobinfo.all_on_this_host(10)


class _Agent:
    """What ``wake_spares`` asks of a rank's agent: the controller's wake."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, bool]] = []

    def report(self, kind: str, warm: bool) -> bool:
        self.reports.append((kind, warm))
        return True


def test_the_controller_wakes_the_spares_only_when_the_sockets_did_not_reach_all(tmp_path, monkeypatch):
    from planaria.runtime import bootstrap
    agent = _Agent()
    monkeypatch.setattr(bootstrap._RT, "agent", agent)
    monkeypatch.setenv("PLANARIA_CONTROL_URI", f"ipc://{tmp_path}/control.sock")
    spare = sparewake.SpareSocket(sparewake.socket_path(str(tmp_path), 5))
    try:
        assert bootstrap.wake_spares([5]) and agent.reports == []        # the one spare, woken here
        news = ("wake-spares", False)
        assert bootstrap.wake_spares([5, 6]) and agent.reports == [news]   # 6: another host
        assert bootstrap.wake_spares([]) and agent.reports == [news] * 2   # spares not known
        assert bootstrap.wake_spares([5, 6], warm=True) and agent.reports[-1] == ("wake-spares", True)
    finally:
        spare.close()
