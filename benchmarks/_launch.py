"""Launching one benchmark job with mpiexec and reading back rank 0's JSON result."""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planaria.launch import sessiondirs
from planaria.launch.mpiexec import single_host_transport_args
from planaria.util.env import PLANARIA_HOME, PREFIX

RESULT_PREFIX = "RESULT "


class BenchError(RuntimeError):
    """A benchmark job failed to produce a result."""


@dataclass
class Launch:
    cmd: list[str]
    result: dict[str, Any]
    wall_s: float


def mpiexec_path(python: str | None = None) -> str:
    """The mpiexec next to this Python (the venv's Open MPI), else the one on PATH."""
    bindir = Path(python or sys.executable).parent
    cand = bindir / "mpiexec"
    if cand.exists():
        return str(cand)
    import shutil
    found = shutil.which("mpiexec")
    if not found:
        raise BenchError("mpiexec not found next to this Python nor on PATH")
    return found


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a benchmark job: no planaria controller, injection or agent; root allowed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra or {})
    return env


#: rank binding of a benchmark job (``--bind-to``): none leaves Open MPI's default, which binds
#: nothing once a job oversubscribes the cores; core pins every rank (and its threads) to one
#: core, several ranks per core when they outnumber the cores, as a cluster job pins one per core
BINDINGS = ("none", "core")


def check_bind(bind: str) -> str:
    """``bind`` if it is one of BINDINGS, else ValueError (one line)."""
    if bind not in BINDINGS:
        raise ValueError(f"bind-to must be {' or '.join(BINDINGS)}, not {bind!r}")
    return bind


def mpiexec_prefix(nprocs: int, *, ft: bool, bind: str = "none") -> list[str]:
    """``mpiexec [--with-ft ulfm] --oversubscribe [--mca btl ^ofi] [--bind-to core:overload-allowed] -n N``:
    a benchmark job on this machine; the command follows."""
    cmd = [mpiexec_path()]
    if ft:
        cmd += ["--with-ft", "ulfm"]
    cmd.append("--oversubscribe")
    cmd += single_host_transport_args(os.environ, (), cmd[0])
    if check_bind(bind) == "core":
        cmd += ["--bind-to", "core:overload-allowed"]     # overload: more ranks than cores share them
    return cmd + ["-n", str(nprocs)]


def mpiexec_cmd(nprocs: int, module: str, args: list[str], *, ft: bool, bind: str = "none") -> list[str]:
    """``mpiexec_prefix(...) python -m MODULE --rank ARGS``."""
    return mpiexec_prefix(nprocs, ft=ft, bind=bind) + [sys.executable, "-m", module, "--rank", *args]


def planaria_run_cmd(nprocs: int, module: str, args: list[str], *, ft: bool, timeout: float,
                     bind: str = "none", spares: int = 0) -> list[str]:
    """``planaria run -n N --backend ulfm|sim -- python -m MODULE --rank ARGS``: the job as users run it,
    with the controller and every rank's agent (and its knocks, heartbeats and reports). ``spares``
    of the ``nprocs`` processes are started as ``planaria run --spares``."""
    cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(nprocs - spares), "--backend",
           "ulfm" if ft else "sim", "--timeout", repr(float(timeout))]
    if spares:
        cmd += ["--spares", str(spares)]
    if check_bind(bind) == "core":
        cmd += ["--mpiexec-arg=--bind-to", "--mpiexec-arg=core:overload-allowed"]
    return cmd + ["--", sys.executable, "-m", module, "--rank", *args]


#: seconds a timed-out job's Python processes get to print their stacks before everything is killed
STACKS_S = 3.0


def run_bounded(cmd: list[str], env: dict[str, str] | None, timeout: float, what: str) -> tuple[int, str, str]:
    """Run a job in its own session to its end: (exit status, stdout, stderr). After ``timeout``
    its Python ranks print every thread's stack (``_stacks_then_kill``), the job is killed and
    BenchError names ``what`` with the end of its stderr, stacks included."""
    sessiondirs.remove_stale()     # a killed mpiexec's directory fails the next mpiexec with its pid
    run_env = job_env(env)
    run_env.setdefault("PYTHONFAULTHANDLER", "1")      # a SIGABRT then prints the process's stacks
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=run_env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stderr = _stacks_then_kill(proc)
        raise BenchError(f"{what} timed out after {timeout:.0f} s: {' '.join(cmd)}\n{stderr[-12000:]}") from None
    return proc.returncode, stdout, stderr


def _stacks_then_kill(proc: subprocess.Popen[str]) -> str:
    """End a job that has run out of time; its stderr. The job's Python processes below its first
    process (the ranks) first get SIGABRT, on which Python's fault handler prints every thread's
    stack and the process ends; mpiexec (or ``planaria run``, whose own stack is left out so that
    it still relays theirs) carries them here. Then SIGKILL to the job's process group and to
    whatever of the job is left (a launcher's mpiexec may run in a session of its own)."""
    from planaria.util import procstat

    family = procstat.descendants(proc.pid)
    for pid, _ in family:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                python = b"python" in fh.read().split(b"\0", 1)[0]
            if python:
                os.kill(pid, signal.SIGABRT)
        except OSError:
            pass
    try:
        _, stderr = proc.communicate(timeout=STACKS_S)
    except subprocess.TimeoutExpired:
        stderr = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for pid, ticks in family:
        if procstat.running(pid, ticks):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if stderr is None:
        _, stderr = proc.communicate()
    return stderr


