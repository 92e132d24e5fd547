"""A spare's wake socket: found and woken by a datagram, silent without one, gone once closed."""
from __future__ import annotations

import os
import socket

from planaria.runtime import sparewake


def test_wake_dir_only_for_a_unix_control_socket():
    assert sparewake.wake_dir({"PLANARIA_CONTROL_URI": "ipc:///tmp/j/control.sock"}) == "/tmp/j"
    assert sparewake.wake_dir({"PLANARIA_CONTROL_URI": "tcp://10.0.0.1:5555"}) is None
    assert sparewake.wake_dir({}) is None


def test_a_spare_sleeps_until_a_working_rank_wakes_it(tmp_path):
    r, w = os.pipe()
    os.set_blocking(r, False)
    sock = sparewake.SpareSocket(str(tmp_path), 7)
    waker = sparewake.Waker(r, sock)
    assert not waker.wait(0.05)                       # nothing yet: the timeout
    assert sparewake.wake_all(str(tmp_path)) == 1
    assert sparewake.wake_all(str(tmp_path)) == 1     # two wakes before it looks: one wait ends
    assert waker.wait(1.0)
    assert not waker.wait(0.05)                       # both were read
    os.write(w, b"w")                                 # the controller's wake, through the agent
    assert waker.wait(1.0)
    waker.close()
    assert not (tmp_path / "w7.sock").exists()
    assert sparewake.wake_all(str(tmp_path)) == 0     # a rank that took over is not woken again
    os.close(r)
    os.close(w)


def test_stale_and_foreign_sockets_are_skipped(tmp_path):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(tmp_path / "w3.sock"))
    stale.close()                                     # its spare is gone: the file stays, nobody reads
    (tmp_path / "wx.sock").write_text("")             # not a spare's name
    live = sparewake.SpareSocket(str(tmp_path), 4)
    try:
        assert sparewake.wake_all(str(tmp_path)) == 1
    finally:
        live.close()
    assert sparewake.wake_all(str(tmp_path / "missing")) == 0
