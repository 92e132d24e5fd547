"""Run the control-plane scale benchmark: `python benchmarks/controlplane.py --help` (same as `planaria bench controlplane`).

The controller process, the simulated ranks and the measurements live in ``planaria.bench.controlplane``;
this file only starts the driver.
"""
import sys

from planaria.bench.controlplane import main

if __name__ == "__main__":
    sys.exit(main())
