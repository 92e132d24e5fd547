"""Run an unchanged mpi4py program with planaria's world communicator as ``MPI.COMM_WORLD``.

    planaria run -n 4 -- python -m planaria prog.py ARGS...     (or planaria run --world)
    planaria run -n 4 -- python -m planaria -m package.module ARGS...

Before the program's first line runs, ``pl.world()`` starts this rank's runtime (its controller
channel, the message log and run-time localization when ``planaria run`` turns them on, event
handlers, fault injection) and ``mpi4py.MPI.COMM_WORLD`` is replaced by that communicator, so
``from mpi4py import MPI; comm = MPI.COMM_WORLD`` (and ``from mpi4py.MPI import COMM_WORLD``)
give the program planaria's communicator. What changes for the program:

* its world communicator is a duplicate of MPI's (same ranks and size, its own context), on
  which failures raise ``pl.ProcFailedError`` / ``pl.RevokedError`` instead of aborting the job;
* an exception the program does not catch ends the rank with one line on stderr and the
  runtime's exit status (as for any program that calls ``pl.world()``);
* ``MPI.COMM_SELF``, communicators the program builds from ``MPI.COMM_WORLD``'s group by hand,
  and mpi4py's own helpers that use the C-level world (``mpi4py.futures``) are not replaced.

Iteration-triggered faults (``--inject kill:...,iter=N``) count ``pl.step`` calls, which an
unchanged program does not make; ``--steps-by NAME`` counts every call of the world
communicator's method NAME (e.g. ``Allreduce``) as one iteration instead.
"""
from __future__ import annotations

import os
import runpy
import sys
from typing import Any
from planaria.errors import BadInput

USAGE = ("usage: python -m planaria [--steps-by METHOD] (PROGRAM.py | -m MODULE) [ARGS...]\n"
         "Runs an unchanged mpi4py program with planaria's world communicator as MPI.COMM_WORLD.")


class UsageError(BadInput):
    """The command line of ``python -m planaria`` is malformed."""


def parse(argv: list[str]) -> tuple[str | None, str | None, str | None, list[str]]:
    """(steps_by, path, module, program args) from ``python -m planaria``'s arguments."""
    steps_by = None
    args = list(argv)
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt in ("--help", "-h"):
            raise UsageError(USAGE)
        if opt == "--steps-by" and args:
            steps_by = args.pop(0)
        elif opt.startswith("--steps-by="):
            steps_by = opt.split("=", 1)[1]
        else:
            raise UsageError(f"python -m planaria: unknown option {opt!r} (see --help)")
        if not steps_by or not steps_by.isidentifier():
            raise UsageError(f"python -m planaria: --steps-by {steps_by!r}: expected a method name such as Allreduce")
    if not args or args[0] == "-h":
        raise UsageError(USAGE)
    if args[0] == "-m":
        if len(args) < 2:
            raise UsageError("python -m planaria: -m needs a module name")
        return steps_by, None, args[1], args[2:]
    return steps_by, args[0], None, args[1:]


def _count_steps(comm: Any, name: str) -> None:
    """Make each call of ``comm.NAME`` one application iteration (``pl.step``)."""
    from planaria.runtime.bootstrap import step

    method = getattr(comm, name, None)
    if not callable(method):
        raise UsageError(f"python -m planaria: --steps-by {name!r}: the world communicator has no method {name!r}")
    counter = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        step(counter[0])
        counter[0] += 1
        return method(*args, **kwargs)
    counted.__name__ = name
    setattr(comm, name, counted)     # on this object only: other communicators are not counted


def install(steps_by: str | None = None) -> Any:
    """Start the runtime and make its world communicator mpi4py's ``COMM_WORLD``; returns it."""
    from mpi4py import MPI

    import planaria as pl

    comm = pl.world()
    if steps_by:
        _count_steps(comm, steps_by)
    MPI.COMM_WORLD = comm  # type: ignore[misc,assignment]  # the point of adopt: mpi4py's Final world becomes planaria's Comm
    return comm


def main(argv: list[str] | None = None) -> int:
    """``python -m planaria``: install the world communicator, then run the program as ``__main__``."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        steps_by, path, module, args = parse(argv)
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"python -m planaria: {path}: no such file")
        install(steps_by)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if module is not None:
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        assert path is not None            # parse gives a module or a path
        sys.argv = [path, *args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        runpy.run_path(path, run_name="__main__")
    return 0
