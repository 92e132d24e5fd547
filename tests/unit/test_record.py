"""``planaria.util.record`` makes the classes ``@dataclass`` makes, without the dataclasses module."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from planaria.util.record import field, record


def _pair(frozen: bool = False):
    def body(deco, fld):
        @deco
        class Opts:
            command: list[str]
            nprocs: int
            backend: str = "auto"
            inject: list[str] = fld(default_factory=list)
            timeout: float | None = 3600.0

            def twice(self) -> int:
                return 2 * self.nprocs
        return Opts
    mine = body(record(frozen=True) if frozen else record, field)
    theirs = body(dataclasses.dataclass(frozen=True) if frozen else dataclasses.dataclass, dataclasses.field)
    return mine, theirs


@pytest.mark.parametrize("frozen", [False, True])
def test_the_same_instances_as_a_dataclass(frozen):
    mine, theirs = _pair(frozen)
    for args, kwargs in (((["x"], 2), {}), ((), {"command": ["y"], "nprocs": 3, "timeout": None}),
                         ((["z"], 4, "sim"), {"inject": ["kill:rank=1"]})):
        a, b = mine(*args, **kwargs), theirs(*args, **kwargs)
        assert repr(a) == repr(b) and a.twice() == b.twice()
        assert a == mine(*args, **kwargs) and a != mine(["other"], 9)
        assert a.__match_args__ == b.__match_args__
    assert mine(["x"], 1).inject is not mine(["x"], 1).inject        # a default made for each instance
    if frozen:
        assert hash(mine(("x",), 1, inject=())) == hash(mine(("x",), 1, inject=())) == hash(theirs(("x",), 1, inject=()))
        with pytest.raises(AttributeError):
            mine(["x"], 1).nprocs = 2
    else:
        a = mine(["x"], 1)
        a.nprocs = 5
        assert a.nprocs == 5
        with pytest.raises(TypeError):
            hash(a)


@pytest.mark.parametrize("args, kwargs", [((), {"nprocs": 1}), ((["x"], 1), {"nprocs": 2}), ((["x"], 1), {"bogus": 1}),
                                          ((["x"], 1, "a", [], 1.0, "extra"), {})])
def test_wrong_arguments_are_refused_as_a_dataclass_refuses_them(args, kwargs):
    mine, theirs = _pair()
    with pytest.raises(TypeError):
        theirs(*args, **kwargs)
    with pytest.raises(TypeError):
        mine(*args, **kwargs)


def test_the_launcher_starts_without_the_dataclasses_module():
    code = "import sys, planaria.launch.runner, planaria.cli.runjob\nprint('dataclasses' in sys.modules, 'inspect' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr
