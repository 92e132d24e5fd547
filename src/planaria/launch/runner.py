"""``planaria run``: job directory, controller, mpiexec, output streaming, teardown, summary."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from planaria.launch.controller import Controller
from planaria.launch.jobdir import JobDir, _jsonable
from planaria.launch.mpiexec import (
    BACKENDS,
    LaunchError,
    allocation_hosts,
    build_mpiexec_cmd,
    resolve_backend,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
KILL_GRACE = 3.0

_TAG = re.compile(r"^\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>: ?(.*)$", re.DOTALL)


@dataclass
class RunOptions:
    """Options of one ``planaria run``."""

    command: list[str]
    nprocs: int
    spares: int = 0
    backend: str = "auto"
    inject: list[str] = field(default_factory=list)
    timeout: float | None = 3600.0
    hosts: str | None = None
    json: bool = False
    emit_summary: bool = True   # with json: print the summary (a caller embedding it in its own JSON says False)
    mpiexec_args: list[str] = field(default_factory=list)
    launch_prefix: list[str] = field(default_factory=list)
    ssh_agent: str | None = None
    control: str | None = None
    job_root: str | None = None


def _err(msg: str) -> None:
    print(f"planaria run: {msg}", file=sys.stderr, flush=True)


def tag_line(line: str) -> tuple[int | None, str, str]:
    """Split an Open MPI ``--output tag`` line into (rank, stream, text); rank None if untagged."""
    m = _TAG.match(line)
    if not m:
        return None, "", line
    return int(m.group(2)), m.group(3), m.group(4)


class _Output:
    """Streams mpiexec's output to our terminal, re-tagged, and mirrors it to output.log."""

    def __init__(self, jobdir: JobDir, json_mode: bool) -> None:
        self._log = open(jobdir.output_path, "a", encoding="utf-8", errors="replace")
        self._lock = threading.Lock()
        self._json = json_mode

    def pump(self, stream: Any, is_err: bool) -> None:
        """Copy every line of ``stream`` (until EOF)."""
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            rank, kind, text = tag_line(line)
            if rank is None:
                shown, dest = line, sys.stderr if (is_err or self._json) else sys.stdout
            elif kind == "stdout":
                shown, dest = f"[{rank}] {text}", sys.stderr if self._json else sys.stdout
            else:
                shown, dest = f"[{rank}!] {text}", sys.stderr
            self.write(shown, dest)
        stream.close()

    def write(self, line: str, dest: TextIO | None) -> None:
        """Print ``line`` to ``dest`` (if any) and append it to output.log."""
        with self._lock:
            if dest is not None:
                try:
                    dest.write(line + "\n")
                    dest.flush()
                except (OSError, ValueError):
                    pass
            self._log.write(line + "\n")
            self._log.flush()

    def close(self) -> None:
        """Close output.log."""
        with self._lock:
            self._log.close()


def _parse_plan(opts: RunOptions, total: int) -> str:
    """Validate ``--inject`` specs; return the plan's spec string ('' when none)."""
    if not opts.inject:
        return ""
    from planaria.inject.plan import Plan  # imported lazily: optional at launch time

    plan = Plan.parse(list(opts.inject))
    plan.validate(total)
    return str(plan.to_spec())


def _python_fix(command: list[str]) -> list[str]:
    """Run a bare ``python``/``python3`` command with this interpreter (the one planaria runs in)."""
    if command and command[0] in ("python", "python3"):
        return [sys.executable] + command[1:]
    return command


