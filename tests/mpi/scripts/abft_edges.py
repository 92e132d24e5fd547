"""The masters' edge rows on 2 real ranks: each master recomputes one and takes the other's; without it, both."""
import sys

import numpy as np

import planaria as pl
from planaria.abft import runtime
from planaria.abft.partition import partition
from planaria.terrain import dem_info, kernels, read_dem

dem = sys.argv[1]
world = pl.world()
rank = world.rank
info = dem_info(dem)
d = read_dem(dem)
n = 4
for kernel in ("slope", "cutdepth"):
    fn, window = kernels[kernel]
    blocks = partition(info.shape[0], n, window)
    serial = fn(d.data, cell_size=d.cell_size, nodata=d.nodata)
    want = {0: serial[blocks[0].r1], n - 1: serial[blocks[-1].r0]}
    args = runtime.parse(["--kernel", kernel, "--dem", dem, "--out", "unused.npy"])

    # the replica never starts (sends nothing): the primary recomputes both rows itself
    c = world.dup()
    if rank == 0:
        m = runtime.Master(c, args, info, blocks, "primary")
        m._complete_edges()
        assert m.edge_here == [0, n - 1], m.edge_here
        assert all(np.array_equal(m.edge_rows[b], want[b], equal_nan=True) for b in want)
    c.Barrier()

    # both start: each recomputes its own row and receives the other's
    c = world.dup()
    m = runtime.Master(c, args, info, blocks, "primary" if rank == 0 else "replica-passive")
    c.Barrier()
    c.mpi.Probe(source=1 - rank, tag=runtime.T_EDGE)  # the other's row has arrived
    m._complete_edges()
    assert m.edge_here == ([0] if rank == 0 else [n - 1]), m.edge_here
    assert sorted(m.edge_rows) == [0, n - 1]
    assert all(np.array_equal(m.edge_rows[b], want[b], equal_nan=True) for b in want)
    c.Barrier()
    print(f"OK edges-{kernel} {rank}", flush=True)
pl.finalize(0)
