"""Run the detection-overhead benchmark: `python benchmarks/detect.py --help` (same as `planaria bench detect`).

The kernels live in ``planaria.bench.npb`` and the driver in ``planaria.bench.detect``; this file only starts the driver.
"""
import sys

from planaria.bench.detect import main

if __name__ == "__main__":
    sys.exit(main())
