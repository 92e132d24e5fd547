"""Fault localization scenarios (see ``planaria bench localize --help``)."""
import sys

from planaria.cli.main import main

if __name__ == "__main__":
    sys.argv[1:1] = ["bench", "localize"]
    main()
