"""One rank of the mpi4py compatibility check (started by ``benchmarks/compat.py``).

    python compat_rank.py TESTS_DIR MODULE [--raw]

Runs the world-communicator test classes (``Test*World``) of one module of mpi4py's own test
suite. Without ``--raw`` their communicator is ``pl.world()`` instead of ``MPI.COMM_WORLD``:
the class attribute ``COMM``, or what ``setUp`` sets. Rank 0 prints one line
``COMPAT {json}``: tests run, passed, failed (failures and errors), skipped, and the first
failures with their last line.
"""
from __future__ import annotations

import io
import json
import sys
import unittest


def _world_classes(module: object) -> list[type]:
    """The module's test classes named ``...World`` (mpi4py's world-communicator variants)."""
    out = []
    for name in dir(module):
        cls = getattr(module, name)
        if isinstance(cls, type) and issubclass(cls, unittest.TestCase) and name.endswith("World"):
            out.append(cls)
    return out


def _swap(cls: type, world: object, mpi_world: object) -> None:
    """Make ``cls`` run on ``world`` wherever it would use ``MPI.COMM_WORLD`` itself."""
    if getattr(cls, "COMM", None) == mpi_world:
        cls.COMM = world
    set_up = cls.setUp

    def setUp(self: unittest.TestCase) -> None:     # noqa: N802 - unittest's name
        set_up(self)
        if getattr(self, "COMM", None) == mpi_world:
            self.COMM = world
    cls.setUp = setUp


class _Result(unittest.TextTestResult):
    """Also keeps the ids (``Class.test``) of the tests that passed, to compare with the raw run."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.passed_ids: list[str] = []

    def addSuccess(self, test: unittest.TestCase) -> None:     # noqa: N802 - unittest's name
        super().addSuccess(test)
        self.passed_ids.append(".".join(test.id().rsplit(".", 2)[-2:]))


class _Runner(unittest.TextTestRunner):
    resultclass = _Result


def _host_arrays_only() -> None:
    """mpi4py's tests add GPU-array backends for every array library that imports (``arrayimpl``:
    CuPy, Numba's CUDA arrays). planaria installs Numba for its terrain kernels; on a machine without
    a GPU those tests fail for raw mpi4py and planaria alike. The comparison is about host buffers,
    so the libraries are hidden from the test modules, as on a machine without them."""
    for name in ("numba", "numba.cuda", "cupy"):
        sys.modules[name] = None  # type: ignore[assignment] - None makes ``import`` raise ImportError


def main(argv: list[str]) -> int:
    tests_dir, module_name = argv[0], argv[1]
    raw = "--raw" in argv[2:]
    sys.path.insert(0, tests_dir)
    _host_arrays_only()
    from mpi4py import MPI
    if raw:
        comm = MPI.COMM_WORLD
    else:
        import planaria as pl
        comm = pl.world()
    module = __import__(module_name)
    suite = unittest.TestSuite()
    for cls in _world_classes(module):
        if not raw:
            _swap(cls, comm, MPI.COMM_WORLD)
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(cls))
    res = _Runner(stream=io.StringIO(), verbosity=0).run(suite)
    bad = res.failures + res.errors
    if comm.Get_rank() == 0:
        print("COMPAT " + json.dumps({
            "module": module_name, "run": res.testsRun, "failed": len(bad), "skipped": len(res.skipped),
            "passed": res.testsRun - len(bad) - len(res.skipped), "passed_ids": sorted(res.passed_ids),
            "failures": [[t.id().rsplit(".", 1)[-1], (tb.strip().splitlines() or [""])[-1][:200]]
                         for t, tb in bad[:10]]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
