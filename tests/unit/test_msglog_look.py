"""How the message log finds the call a thread is blocked in: the short walk of the stack and its table of methods."""
from __future__ import annotations

import sys
from typing import Any

from planaria.comm import base, msglog
from planaria.comm.base import Comm
from tests.fresh import fresh_python


class _Fake(Comm):
    """Operation methods that call back instead of calling MPI (never instantiated)."""

    def Allreduce(self, cb: Any) -> Any:  # noqa: N802 - mpi4py's name
        return cb()

    def allreduce(self, cb: Any) -> Any:
        return _Fake.Allreduce(self, cb)


def _here() -> Any:
    return sys._getframe(1)


def _look(frame: Any) -> str | None:
    found = msglog._outermost_above_app(frame, msglog._codes())
    return None if found is None else found.f_code.co_name


def test_the_operation_the_thread_is_in_is_found() -> None:
    frame = _Fake.Allreduce(None, _here)
    assert _look(frame) == "Allreduce"


def test_nested_operations_report_the_outermost() -> None:
    frame = _Fake.allreduce(None, _here)          # allreduce -> Allreduce -> here
    assert _look(frame) == "allreduce"
    op, site = msglog._op_and_site(frame, msglog._codes())     # what a failure record names
    assert op.f_code.co_name == "allreduce"
    assert site is not None and site.endswith(" in test_nested_operations_report_the_outermost")


def test_application_code_outside_any_operation_is_none() -> None:
    assert _look(_here()) is None


def test_the_walk_stops_at_the_innermost_application_frame() -> None:
    # an operation that calls application code calling another operation (a user reduction
    # function, say): the thread is inside the inner one, a walk of the whole stack would name
    # the outer one; a failure record names the inner one too, at the user function's line
    def user_op() -> Any:
        return _Fake.Allreduce(None, _here)
    frame = _Fake.allreduce(None, user_op)
    assert _look(frame) == "Allreduce"
    op, site = msglog._op_and_site(frame, msglog._codes())
    assert op.f_code.co_name == "Allreduce"
    assert site is not None and site.endswith(" in user_op")


def test_the_method_table_is_rebuilt_when_a_class_is_defined() -> None:
    before = msglog._codes()
    assert msglog._codes() is before                  # nothing new: the same table, not rebuilt
    epoch = base.CLASSES_DEFINED

    class _Later(_Fake):
        def Barrier(self, cb: Any) -> Any:  # noqa: N802
            return cb()
    assert base.CLASSES_DEFINED == epoch + 1
    after = msglog._codes()
    assert after is not before and after[_Later.Barrier.__code__] == "Barrier"
    assert _look(_Later.Barrier(None, _here)) == "Barrier"


def test_a_delegated_method_is_made_on_first_read_and_enters_the_table() -> None:
    """planaria's communicator makes its wrappers of mpi4py's methods when a program first reads
    one (``ulfm._Unmade``); the message log then knows the new wrapper, so a rank blocked in it is
    reported in ``Exscan``. In a fresh interpreter, without MPI's initialization."""
    code = (
        "from mpi4py import rc\n"
        "rc.initialize = False\n"
        "from mpi4py import MPI\n"
        "from planaria.comm import base, msglog, ulfm\n"
        "C = ulfm.UlfmComm\n"
        "assert isinstance(vars(C)['Exscan'], ulfm._Unmade)\n"
        "before, epoch = msglog._codes(), base.CLASSES_DEFINED\n"
        "fn = C.Exscan\n"
        "assert vars(C)['Exscan'] is fn and C.Exscan is fn and fn.__wrapped__ is MPI.Intracomm.Exscan\n"
        "assert fn.__code__.co_name == 'Exscan' and base.CLASSES_DEFINED == epoch + 1\n"
        "assert fn.__code__ not in before and msglog._codes()[fn.__code__] == 'Exscan'\n"
        "cart = ulfm._ready(ulfm.UlfmCartcomm)\n"
        "assert 'Exscan' not in vars(cart) and cart.Exscan is fn    # inherited, not made again\n"
        "assert isinstance(vars(C)['Alltoallw'], ulfm._Unmade)\n"
        "print('ok')\n"
    )
    assert fresh_python(code) == ["ok"]
