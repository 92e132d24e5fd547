"""planaria's failure errors are mpi4py exceptions of ULFM's classes, and stay planaria's exceptions."""
from __future__ import annotations

import pickle
import subprocess
import sys

from mpi4py import MPI

from planaria.comm.errors import FailureError, ProcFailedError, RevokedError


def test_errors_are_mpi_exceptions_of_ulfm_classes() -> None:
    failed, revoked = ProcFailedError([2, 0]), RevokedError()
    for exc in (failed, revoked):
        assert isinstance(exc, MPI.Exception) and isinstance(exc, RuntimeError) and isinstance(exc, FailureError)
    assert failed.Get_error_class() == failed.error_class == MPI.ERR_PROC_FAILED
    assert revoked.Get_error_class() == revoked.Get_error_code() == MPI.ERR_REVOKED
    assert str(failed) == "process failure: rank(s) [0, 2] failed" and failed.ranks == {0, 2}
    assert str(revoked) == "communicator revoked" and "Revoked" in revoked.Get_error_string()
    assert repr(revoked) == "RevokedError('communicator revoked')"


def test_errors_pickle_with_their_ranks_and_message() -> None:
    back = pickle.loads(pickle.dumps(ProcFailedError([1], "rank 1 is gone")))
    assert type(back) is ProcFailedError and back.ranks == {1} and str(back) == "rank 1 is gone"
    assert back.Get_error_class() == MPI.ERR_PROC_FAILED
    again = pickle.loads(pickle.dumps(RevokedError("gone")))
    assert type(again) is RevokedError and str(again) == "gone"


def test_the_module_does_not_start_mpi_until_an_error_class_is_used() -> None:
    code = ("import sys, planaria.comm.errors as e; a = 'mpi4py.MPI' in sys.modules; e.RevokedError; "
            "print(a, 'mpi4py.MPI' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.split() == ["False", "True"], res.stderr
