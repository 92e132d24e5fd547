"""Rank 2 is killed inside ``split``, after the others have entered the new communicator's
activation: gdb, attached to rank 2, stops it at Open MPI's ``mca_pml_ob1_add_comm`` and kills it.
The others learn of the failure while the new communicator is half made (docs/recovery.md).
Only in a job's first attempt: a restart (``planaria run --restart``) runs without gdb."""
import os
import subprocess
import sys
import time

import planaria as pl

world = pl.world()
gdb = None
if world.rank == 2 and os.environ.get("PLANARIA_RESTART", "0") == "0":
    log = open(sys.argv[1], "w")
    gdb = subprocess.Popen(["gdb", "-p", str(os.getpid()), "-batch", "-ex", "break mca_pml_ob1_add_comm",
                            "-ex", "continue", "-ex", "kill"], stdout=log, stderr=subprocess.STDOUT)
    end = time.monotonic() + 30             # gdb stops this process while it attaches and sets the
    while time.monotonic() < end:           # breakpoint: once it runs traced again, that is done
        if any(ln.split()[1] != "0" for ln in open("/proc/self/status") if ln.startswith("TracerPid:")):
            break
        time.sleep(0.05)
    time.sleep(0.2)
world.barrier()
world.split(0 if world.rank < world.size - 2 else None, world.rank)
print(f"split returned at rank {world.rank}", flush=True)
world.barrier()                             # the ranks outside the split learn of the failure here
