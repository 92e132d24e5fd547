"""Run the offline-diagnosis benchmark: `python benchmarks/diagnose.py --help` (same as `planaria bench diagnose`).

The driver lives in ``planaria.bench.diagnose``; this file only starts it.
"""
import sys

from planaria.bench.diagnose import main

if __name__ == "__main__":
    sys.exit(main())
