"""Run the overhead benchmark: `python benchmarks/overhead.py --help` (same as `planaria bench overhead`).

The MPI program and the driver live in ``planaria.bench.overhead``; this file only starts the driver.
"""
import sys

from planaria.bench.overhead import main

if __name__ == "__main__":
    sys.exit(main())
