"""Run the checkpoint benchmark: `python benchmarks/checkpoint.py --help`.

The MPI program and the driver live in ``planaria.bench.checkpoint``; this file only starts the driver.
"""
import sys

from planaria.bench.checkpoint import main

if __name__ == "__main__":
    sys.exit(main())
