"""Rank 0 sends a large message to itself and never posts the receive: its Send blocks."""
import numpy as np

from _corpus import comm, fault

big = np.ones(1 << 20)                         # 8 MiB: rendezvous, not buffered
if comm.rank == 0:
    fault()
    comm.Send(big, dest=0, tag=1)              # ROOT: no matching receive on rank 0
comm.Barrier()
