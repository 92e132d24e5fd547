"""A benchmark job that runs out of time: killed, none of its processes left, and its ranks' stacks in the error."""
from __future__ import annotations

import os
import sys
import time
import uuid

import pytest

from benchmarks._launch import BenchError, mpiexec_prefix, run_bounded

pytestmark = pytest.mark.mpi


def _left(marker: str) -> list[int]:
    """Pids of processes whose command line holds ``marker``."""
    out = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    out.append(int(name))
        except (OSError, ValueError):
            pass
    return out


@pytest.mark.timeout(60)
def test_a_job_out_of_time_is_killed_with_its_ranks_stacks_in_the_error() -> None:
    marker = f"stuck_{uuid.uuid4().hex[:8]}"
    program = f"import time\ndef {marker}():\n    time.sleep(120)\n{marker}()\n"
    cmd = mpiexec_prefix(2, ft=True) + [sys.executable, "-c", program]
    t0 = time.monotonic()
    with pytest.raises(BenchError) as err:
        run_bounded(cmd, None, 5.0, "stuck job")
    text = str(err.value)
    assert text.startswith("stuck job timed out after 5 s"), text[:200]
    # faulthandler's trace of each rank names the function it waits in, below the program's code
    assert text.count(f"in {marker}") == 2, text[-3000:]
    assert time.monotonic() - t0 < 30
    deadline = time.monotonic() + 10
    while _left(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _left(marker) == []
