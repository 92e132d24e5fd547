"""ULFM across two hosts: the last rank (on the second host) SIGKILLs itself.

Survivors detect the failure on a buffer collective, revoke, shrink, and
finish an Allreduce on the shrunken communicator.  Usage:
    multihost_ulfm.py VICTIM_HOST
The victim is the highest rank whose hostname is VICTIM_HOST.
"""
import os
import signal
import socket
import sys
import time

import numpy as np
from mpi4py import MPI


def finish(code: int) -> None:
    # MPI_Finalize can spin after a failure: flush and leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _excepthook(*exc_info) -> None:
    # any uncaught error: report it and exit 0, since a non-zero exit aborts
    # the job and leaves the survivors hanging
    import traceback

    traceback.print_exception(*exc_info)
    print("RANK ? UNCAUGHT ERROR", flush=True)
    finish(0)


sys.excepthook = _excepthook
victim_host = sys.argv[1]
comm = MPI.COMM_WORLD
comm.Set_errhandler(MPI.ERRORS_RETURN)
host = socket.gethostname()
hosts = comm.allgather(host)
on_victim = [r for r, h in enumerate(hosts) if h == victim_host]
if not on_victim:
    if comm.rank == 0:
        print(f"NO RANK ON {victim_host}: {hosts}", flush=True)
    finish(0)
victim = max(on_victim)
print(f"RANK {comm.rank} HOST {host} VICTIM {victim}", flush=True)

t0 = time.monotonic()
err = None
try:
    # The failure may already surface here: a fast survivor can revoke while
    # a slower one is still in this Barrier.
    comm.Barrier()
    if comm.rank == victim:
        print(f"RANK {comm.rank} HOST {host} KILLING ITSELF", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    for _ in range(100):  # the first collectives may still complete before the failure is known
        buf = np.ones(1)
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        comm.Barrier()
        time.sleep(0.05)
except MPI.Exception as exc:
    err = exc.Get_error_class()
if err is None:
    print(f"RANK {comm.rank} NO FAILURE SEEN", flush=True)
    finish(0)
print(f"RANK {comm.rank} HOST {host} DETECTED class={err} after {time.monotonic() - t0:.3f}s", flush=True)

try:
    comm.Revoke()
    shrunk = comm.Shrink()
    buf = np.array([1.0])
    shrunk.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
except Exception as exc:  # report and leave with 0: a non-zero exit would abort the survivors
    print(f"RANK {comm.rank} HOST {host} RECOVERY ERROR {exc!r}", flush=True)
    finish(0)
print(f"RANK {comm.rank} HOST {host} SHRUNK size={shrunk.Get_size()} sum={int(buf[0])}", flush=True)
if int(buf[0]) == shrunk.Get_size() == comm.size - 1:
    print(f"RANK {comm.rank} HOST {host} ULFM-RECOVERED", flush=True)
# A rank leaving early is itself a failure for peers still inside a collective:
# hold everyone until all have finished the Allreduce, then linger briefly.
try:
    shrunk.Barrier()
except MPI.Exception:
    pass
time.sleep(0.5)
finish(0)
