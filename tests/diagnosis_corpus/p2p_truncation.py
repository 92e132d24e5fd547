"""Rank 0 sends 16 doubles, rank 1 receives into a buffer of 4: MPI_ERR_TRUNCATE on rank 1."""
import numpy as np

from _corpus import comm, fault

if comm.rank == 0:
    comm.Send(np.ones(16), dest=1, tag=5)
elif comm.rank == 1:
    buf = np.zeros(4)
    fault()
    comm.Recv(buf, source=0, tag=5)            # ROOT: buffer too small for the message
comm.Barrier()
