"""Rank 0 sends one message per step to rank 1; the fault plan drops them
(run with --inject drop:src=0,dst=1,p=1)."""
import numpy as np

from _corpus import comm, fault, step

buf = np.zeros(4)
for i in range(20):
    step(i)
    if comm.rank == 0:
        if i == 0:
            fault()                            # the plan drops every message 0 -> 1
        comm.Send(np.full(4, float(i)), dest=1, tag=i)   # ROOT: the message is dropped (injected)
    elif comm.rank == 1:
        comm.Recv(buf, source=0, tag=i)        # ROOT: (waits for the dropped message)
    comm.Barrier()