def launch(nprocs: int, module: str, args: list[str], *, ft: bool, timeout: float,
           env: dict[str, str] | None = None, bind: str = "none", under_run: bool = False,
           spares: int = 0) -> Launch:
    """Run one job; rank 0 writes its JSON result to the file given by ``--out`` (and prints it as ``RESULT``).

    ``under_run``: through ``planaria run`` (job directory in the temporary directory) instead of a
    bare ``mpiexec``."""
    with tempfile.TemporaryDirectory(prefix="planaria-bench-") as tmp:
        out = Path(tmp) / "result.json"
        rargs = [*args, "--out", str(out), "--scratch", tmp]
        if under_run:
            cmd = planaria_run_cmd(nprocs, module, rargs, ft=ft, timeout=timeout * 0.95, bind=bind, spares=spares)
            env = {**(env or {}), PLANARIA_HOME: str(Path(tmp) / "home")}
        else:
            cmd = mpiexec_cmd(nprocs, module, rargs, ft=ft, bind=bind)
        t0 = time.perf_counter()
        code, stdout, stderr = run_bounded(cmd, env, timeout, "benchmark job")
        wall = time.perf_counter() - t0
        result = None
        if out.exists() and out.stat().st_size:
            result = json.loads(out.read_text())
        else:
            for line in stdout.splitlines():
                if line.startswith(RESULT_PREFIX):
                    result = json.loads(line[len(RESULT_PREFIX):])
        if result is None:
            raise BenchError(f"benchmark job gave no result (exit {code}): {' '.join(cmd)}\n"
                             f"--- stdout\n{stdout[-2000:]}\n--- stderr\n{stderr[-3000:]}")
        return Launch(cmd=cmd, result=result, wall_s=wall)


def emit(result: dict[str, Any], out: str | None) -> None:
    """Rank 0: write the result file (atomically) and print one ``RESULT`` line."""
    text = json.dumps(result)
    if out:
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, out)
    print(RESULT_PREFIX + text, flush=True)


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def parse_counts(spec: str, what: str = "rank", example: str = "4,8,16", minimum: int = 2) -> list[int]:
    """``"4,8,16"`` -> [4, 8, 16]; ValueError (one line) unless every entry is an integer >= ``minimum``."""
    try:
        counts = [int(x) for x in spec.replace(" ", "").split(",") if x]
    except ValueError:
        raise ValueError(f"bad {what} list {spec!r} (expected e.g. {example})") from None
    if not counts or any(n < minimum for n in counts):
        raise ValueError(f"bad {what} list {spec!r}: every entry must be >= {minimum}")
    return counts


def parse_ranks(spec: str) -> list[int]:
    """``"4,8,16"`` -> [4, 8, 16]."""
    return parse_counts(spec)


def command_line() -> str:
    """How this driver was started (recorded with the results)."""
    import shlex
    return " ".join(shlex.quote(a) for a in sys.argv)


def loadavg() -> list[float]:
    """The 1/5/15-minute load averages (other work on the machine skews every figure)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return [float("nan")] * 3


def show(result: dict[str, Any], as_json: bool, make_table: Any, min_width: int = 0) -> None:
    """Print a benchmark result: JSON for scripts, else the rich table ``make_table(result)`` builds."""
    if as_json:
        print(json.dumps(result, indent=2))
        return
    from rich.console import Console
    console = Console()
    if min_width > console.width:
        console = Console(width=min_width)
    console.print(make_table(result))


def progress_printer(as_json: bool) -> Any:
    """Progress lines on stderr, or None when stdout is reserved for JSON."""
    if as_json:
        return None
    return lambda msg: print(msg, file=sys.stderr, flush=True)


def rank_parser(prog: str, timeout: float | None = None) -> argparse.ArgumentParser:
    """The argument parser of a benchmark's rank program (``python -m benchmarks.NAME --rank ...``): the
    driver passes ``--out`` (rank 0's result file) and ``--scratch`` (a directory of the job), and
    ``--timeout`` when ``timeout`` is given; the module adds the arguments its driver passes."""
    p = argparse.ArgumentParser(prog=prog, description="rank program of a benchmark (started by its driver)")
    p.add_argument("--rank", action="store_true", help="run as one rank of the job")
    p.add_argument("--out", default=None, help="rank 0's result file")
    p.add_argument("--scratch", default=".", help="directory for the job's files")
    if timeout is not None:
        p.add_argument("--timeout", type=float, default=timeout, help="seconds allowed for the job")
    return p


def run_and_show(name: str, compute: Any, show_result: Any, as_json: bool) -> int:
    """Run a benchmark and print its result; exit status 2 for bad options, 1 for a failed job, else 0."""
    try:
        result = compute()
    except ValueError as e:
        print(f"python -m benchmarks {name}: {e}", file=sys.stderr)
        return 2
    except BenchError as e:
        print(f"python -m benchmarks {name}: {e}", file=sys.stderr)
        return 1
    show_result(result, as_json)
    return 0
