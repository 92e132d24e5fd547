"""Run the job-start benchmark: `python benchmarks/start.py --help` (same as `planaria bench start`).

The program and the driver live in ``planaria.bench.start``; this file only starts the driver.
"""
import sys

from planaria.bench.start import main

if __name__ == "__main__":
    sys.exit(main())
