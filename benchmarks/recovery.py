"""Run the recovery benchmark: `python benchmarks/recovery.py --help` (same as `planaria bench recovery`).

The MPI program and the driver live in ``planaria.bench.recovery``; this file only starts the driver.
"""
import sys

from planaria.bench.recovery import main

if __name__ == "__main__":
    sys.exit(main())