def _kill_all(proc: subprocess.Popen[bytes], controller: Controller) -> None:
    """SIGTERM the mpiexec process group, SIGKILL it after a grace period, SIGKILL known ranks."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(wait)
            if sig == signal.SIGTERM:
                # the group leader left; make sure nothing of the group stays behind
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            break
        except subprocess.TimeoutExpired:
            continue
    for pid in controller.pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def exit_status(table: dict[int, dict[str, Any]], mpiexec_rc: int | None) -> int:
    """Job exit status from the rank table (or from mpiexec's status when no rank reported)."""
    if not table:
        if mpiexec_rc is None:
            return EXIT_FAILED
        return 128 - mpiexec_rc if mpiexec_rc < 0 else mpiexec_rc
    finished = [r for r in sorted(table) if table[r]["state"] == "finished"]
    if not finished:
        return EXIT_FAILED
    for r in finished:
        code = table[r].get("exit_code")
        if isinstance(code, int) and code != 0:
            return code
    return EXIT_OK


def _how(info: dict[str, Any]) -> str:
    if info["state"] == "finished":
        code = info.get("exit_code")
        return info.get("reason") or f"exit {code}"
    return str(info.get("reason") or "")


def build_summary(jobdir: JobDir, opts: RunOptions, table: dict[int, dict[str, Any]], t0: float,
                  status: int, outcome: str, mpiexec_rc: int | None) -> dict[str, Any]:
    """The summary.json content."""
    ranks = []
    for r in sorted(table):
        info = table[r]
        when = info.get("fail_time") or info.get("end_time")
        ranks.append({
            "rank": r, "host": info.get("host"), "pid": info.get("pid"), "role": info.get("role"),
            "state": info["state"], "step": info.get("step"), "exit_code": info.get("exit_code"),
            "t": round(when - t0, 3) if when else None, "how": _how(info),
            "injected": info.get("injected"),
        })
    return {
        "job": jobdir.id, "jobdir": str(jobdir.path), "status": status, "outcome": outcome,
        "mpiexec_rc": mpiexec_rc, "nranks": opts.nprocs, "spares": opts.spares,
        "elapsed": round(time.time() - t0, 3), "ranks": ranks,
    }


def print_summary(summary: dict[str, Any]) -> None:
    """One-screen rich table of ranks on stderr."""
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True, highlight=False)
    bad = sum(1 for r in summary["ranks"] if r["state"] in ("failed", "lost"))
    console.print(f"planaria job {summary['job']}: {summary['outcome']}, exit {summary['status']}, "
                  f"{bad} rank(s) failed or lost")
    table = Table()
    for col in ("rank", "host", "state", "t+s", "how"):
        table.add_column(col, justify="right" if col in ("rank", "t+s") else "left")
    rows = summary["ranks"]
    shown = [r for r in rows if r["state"] != "finished" or r.get("exit_code") not in (0, None)]
    others = len(rows) - len(shown)
    for r in shown[:40]:
        style = {"failed": "red", "lost": "red", "finished": "yellow"}.get(r["state"], "")
        table.add_row(str(r["rank"]), str(r["host"] or "?"), r["state"],
                      "" if r["t"] is None else f"{r['t']:.2f}", r["how"] or "", style=style)
    console.print(table)
    if len(shown) > 40:
        console.print(f"... {len(shown) - 40} more not shown")
    if others:
        console.print(f"{others} other rank(s) finished normally")
    console.print(f"job directory: {summary['jobdir']}")


