"""Test job: a rank that saves its state on SIGTERM, taking RANK * SECONDS to do it (argv: DIR
SECONDS MODE MARKER; MODE ``runtime`` starts planaria's runtime, ``plain`` does not). The saved
state is DIR/saved-<rank>; the rank then dies by the signal. Each rank first starts a helper
process that sleeps (its command line holds MARKER)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mpi4py import MPI

out, seconds, mode, marker = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
if mode == "runtime":
    import planaria as pl
    comm = pl.world()
    rank = comm.rank
else:
    rank = MPI.COMM_WORLD.Get_rank()


def save(signum, _frame):
    time.sleep(rank * seconds)                    # the rank's state takes this long to write
    (out / f"saved-{rank}").write_text(str(time.time()))
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


signal.signal(signal.SIGTERM, save)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100)", marker])
print(f"rank {rank} waiting", flush=True)
time.sleep(100)
