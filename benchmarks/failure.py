"""Run the failure benchmark: `python benchmarks/failure.py --help` (same as `planaria bench failure`).

The MPI program and the driver live in ``planaria.bench.failure``; this file only starts the driver.
"""
import sys

from planaria.bench.failure import main

if __name__ == "__main__":
    sys.exit(main())
