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
        flight.note(self._fl, self._ml_seq, flight.ALLREDUCE, sendbuf, recvbuf)


@pytest.fixture(scope="session")
def c_note(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The C note, built into a cache of this session's own (as ``planaria run`` builds it)."""
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(cache))
    try:
        built = flight.note_build()
    finally:
        mp.undo()
    if built is None:
        pytest.skip("no C compiler or no Python headers: the C note cannot be built here")
    return built


@pytest.fixture(params=["python", "c"])
def record(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A record open for this process, written by the Python note or by the C one."""
    monkeypatch.setenv("PLANARIA_FLIGHT_NOTE", request.getfixturevalue("c_note") if request.param == "c" else "python")
    assert flight.open_file(tmp_path / "flight" / "1" / "3.bin", 3)
    assert flight.note_kind() == request.param
    yield tmp_path
    flight.close()
    assert flight.note_kind() == "none" and flight.note is flight._py_note


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


def _calls(comm: Any, sub: Any) -> None:
    """The same calls, from several sites and communicators, for both notes."""
    from mpi4py import MPI
    for k in range(3):
        comm.Allreduce(np.ones(k + 1), np.zeros(k + 1))
        sub.Allreduce(MPI.IN_PLACE, np.zeros(3, dtype=np.int32))
    comm.Allreduce([np.ones(8), 3, MPI.DOUBLE], None)
    for _ in range(2):
        sub.Allreduce(np.ones(5, dtype=np.float32), np.zeros(5, dtype=np.float32))


def test_the_c_note_writes_the_words_the_python_note_writes(tmp_path: Path, c_note: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    words = {}
    for kind, env in (("python", "python"), ("c", c_note)):
        monkeypatch.setenv("PLANARIA_FLIGHT_NOTE", env)
        path = tmp_path / kind / "flight" / "1" / "0.bin"
        assert flight.open_file(path, 0) and flight.note_kind() == kind
        try:
            _calls(_Comm("world"), _Comm("world.s1c0"))
        finally:
            flight.close()
        data = path.read_bytes()
        slots = [data[(flight._SLOT0 + s * flight.WORDS) * 8:][:5 * 8] for s in range(2)]   # the words readers read
        words[kind] = (slots, data[flight._CIDS:])              # and the communicators' ids and the code table
    assert words["c"] == words["python"]
    assert [s["bytes"] for s in flight.read(tmp_path / "c" / "flight" / "1" / "0.bin")] == [24, 20]


def test_a_build_for_another_interpreter_is_never_loaded(tmp_path: Path, c_note: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "flightnote-0-x86_64.cpython-399-x86_64-linux-gnu.so"
    other.write_bytes(Path(c_note).read_bytes())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))      # and none of its own
    for env in (str(other), str(tmp_path / "missing.so"), "python", ""):
        monkeypatch.setenv("PLANARIA_FLIGHT_NOTE", env)
        assert flight.open_file(tmp_path / "r.bin", 0)
        try:
            assert flight.note_kind() == "python", env
            _Comm("world").Allreduce(np.ones(2), np.zeros(2))       # the Python note records
            assert flight.read(tmp_path / "r.bin")[0]["bytes"] == 16
        finally:
            flight.close()


def test_the_c_note_waits_for_numpy_and_the_python_note_writes_meanwhile(tmp_path: Path, c_note: str) -> None:
    """A rank's start imports no numpy: the C note (whose load would import it) is loaded by the
    first note after numpy's import; the notes before, through the waiting note, name their own call sites."""
    rec, app = tmp_path / "0.bin", tmp_path / "app.py"
    app.write_text(
        "import sys\n"
        "from planaria.comm import flight\n"
        "flight.open_file(sys.argv[1], 0)\n"
        "out = [flight.note_kind(), 'numpy' in sys.modules]\n"
        "class C:\n"
        "    _fl = flight.slot('world'); _ml_seq = 0\n"
        "    def Bcast(self, buf):\n"
        "        self._ml_seq += 1\n"
        "        flight.note(self._fl, self._ml_seq, flight.BCAST, buf)\n"
        "def seen():\n"
        "    s = flight.read(sys.argv[1])[0]\n"
        "    return [flight.note_kind(), s['site'].split(':')[-1], s['bytes']]\n"
        "c = C()\n"
        "c.Bcast(bytearray(3))\n"
        "out += seen()\n"
        "import numpy as np\n"
        "c.Bcast(np.ones(2))\n"
        "out += seen()\n"
        "c.Bcast(np.ones(4))\n"
        "out += seen()\n"
        "print(out)\n")
    res = subprocess.run([sys.executable, str(app), str(rec)], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PLANARIA_FLIGHT_NOTE=c_note))
    assert res.returncode == 0, res.stderr
    assert eval(res.stdout) == ["python", False, "python", "14 in <module>", 3,     # written by the waiting note
                                "c", "17 in <module>", 16,                         # it loaded the C note after
                                "c", "19 in <module>", 32]