def run_job(opts: RunOptions) -> int:
    """Run one job under the controller; return the exit status."""
    # ---- checks before anything is created or launched
    if opts.nprocs < 1:
        _err(f"-n must be at least 1 (got {opts.nprocs})")
        return EXIT_USAGE
    if opts.spares < 0:
        _err(f"--spares must be >= 0 (got {opts.spares})")
        return EXIT_USAGE
    if opts.timeout is not None and opts.timeout <= 0:
        _err(f"--timeout must be positive (got {opts.timeout})")
        return EXIT_USAGE
    if not opts.command:
        _err("no command given (usage: planaria run -n N -- python script.py)")
        return EXIT_USAGE
    if opts.backend not in BACKENDS:
        _err(f"unknown backend {opts.backend!r} (choose ulfm, sim or auto)")
        return EXIT_USAGE
    backend = resolve_backend(opts.backend)
    total = opts.nprocs + opts.spares
    try:
        spec = _parse_plan(opts, total)
    except ImportError as exc:
        _err(f"fault injection is unavailable: {exc}")
        return EXIT_USAGE
    except ValueError as exc:  # PlanError is a ValueError
        _err(str(exc))
        return EXIT_USAGE
    command = _python_fix(list(opts.command))
    try:  # catch command-line errors (hosts, mpiexec missing) before creating the job
        build_mpiexec_cmd(command, total, backend=backend, hosts=opts.hosts,
                          mpiexec_args=opts.mpiexec_args)
        local = not opts.hosts and allocation_hosts(os.environ, use_scontrol=False) is None
    except LaunchError as exc:
        _err(str(exc))
        return EXIT_USAGE
    if local and not opts.launch_prefix and shutil.which(command[0]) is None:
        _err(f"command not found: {command[0]}")
        return EXIT_USAGE

    # ---- job directory and controller
    t0 = time.time()
    try:
        jobdir = JobDir.create(opts.job_root)
    except OSError as exc:
        _err(f"cannot create the job directory: {exc}")
        return EXIT_USAGE
    controller = Controller(jobdir, opts.control, t0=t0)
    try:
        uri = controller.start()
    except RuntimeError as exc:
        _err(str(exc))
        return EXIT_USAGE
    penv = {
        "PLANARIA_JOB_DIR": str(jobdir.path),
        "PLANARIA_CONTROL_URI": uri,
        "PLANARIA_SECRET_FILE": str(jobdir.secret_path),
        "PLANARIA_BACKEND": backend,
        "PLANARIA_INJECT": spec,
        "PLANARIA_SPARES": str(opts.spares),
        "PLANARIA_NRANKS": str(opts.nprocs),
        "PLANARIA_T0": repr(t0),
    }
    argv, env = build_mpiexec_cmd(command, total, backend=backend, hosts=opts.hosts,
                                  planaria_env=penv, mpiexec_args=opts.mpiexec_args,
                                  launch_prefix=opts.launch_prefix, ssh_agent=opts.ssh_agent)
    manifest: dict[str, Any] = {
        "job": jobdir.id, "status": "starting", "t0": t0, "command": command, "argv": argv,
        "nranks": opts.nprocs, "spares": opts.spares, "backend": backend, "inject": spec,
        "timeout": opts.timeout, "hosts": opts.hosts, "control_uri": uri, "cwd": os.getcwd(),
        "launcher_pid": os.getpid(),
        "env": {k: v for k, v in penv.items() if k != "PLANARIA_SECRET_FILE"},
    }
    jobdir.write_manifest(manifest)

    out = _Output(jobdir, opts.json)
    interrupted = threading.Event()
    old_handler = None
    if threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    outcome = "finished"
    mpiexec_rc: int | None = None
    try:
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            _err(f"cannot start {argv[0]}: {exc}")
            controller.stop()
            out.close()
            jobdir.update_manifest(status="launch-error", error=str(exc))
            return EXIT_USAGE
        jobdir.update_manifest(status="running", mpiexec_pid=proc.pid)
        pumps = [threading.Thread(target=out.pump, args=(proc.stdout, False), daemon=True),
                 threading.Thread(target=out.pump, args=(proc.stderr, True), daemon=True)]
        for th in pumps:
            th.start()
        deadline = None if opts.timeout is None else t0 + opts.timeout
        while True:
            try:
                mpiexec_rc = proc.wait(0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            if interrupted.is_set():
                outcome = "interrupted"
                break
            if deadline is not None and time.time() > deadline:
                outcome = "timeout"
                break
        if outcome != "finished":
            why = ("interrupted (Ctrl-C)" if outcome == "interrupted"
                   else f"timeout after {opts.timeout:g} s")
            _err(f"{why}: stopping the job")
            _kill_all(proc, controller)
            mpiexec_rc = proc.poll()
        for th in pumps:
            th.join(5.0)
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)

    controller.sweep(final=True, final_ok=(outcome == "finished" and mpiexec_rc == 0))
    table = controller.table()
    controller.stop()
    out.close()

    if outcome == "timeout":
        status = EXIT_TIMEOUT
    elif outcome == "interrupted":
        status = EXIT_INTERRUPTED
    else:
        status = exit_status(table, mpiexec_rc)
        if status != EXIT_OK:
            outcome = "failed"
    summary = build_summary(jobdir, opts, table, t0, status, outcome, mpiexec_rc)
    jobdir.write_summary(summary)
    jobdir.update_manifest(status=outcome, exit_status=status, mpiexec_rc=mpiexec_rc,
                           end=time.time())
    abnormal = status != EXIT_OK or any(
        r["state"] != "finished" or r.get("exit_code") not in (0, None) for r in summary["ranks"])
    if abnormal:
        if summary["ranks"]:
            print_summary(summary)
        else:
            _err(f"job {jobdir.id} {outcome} (exit {status}); job directory: {jobdir.path}")
    if opts.json and opts.emit_summary:
        print(json.dumps(_jsonable(summary), indent=2, sort_keys=True), flush=True)
    return status
