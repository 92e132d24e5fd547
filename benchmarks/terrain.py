"""Run the terrain benchmark: `python benchmarks/terrain.py --help` (same as `planaria bench terrain`).

The options are those of the `planaria bench terrain` command (defined once, in planaria.cli.bench);
the measurements live in ``planaria.bench.terrain``. This file only starts the command.
"""
import sys

from planaria.cli.main import main

if __name__ == "__main__":
    sys.argv = ["planaria", "bench", "terrain", *sys.argv[1:]]
    main()
