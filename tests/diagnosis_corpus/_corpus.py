"""What every corpus program shares: the communicator and the fault marker.

``CORPUS_MODE=plain`` (set by the runner for the ``plain`` mode): the program is a plain mpi4py
program (``MPI.COMM_WORLD``, planaria is not imported); otherwise it runs with planaria's
runtime (``planaria.world()``). ``fault()`` prints ``FAULT <epoch seconds>`` just before the
fault, the time origin of the time-to-answer measurement.
"""
import os
import time

PLAIN = os.environ.get("CORPUS_MODE") == "plain"

if PLAIN:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD

    def step(i):
        pass
else:
    import planaria as pl

    comm = pl.world()
    step = pl.step


def fault():
    print(f"FAULT {time.time():.6f}", flush=True)
