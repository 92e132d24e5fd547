"""``python -m benchmarks NAME [options]`` (from the repository root): see ``benchmarks.cli``."""
from benchmarks.cli import main

main()
