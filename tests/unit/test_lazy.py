"""``planaria._lazy.np``: numpy on first use, the same objects as numpy's, from any thread."""
from __future__ import annotations

import subprocess
import sys


def test_first_reads_from_several_threads_get_numpy_s_own_objects():
    code = """
import sys, threading
from planaria._lazy import np
assert "numpy" not in sys.modules
got = []
ts = [threading.Thread(target=lambda: got.append((np.zeros, np.int64, np.ndarray))) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
import numpy
assert all(g == (numpy.zeros, numpy.int64, numpy.ndarray) for g in got) and len(got) == 8
assert "zeros" in vars(np)          # kept: later reads are plain lookups
assert np.zeros(3, dtype="int64").tolist() == [0, 0, 0]
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "ok", res.stderr
