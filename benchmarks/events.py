"""Run the events benchmark: `python benchmarks/events.py --help` (same as `planaria bench events`).

The rank program and the driver live in ``planaria.bench.events``; this file only starts the driver.
"""
import sys

from planaria.bench.events import main

if __name__ == "__main__":
    sys.exit(main())
