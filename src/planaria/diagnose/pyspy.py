"""Read a Python process's thread stacks from outside with py-spy (when its agent cannot answer).

A rank whose interpreter never releases the GIL (a C extension spinning, a ``ctypes.PyDLL``
call that blocks) cannot run its agent thread, so the collection tree records it as missing.
When that process runs on the launcher's machine, ``py-spy dump`` reads its stacks through
ptrace without its cooperation; the diagnosis then shows where it is stuck and which thread
holds the GIL.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from planaria.util.paths import shown
from planaria.util.procstat import pid_alive, stopped


#: status of a rank of a program without planaria's runtime, read from outside
PLAIN_STATUS = "no planaria runtime (stacks read with py-spy)"
#: a rank of planaria's runtime whose process is stopped (SIGSTOP, a debugger): alive, not running
STOPPED_STATUS = "stopped (SIGSTOP or a debugger; read with py-spy)"
#: file name of the frame standing for the MPI function a native stack is in (``MPI_Recv``)
MPI_FILE = "<MPI>"


def executable() -> str | None:
    """The py-spy executable next to this Python, else on PATH, else None."""
    cand = Path(sys.executable).parent / "py-spy"
    if cand.exists():
        return str(cand)
    return shutil.which("py-spy")


def _frames(raw: list[dict[str, Any]]) -> list[list[Any]]:
    """py-spy's frames (innermost first) as ``[file, line, func]``, outermost first.

    Native frames (those with a ``module``) are dropped, except the outermost MPI function
    (``PMPI_Recv`` or ``MPI_Recv``), kept as ``[MPI_FILE, 0, "MPI_Recv"]`` in place of everything
    inside it: the progress engine's frames change from sample to sample, the call does not."""
    out: list[list[Any]] = []
    for f in reversed(raw):
        name = str(f.get("name") or "?")
        if f.get("module") is None:
            fn = f.get("filename")
            out.append([shown(fn) if isinstance(fn, str) else fn, int(f.get("line") or 0), name])
        elif name.startswith(("PMPI_", "MPI_")):
            out.append([MPI_FILE, 0, name[1:] if name.startswith("PMPI_") else name])
            break
    return out


def dump(pid: int, timeout: float = 5.0, native: bool = False) -> list[dict[str, Any]] | None:
    """Threads of ``pid``: name, ident, stack (frames ``[file, line, func]``, outermost first), owns_gil; None on failure.

    With ``native`` the stack ends in the MPI function the thread is in, if any (see ``_frames``)."""
    exe = executable()
    if exe is None:
        return None
    # a stopped process (SIGSTOP, a debugger) cannot be suspended by py-spy: read it without
    # suspending, which is as consistent since it does not run
    halted = stopped(pid)          # native stacks need the process suspended by py-spy: Python frames only
    extra = (["--native"] if native and not halted else []) + (["--nonblocking"] if halted else [])
    try:
        res = subprocess.run([exe, "dump", "--pid", str(pid), "--json", *extra],
                             capture_output=True, text=True, timeout=timeout)
        data = json.loads(res.stdout) if res.returncode == 0 else None
    except (subprocess.TimeoutExpired, OSError, ValueError):
        return None
    if data is None and _NO_INTERPRETER in res.stderr and pid_alive(pid) is not False:
        return FINALIZING
    if not isinstance(data, list):
        return None
    out = []
    for th in data:
        frames = _frames(th.get("frames") or [])
        out.append({"name": th.get("thread_name") or f"thread-{th.get('thread_id')}", "ident": th.get("thread_id"),
                    "stack": frames, "owns_gil": bool(th.get("owns_gil"))})
    return out


_NO_INTERPRETER = "Failed to find a python interpreter"
#: ``dump``'s answer for a live process without a Python interpreter any more: its program has
#: ended and the process waits at exit (a plain mpi4py program in ``MPI_Finalize``, which waits
#: for the ranks that still run)
FINALIZING: list[dict[str, Any]] = []


def sample(rank: int, pid: int, host: str | None, rounds: int, interval: float,
           status: str | None = None) -> dict[str, Any] | None:
    """A one-rank collection *part* (see ``planaria.diagnose.collect``) read with py-spy, or None.

    ``status`` names the rank's condition; by default it is an unresponsive agent's."""
    rounds = max(rounds, 1)
    per_round: list[list[dict[str, Any]]] = []
    for i in range(rounds):
        if i:
            time.sleep(interval)
        got = dump(pid, native=status == PLAIN_STATUS)
        if got is None:
            return None
        if got is FINALIZING:
            rec: dict[str, Any] = {"rank": rank, "host": host, "pid": pid, "t": time.time(), "op": None, "threads": [],
                   "status": "finished", "finalizing": True, "source": "py-spy"}
            return {"stacks": [], "ranks": [rec], "missing": []}
        per_round.append(got)
    table: dict[tuple, int] = {}
    stacks: list[Any] = []
    threads: dict[Any, dict[str, Any]] = {}
    gil = None
    for got in per_round:
        for th in got:
            key = tuple(tuple(f) for f in th["stack"])
            sid = table.setdefault(key, len(stacks))
            if sid == len(stacks):
                stacks.append(th["stack"])
            ent = threads.setdefault(th["ident"], {"name": th["name"], "ident": th["ident"], "samples": []})
            ent["samples"].append(sid)
            if th["owns_gil"]:
                gil = th["name"]
    recs = []
    for ent in threads.values():
        if len(ent["samples"]) == rounds and not str(ent["name"]).startswith("planaria-"):
            ent["stack"] = ent["samples"][0]
            recs.append(ent)
    if status is None and stopped(pid):
        status = STOPPED_STATUS
    elif status is None:
        status = "unresponsive (read with py-spy)" + (f": thread {gil} holds the GIL" if gil else "")
    rec = {"rank": rank, "host": host, "pid": pid, "t": time.time(), "op": None, "threads": recs,
           "status": status, "source": "py-spy"}
    if stopped(pid):
        rec["stopped"] = True          # alive but not running (SIGSTOP, a debugger)
    return {"stacks": stacks, "ranks": [rec], "missing": []}


def local_pid(pid: Any) -> bool:
    """True when ``pid`` is a live process this machine can inspect."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
