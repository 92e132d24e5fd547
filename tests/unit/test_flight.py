"""The flight record: what a rank passed to its last count-checked collective, read back from its
file (as after a crash), and the count mismatch found across ranks."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from planaria.comm import flight
from planaria.diagnose.postmortem import postmortem


class _Comm:
    """Stands in for a recorded communicator's fields (the record needs ``_fl`` and ``_ml_seq``)."""

    def __init__(self, cid: str) -> None:
        self._fl = flight.slot(cid)
        self._ml_seq = 0

    def Allreduce(self, sendbuf: Any, recvbuf: Any) -> None:
        self._ml_seq += 1
        flight.note(self, flight.ALLREDUCE, sendbuf, recvbuf)


@pytest.fixture
def record(tmp_path: Path) -> Any:
    assert flight.open_file(tmp_path / "flight" / "1" / "3.bin", 3)
    yield tmp_path
    flight.close()


def test_a_call_is_read_back_with_its_size_and_call_site(record: Path) -> None:
    world, sub = _Comm("world"), _Comm("world.s1c0")
    world.Allreduce(np.ones(4), np.zeros(4))
    line = sys._getframe().f_lineno + 1
    world.Allreduce(np.ones(2), np.zeros(2))
    from mpi4py import MPI
    sub.Allreduce(MPI.IN_PLACE, np.zeros(3, dtype=np.int32))        # in place: the receive buffer counts
    got = flight.read_dir(record)
    assert list(got) == [3]
    w, s = got[3]
    assert (w["comm"], w["seq"], w["op"], w["bytes"]) == ("world", 2, "Allreduce", 16)
    assert w["site"] == f"{__file__}:{line} in {sys._getframe().f_code.co_name}"
    assert (s["comm"], s["seq"], s["bytes"]) == ("world.s1c0", 1, 12)


def test_the_record_outlives_a_crashed_process(tmp_path: Path) -> None:
    """A process that dies of SIGSEGV right after the call leaves its record in the file."""
    prog = (
        "import ctypes, numpy as np\n"
        "from planaria.comm import flight\n"
        f"flight.open_file({str(tmp_path / 'flight' / '1' / '0.bin')!r}, 0)\n"
        "class C:\n"
        "    _fl = flight.slot('world'); _ml_seq = 7\n"
        "    def Bcast(self, buf):\n"
        "        flight.note(self, flight.BCAST, buf)\n"
        "C().Bcast(np.ones(5))\n"
        "ctypes.string_at(0)\n"
    )
    res = subprocess.run([sys.executable, "-c", prog], capture_output=True, timeout=60,
                         env=dict(os.environ, PYTHONFAULTHANDLER="0"))
    assert res.returncode == -11
    assert [(s["op"], s["seq"], s["bytes"]) for s in flight.read_dir(tmp_path)[0]] == [("Bcast", 7, 40)]


def test_sizes_of_buffer_specs() -> None:
    from mpi4py import MPI
    assert flight.size(np.ones(3)) == 24
    assert flight.size([np.ones(8), 3, MPI.DOUBLE]) == 24          # the count, not the whole array
    assert flight.size([bytearray(5), MPI.BYTE]) == 5
    assert flight.size(b"abc") == 3
    assert flight.size([np.ones(8), (np.ones(2), np.zeros(2)), MPI.DOUBLE]) == 0    # vector counts: unknown
    assert flight.size(MPI.IN_PLACE) == 0 and flight.size(None) == 0


def _slot(seq: int, nbytes: int, op: str = "Allreduce", comm: str = "world") -> dict[str, Any]:
    return {"comm": comm, "seq": seq, "op": op, "bytes": nbytes, "site": "a.py:12 in <module>"}


def test_the_odd_size_in_one_call_is_named() -> None:
    recs = {r: [_slot(2, 8 << 20 if r == 1 else 8)] for r in range(4)}
    mm = flight.size_mismatch(recs)
    assert mm is not None and (mm["odd"], mm["others"], mm["odd_bytes"], mm["other_bytes"]) == ([1], [0, 2, 3], 8 << 20, [8])
    # ranks at different calls, or in different operations, are not compared
    assert flight.size_mismatch({0: [_slot(2, 8)], 1: [_slot(3, 16)]}) is None
    assert flight.size_mismatch({0: [_slot(2, 8)], 1: [_slot(2, 16, op="Bcast")]}) is None
    assert flight.size_mismatch({r: [_slot(2, 8)] for r in range(3)}) is None


def test_postmortem_names_the_mismatch_not_the_crashed_ranks() -> None:
    """Ranks 0 and 3 died of SIGSEGV inside the call; rank 1 passed the odd count: it is the root cause."""
    events = [{"type": "lost", "rank": r, "reason": "killed by signal 11 (SIGSEGV) (no report)", "t": 5.0}
              for r in (0, 3)]
    events += [{"type": "fail", "rank": r, "reason": "uncaught ProcFailedError", "t": 5.1,
                "saw_failure": {"op": "Allreduce", "comm": "world", "ranks": [0, 3], "site": "a.py:12 in <module>"}}
               for r in (1, 2)]
    recs = {r: [_slot(2, 8 << 20 if r == 1 else 8)] for r in range(4)}
    rep = postmortem(events, "j", flight=recs)
    rc = rep["root_causes"][0]
    assert (rc["kind"], rc["rank_list"], rc["site"]) == ("collective-mismatch", [1], "a.py:12 in <module>")
    assert len(rep["root_causes"]) == 1 and rep["verdict"] == "collective-mismatch"
    assert rep["consequences"]["0"]["by"] == "count mismatch"
    assert rep["text"].splitlines()[1].startswith("root cause: rank 1 passed 8 MiB to Allreduce #2 on world")
    # without the records the crashed ranks stay the root causes
    assert [rc["rank_list"] for rc in postmortem(events, "j")["root_causes"]] == [[0], [3]]


def test_postmortem_of_a_program_without_records_reads_the_sizes_from_the_crash_line(tmp_path: Path) -> None:
    """A plain mpi4py program: rank 0's crash site holds an Allreduce whose buffer size the source
    gives for every rank."""
    prog = tmp_path / "app.py"
    prog.write_text("import numpy as np\nfrom mpi4py import MPI\ncomm = MPI.COMM_WORLD\n"
                    "a = np.ones(1000 if comm.rank == 2 else 1)\ncomm.Allreduce(a, np.zeros_like(a))\n")
    site = f"{prog}:5 in <module>"
    summary = [{"rank": 0, "state": "lost", "how": "killed by signal 11 (SIGSEGV)", "site": site, "t": 5.0}]
    summary += [{"rank": r, "state": "finished", "how": "exit 1", "exit_code": 1} for r in (1, 2, 3)]
    rep = postmortem([], "j", summary=summary)
    rc = rep["root_causes"][0]
    assert (rc["kind"], rc["rank_list"], rc["site"]) == ("collective-mismatch", [2], site)
    assert "passed 7.8 KiB to Allreduce on world where rank(s) 0-1,3 passed 8 B" in rc["reason"]
    assert "sizes read from the source line" in rep["text"]
