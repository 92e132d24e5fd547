"""Benchmarks of planaria itself: failure detection and shrink, and the cost of ``planaria.Comm``.

Each module holds the MPI program (run inside every rank, ``python -m planaria.bench.<name> --rank ...``)
and the driver (run once, outside MPI) that launches ``mpiexec``, collects rank 0's JSON result and
summarizes it. ``planaria bench ...`` and ``benchmarks/*.py`` call the drivers.
"""
