"""Run the fragmented-programs benchmark: `python benchmarks/fragments.py --help` (same as `planaria bench fragments`).

The graphs, the rank program and the timing live in ``planaria.bench.fragments``; this file only starts the driver.
"""
import sys

from planaria.bench.fragments import main

if __name__ == "__main__":
    sys.exit(main())
