"""Every rank writes a file per step; the fault plan makes rank 1's opens fail with EIO
(run with --inject ioerror:rank=1,iter=3,path=corpus-*.dat): the uncaught OSError ends rank 1."""
import os
import tempfile

import numpy as np

from _corpus import comm, fault, step

d = os.environ.get("PLANARIA_JOB_DIR") or tempfile.gettempdir()
b = np.zeros(1)
for i in range(50):
    if i == 3 and comm.rank == 1:
        fault()                                # the plan's I/O error starts at step 3
    step(i)
    with open(os.path.join(d, f"corpus-{comm.rank}.dat"), "w") as f:   # ROOT: EIO here (injected)
        f.write(str(i))
    comm.Allreduce(np.ones(1), b)
