"""The launcher's reading of Python's fatal-error traces (faulthandler) per rank."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from planaria.diagnose import pyspy
from planaria.launch.crashsite import CrashSites
from tests.fresh import fresh_python

TRACE = """Fatal Python error: Segmentation fault

Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/home/u/helper.py", line 5 in loop

Current thread 0x00007fc141e0ac40 (most recent call first):
  File "/usr/lib/python3/site-packages/numpy/core/_methods.py", line 49 in _sum
  File "/home/u/app.py", line 13 in step
  File "/home/u/app.py", line 20 in <module>

Extension modules: mpi4py.MPI, numpy.core._multiarray_umath (total: 2)""".splitlines()


def test_the_crashing_threads_innermost_program_frame_is_the_site() -> None:
    cs = CrashSites()
    for line in TRACE:              # two ranks' lines interleaved: only rank 1 crashed
        cs.feed(1, line)
        cs.feed(0, "an ordinary error line")
    assert cs.site(1) == "/home/u/app.py:13 in step"     # not numpy's frame, not the other thread's
    assert cs.error(1) == "Segmentation fault"
    assert cs.site(0) is None and cs.error(0) is None


def test_a_real_python_crash_is_read() -> None:
    """A real interpreter killed by SIGSEGV under ``PYTHONFAULTHANDLER=1`` prints what CrashSites reads."""
    prog = "import os, signal\ndef f():\n    os.kill(os.getpid(), signal.SIGSEGV)\nf()\n"
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    res = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == -signal.SIGSEGV
    cs = CrashSites()
    for line in res.stderr.splitlines():
        cs.feed(0, line)
    assert cs.site(0) == "<string>:3 in f"
    assert cs.error(0) == "Segmentation fault"


def test_the_mpi_call_a_fatal_signal_struck_in_is_named_only_inside_planarias_mpi_layer() -> None:
    """The innermost frame in ``planaria/comm`` names the call; a program frame, or a traceback, does not."""
    inside = ["Fatal Python error: Segmentation fault", "",
              "Current thread 0x00007f4679c1bb80 (most recent call first):",
              '  File "/x/src/planaria/comm/ulfm.py", line 881 in split',
              '  File "/x/src/planaria/recovery/driver.py", line 831 in _split',
              '  File "/home/u/app.py", line 9 in <module>', "", "Extension modules: mpi4py.MPI (total: 1)"]
    cs = CrashSites()
    for line in inside:
        cs.feed(0, line)
    for line in TRACE:
        cs.feed(1, line)
    for line in ["Traceback (most recent call last):", '  File "/x/src/planaria/comm/ulfm.py", line 881, in split',
                 "KeyError: 2"]:
        cs.feed(2, line)
    assert cs.mpi_call(0) == "split" and cs.site(0) == "/home/u/app.py:9 in <module>"
    assert cs.mpi_call(1) is None and cs.mpi_call(2) is None and cs.mpi_call(3) is None


def test_a_stopped_process_is_read_by_pyspy_without_suspending_it(tmp_path) -> None:
    prog = tmp_path / "stopme.py"
    prog.write_text("import os, signal\ndef f():\n    os.kill(os.getpid(), signal.SIGSTOP)\nf()\n")
    p = subprocess.Popen([sys.executable, str(prog)])
    try:
        deadline = time.monotonic() + 10
        while not pyspy.stopped(p.pid):
            assert time.monotonic() < deadline, "the process did not stop"
            time.sleep(0.02)
        assert not pyspy.stopped(os.getpid())
        if pyspy.executable() is None:
            return
        threads = pyspy.dump(p.pid)
        assert threads and threads[0]["stack"][-1] == [str(prog), 3, "f"], threads
        part = pyspy.sample(1, p.pid, "h", rounds=1, interval=0.0)
        assert part is not None and part["ranks"][0]["status"] == pyspy.STOPPED_STATUS
    finally:
        p.kill()
        p.wait()


def test_an_uncaught_exceptions_traceback_gives_the_site_and_the_error() -> None:
    seen = []
    cs = CrashSites(notify=lambda rank, site, error: seen.append((rank, site, error)))
    for line in ['Traceback (most recent call last):',
                 '  File "/home/u/app.py", line 8, in <module>',
                 '    x = values[comm.rank]',
                 '        ~~~~~~^^^^^^^^^^^',
                 '  File "/usr/lib/python3.11/json/__init__.py", line 346, in loads',
                 'KeyError: 2']:
        cs.feed(2, line)
    assert cs.site(2) == "/home/u/app.py:8 in <module>" and cs.error(2) == "KeyError: 2"
    assert seen == [(2, "/home/u/app.py:8 in <module>", "KeyError: 2")]


def test_mpi4py_cython_frames_are_not_the_site() -> None:
    cs = CrashSites()
    for line in ['Traceback (most recent call last):',
                 '  File "/home/u/app.py", line 11, in <module>',
                 '  File "src/mpi4py/MPI.src/Comm.pyx", line 440, in mpi4py.MPI.Comm.Recv',
                 'mpi4py.MPI.Exception: MPI_ERR_TRUNCATE: message truncated']:
        cs.feed(1, line)
    assert cs.site(1) == "/home/u/app.py:11 in <module>"


def test_library_crashed_names_the_ranks_and_loads_no_diagnosis_when_none_failed() -> None:
    """``attempt.library_crashed``: a job whose ranks all finished ends without importing the
    diagnosis (and numpy, about 40 ms of the launcher's exit); a rank lost to a fatal signal in a
    communicator's creation is named."""
    code = (
        "import sys\n"
        "from planaria.launch.attempt import library_crashed\n"
        "from planaria.launch.crashsite import CrashSites\n"
        "cs = CrashSites()\n"
        "clean = library_crashed({0: {'state': 'finished'}, 1: {'state': 'finished'}}, cs)\n"
        "print(clean, 'numpy' in sys.modules)\n"
        "for line in ['Fatal Python error: Segmentation fault', '',\n"
        "             'Current thread 0x00007fc141e0ac40 (most recent call first):',\n"
        "             '  File \"/x/planaria/comm/ulfm.py\", line 9 in split',\n"
        "             '  File \"/home/u/app.py\", line 3 in <module>', '']:\n"
        "    cs.feed(1, line)\n"
        "table = {0: {'state': 'finished'}, 1: {'state': 'lost', 'reason': 'killed by signal 11 (SIGSEGV)'},\n"
        "         2: {'state': 'lost', 'reason': 'killed by signal 9 (SIGKILL)'}}\n"
        "print(library_crashed(table, cs))\n"
    )
    assert fresh_python(code) == ["[]", "False", "[1]"]
