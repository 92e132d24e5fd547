"""``python -m planaria PROGRAM.py``: an unchanged mpi4py program on planaria's world communicator
(see ``planaria.runtime.adopt``)."""
import sys

from planaria.runtime.adopt import main

sys.exit(main())
