"""Benchmarks of planaria, run from the repository root: ``python -m benchmarks NAME [options]``.

Each module holds a benchmark's command (its options, declared once, registered by
``benchmarks.cli``), its driver (run once, outside MPI: launches ``mpiexec``, collects rank 0's
JSON result and summarizes it) and, for most, the MPI program run in every rank
(``python -m benchmarks.<name> --rank ...``). Not part of the installed library.
"""
from __future__ import annotations

import os
from pathlib import Path

#: the repository root: the directory that holds this package
ROOT = Path(__file__).resolve().parent.parent


def _export_root() -> None:
    """Put the repository root on ``PYTHONPATH`` of this process's environment, so the rank programs
    and helper processes a benchmark starts (``python -m benchmarks.X``, under mpiexec or
    ``planaria run``) import this package whatever their current directory."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *parts])


_export_root()
