"""The executor's signal catcher: a signal is noted, raised at a safe point, and still takes its course."""
from __future__ import annotations

import os
import signal

import pytest

from planaria.fragments.interrupt import Catcher, Interrupted


@pytest.fixture(autouse=True)
def python_sigint_handler():
    """Python's own SIGINT handler, as in a terminal (a background job inherits SIGINT ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _send(sig: int) -> None:
    os.kill(os.getpid(), sig)          # Python runs the handler before the next bytecode


def test_a_signal_is_noted_then_raised_at_the_next_check():
    before = signal.getsignal(signal.SIGTERM)
    c = Catcher().install()
    try:
        _send(signal.SIGTERM)
        assert c.pending == signal.SIGTERM
        with pytest.raises(Interrupted) as e:
            c.check()
        assert e.value.name == "SIGTERM"
        c.check()                      # raised once only
    finally:
        c.restore()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_acts_at_once_as_before():
    c = Catcher().install()
    try:
        _send(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            _send(signal.SIGINT)       # the loop never checked: Python's own SIGINT handler runs
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        c.close()


def test_a_signal_noted_after_the_last_check_is_redelivered_at_close():
    c = Catcher().install()
    _send(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        c.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_signal_stays_ignored():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        c = Catcher().install()
        assert signal.SIGHUP not in c.old
        _send(signal.SIGHUP)
        assert c.pending is None
        c.close()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)
