"""Which failure errors the message log records: the program's, not those of planaria's own recovery calls."""
from __future__ import annotations

import pytest

from planaria.comm import base, msglog
from planaria.comm.errors import ProcFailedError, RevokedError


class _Recorded:
    """What ``msglog.failed`` reads of a recorded communicator."""

    _ml_on = True
    _ml_id = "world"

    def _world_of(self, rank: int) -> int:
        return rank


def _raise_in_program(comm: _Recorded, exc: BaseException) -> None:
    base.noted(comm, exc)


def test_failures_inside_own_calls_are_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    lg = msglog.MsgLog()
    monkeypatch.setattr(msglog, "_LOG", lg)
    comm = _Recorded()
    _raise_in_program(comm, ProcFailedError([3]))
    with base.own_calls():
        _raise_in_program(comm, RevokedError())
        with base.own_calls():                       # nested: a spare's wait, then its recovery
            _raise_in_program(comm, ProcFailedError([3]))
        _raise_in_program(comm, RevokedError())
    with pytest.raises(KeyError), base.own_calls():  # a block left by an exception ends too
        raise KeyError("out")
    _raise_in_program(comm, RevokedError())
    names = [(f[2], f[3], f[4].rsplit(" in ", 1)[1]) for f in lg.failures]
    assert names == [("world", [3], "_raise_in_program"), ("world", [], "_raise_in_program")]
    assert base._OWN_CALLS == 0
