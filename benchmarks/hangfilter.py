"""Run the hang-filter grouping benchmark: `python benchmarks/hangfilter.py --help` (same as `planaria bench hangfilter`).

The synthetic data and the timing live in ``planaria.bench.hangfilter``; this file only starts the driver.
"""
import sys

from planaria.bench.hangfilter import main

if __name__ == "__main__":
    sys.exit(main())