def test_by_default_a_rank_finds_the_build_for_its_interpreter(tmp_path: Path, c_note: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(Path(c_note).parent.parent))    # the cache the build is in
    monkeypatch.delenv("PLANARIA_FLIGHT_NOTE", raising=False)
    assert flight.open_file(tmp_path / "r.bin", 0)
    try:
        assert flight.note_kind() == "c"
    finally:
        flight.close()


def test_without_a_compiler_nothing_is_built_or_noted(tmp_path: Path) -> None:
    code = "from planaria.comm import flight\nprint(flight.note_build())"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["None"], out.stderr
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize("kind", ["python", "c"])
def test_the_record_outlives_a_crashed_process(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    """A process that dies of SIGSEGV right after the call leaves its record in the file."""
    note = request.getfixturevalue("c_note") if kind == "c" else "python"
    prog = (
        "import ctypes, numpy as np\n"
        "from planaria.comm import flight\n"
        f"flight.open_file({str(tmp_path / 'flight' / '1' / '0.bin')!r}, 0)\n"
        "class C:\n"
        "    _fl = flight.slot('world'); _ml_seq = 7\n"
        "    def Bcast(self, buf):\n"
        "        flight.note(self._fl, self._ml_seq, flight.BCAST, buf)\n"
        "C().Bcast(np.ones(5))\n"
        "ctypes.string_at(0)\n"
    )
    res = subprocess.run([sys.executable, "-c", prog], capture_output=True, timeout=60,
                         env=dict(os.environ, PYTHONFAULTHANDLER="0", PLANARIA_FLIGHT_NOTE=note))
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


def test_a_hung_job_whose_flight_records_disagree_blames_the_count_not_the_live_guess() -> None:
    """Every rank was ended by the launcher (a detected hang). The flight records show rank 1 passed
    another count to the call the others wait in: that is the root cause, whatever the live
    diagnosis said of a rank the undefined call left spinning; its claim stays as evidence."""
    events = [{"type": "lost", "rank": r, "t": 9.0, "reason": "killed by signal 15 (SIGTERM) (no report)"}
              for r in range(4)]
    summary = [{"rank": r, "state": "lost", "how": "ended by the launcher (a detected hang)",
                "ended_by": "the launcher (a detected hang)"} for r in range(4)]
    live = {"verdict": "hang", "text": "rank 0 computing\n",
            "root_causes": [{"kind": "computing", "rank_list": [0], "ranks": "0",
                             "reason": "not in MPI: computing (endless loop or slow)"}]}
    recs = {r: [_slot(2, 8 << 20 if r == 1 else 8)] for r in range(4)}
    rep = postmortem(events, "j", summary=summary, last_live=("diag-1.json", live), flight=recs)
    rc = rep["root_causes"][0]
    assert (rc["kind"], rc["rank_list"], rep["verdict"]) == ("collective-mismatch", [1], "collective-mismatch")
    assert len(rep["root_causes"]) == 1
    assert "(diag-1.json) named rank 0: not in MPI: computing" in rep["text"]
    # records that agree leave the live diagnosis as the root causes
    same = postmortem(events, "j", summary=summary, last_live=("diag-1.json", live),
                      flight={r: [_slot(2, 8)] for r in range(4)})
    assert [rc["kind"] for rc in same["root_causes"]] == ["computing"]
