"""Run the N-ABFT terrain benchmark: `python benchmarks/abft.py --help` (same as `planaria bench abft`).

The driver lives in ``planaria.bench.abft``; this file only starts it.
"""
import sys

from planaria.bench.abft import main

if __name__ == "__main__":
    sys.exit(main())
