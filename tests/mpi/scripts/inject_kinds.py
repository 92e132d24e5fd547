"""Exercise one fault kind in a real job; rank 0 (and 1) print what they observed as ``SEEN key=value``."""
import os
import sys
import tempfile
import time

import numpy as np

import planaria as pl

kind = sys.argv[1]
comm = pl.world()
r = comm.rank

if kind == "bitflip":
    a = np.zeros(64, dtype=np.float64)
    pl.watch("a", a)
    for i in range(5):
        pl.step(i)
    if r == 1:
        print(f"SEEN changed={int(np.count_nonzero(a))}", flush=True)
elif kind == "ioerror":
    pl.step(0)
    path = os.path.join(tempfile.gettempdir(), f"planaria-io-{os.getpid()}.txt")
    try:
        with open(path, "w") as f:
            f.write("x")
        print(f"SEEN rank={r} io=ok", flush=True)
        os.unlink(path)
    except OSError as e:
        print(f"SEEN rank={r} io=errno{e.errno}", flush=True)
elif kind in ("drop", "delay"):
    if r == 0:
        t = time.perf_counter()
        for i in range(10):
            comm.send(i, dest=1, tag=1)
        got = comm.recv(source=1, tag=2)
        print(f"SEEN received={got} elapsed={time.perf_counter() - t:.3f}", flush=True)
    elif r == 1:
        req = comm.irecv(source=0, tag=1)
        n, deadline = 0, time.time() + 2.0
        while time.time() < deadline and n < 10:
            done, _ = req.test()
            if done:
                n += 1
                if n < 10:
                    req = comm.irecv(source=0, tag=1)
            else:
                time.sleep(0.001)
        comm.send(n, dest=0, tag=2)
elif kind == "hang":
    for i in range(1000):
        pl.step(i)
        comm.Barrier()
        time.sleep(0.01)
