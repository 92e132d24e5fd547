"""planaria's exceptions have one root, ``PlanariaError``, and making one has no global effect."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

import planaria as pl
from planaria import errors

#: exceptions that are deliberately not ``Exception``s (like ``KeyboardInterrupt``: user code's
#: ``except Exception`` must not swallow them), hence outside the root
NOT_EXCEPTIONS = {"planaria.fragments.interrupt.Interrupted"}

#: every module of the package is imported in a fresh interpreter (some start MPI on import);
#: ``planaria.bench`` is not part of the package's contract
WALK = textwrap.dedent("""
    import importlib, inspect, json, pkgutil
    import planaria, planaria.errors
    planaria.errors.FailureError          # made on first use
    failed, found = {}, []
    for m in pkgutil.walk_packages(planaria.__path__, "planaria."):
        if m.name.startswith("planaria.bench") or m.name.endswith("__main__"):
            continue
        try:
            mod = importlib.import_module(m.name)
        except Exception as e:
            failed[m.name] = repr(e)
            continue
        for obj in vars(mod).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == m.name:
                found.append([f"{m.name}.{obj.__qualname__}",
                              [f"{b.__module__}.{b.__qualname__}" for b in obj.__mro__]])
    print(json.dumps({"failed": failed, "found": found}))
""")


def test_every_exception_class_of_the_package_is_a_planaria_error() -> None:
    res = subprocess.run([sys.executable, "-c", WALK], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["failed"] == {}
    names = {name for name, _ in out["found"]}
    assert "planaria.errors.ProcFailedError" in names and "planaria.launch.errors.LaunchError" in names
    strays = [name for name, mro in out["found"]
              if "planaria.errors.PlanariaError" not in mro and name not in NOT_EXCEPTIONS]
    assert strays == []
    for name, mro in out["found"]:
        if name in NOT_EXCEPTIONS:
            assert "builtins.Exception" not in mro, name


def test_the_hierarchy_keeps_the_builtin_bases_callers_catch() -> None:
    assert issubclass(pl.FailureError, pl.PlanariaError) and issubclass(pl.FailureError, RuntimeError)
    assert issubclass(pl.ProcFailedError, pl.FailureError) and issubclass(pl.RevokedError, pl.FailureError)
    assert issubclass(pl.BadInput, ValueError)
    assert issubclass(pl.SparesExhausted, errors.RecoveryStopped)
    assert issubclass(pl.Unrecoverable, RuntimeError) and pl.Unrecoverable.exit_status == 3
    from mpi4py import MPI
    assert issubclass(pl.FailureError, MPI.Exception)
    from planaria.comm import errors as comm_errors
    from planaria.recovery import driver
    assert comm_errors.ProcFailedError is pl.ProcFailedError          # the old home still works
    assert driver.SparesExhausted is pl.SparesExhausted and driver.RecoveryStopped is errors.RecoveryStopped
    from planaria.inject.plan import PlanError
    from planaria.runtime.adopt import UsageError
    assert issubclass(PlanError, pl.BadInput) and issubclass(UsageError, pl.BadInput)


def test_failure_errors_pickle_with_their_ranks() -> None:
    e = pickle.loads(pickle.dumps(pl.ProcFailedError([3, 1])))
    assert type(e) is pl.ProcFailedError and e.ranks == {1, 3}
    assert "[1, 3]" in str(e)


def test_making_a_failure_error_has_no_global_effect(monkeypatch) -> None:
    monkeypatch.setattr(errors, "_failures_seen", False)
    pl.RevokedError()
    pl.ProcFailedError([1])
    assert not errors.failures_seen()
    err = pl.RevokedError()
    assert errors.failure_raised(err) is err
    assert errors.failures_seen()
