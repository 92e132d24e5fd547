"""Run real MPI jobs from tests: Open MPI (this venv) or MPICH (a separate venv), always under a hard timeout."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from planaria.launch.mpiexec import single_host_transport_args

SCRIPTS = Path(__file__).parent / "scripts"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def lines(self, prefix: str) -> list[str]:
        return [ln for ln in self.out.splitlines() if ln.startswith(prefix)]

    def ok_ranks(self, case: str) -> list[int]:
        """Ranks that printed ``OK <case> <rank>`` (ranks' output may interleave within a line)."""
        import re
        return sorted(int(m) for m in re.findall(rf"OK {re.escape(case)} (\d+)", self.out))


def root_env() -> dict[str, str]:
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for k in [k for k in env if k.startswith("PLANARIA_")]:
        del env[k]
    return env


def mpiexec(n: int, argv: list[str], *, python: str | None = None, ft: bool = False,
            env: dict[str, str] | None = None, timeout: float = 90) -> Result:
    """Start ``mpiexec -n n python argv...`` next to ``python``; kill the whole process group on timeout."""
    python = python or sys.executable
    bindir = Path(python).parent
    cmd = [str(bindir / "mpiexec")]
    is_mpich = (bindir / "mpichversion").exists()
    full_env = root_env()
    full_env.update(env or {})
    if not is_mpich:
        cmd += ["--oversubscribe"] + (["--with-ft", "ulfm"] if ft else [])
        cmd += single_host_transport_args(full_env, (), cmd[0])    # as planaria run adds them
    cmd += ["-n", str(n), python, *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full_env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"MPI job timed out after {timeout}s: {' '.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{err[-4000:]}") from None
    return Result(proc.returncode, out, err)


def library_crash_in(root: Path) -> str | None:
    """Why a job under ``root`` (a ``PLANARIA_HOME``, or a directory holding one) ended by Open
    MPI 5.0.11's known crash, or None: a rank died of a crash signal inside a call that creates a
    communicator (docs/recovery.md, "A limit of the MPI library"), as ``planaria campaign``
    classes it: neither planaria's result nor its bug."""
    import json

    from planaria.diagnose.postmortem import library_crash
    root = Path(root)
    for summary in sorted([*root.glob("jobs/*/summary.json"), *root.glob("*/jobs/*/summary.json")]):
        try:
            rows = json.loads(summary.read_text()).get("ranks") or []
        except (OSError, ValueError, AttributeError):
            continue
        for row in rows:
            if isinstance(row, dict) and library_crash(str(row.get("how")), row.get("in_call")):
                return (f"rank {row.get('rank')} died inside {row['in_call']} ({row['how']}): Open MPI's known "
                        f"crash (job {summary.parent.name})")
    return None


def run_demo(home: Path, *args: str, timeout: float = 150) -> tuple[subprocess.CompletedProcess, dict]:
    """``planaria demo --json`` on a small rod with its jobs under ``home``; (process, parsed report or {})."""
    import json
    env = root_env()
    env["PLANARIA_HOME"] = str(home)
    cmd = [sys.executable, "-m", "planaria.cli.main", "demo", "--json", "--cells-per-rank", "5000",
           "--steps", "160", "--every", "20", "--timeout", "120", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    report = json.loads(res.stdout[res.stdout.index("{"):]) if "{" in res.stdout else {}
    return res, report


def two_test_hosts(tmp_path: Path, prefix: str, subnet: str):  # type: ignore[no-untyped-def]
    """Generator for a fixture: two network-namespace hosts (skips where they cannot be made); yields (hosts, state root)."""
    import pytest

    from planaria.launch import netns
    ok, reason = netns.available()
    if not ok:
        pytest.skip(f"network namespaces unavailable: {reason}")
    if not (Path(sys.executable).parent / "mpiexec").exists():
        pytest.skip(f"no mpiexec next to {sys.executable}")
    netns.remove_orphaned(prefix)
    names = (f"{prefix}{os.getpid()}-h1", f"{prefix}{os.getpid()}-h2")
    state_root = tmp_path / "hosts"
    hs = netns.create_hosts(names, subnet, workdir=state_root / names[0], replace=True)
    try:
        yield hs, state_root
    finally:
        hs.destroy()


def invoke_bench(verb: str, args: list[str]) -> tuple[int, str]:
    """``python -m benchmarks VERB ARGS`` in this process through the CLI app: (exit code, stdout + stderr)."""
    from typer.testing import CliRunner

    from benchmarks.cli import app
    res = CliRunner().invoke(app, [verb, *args])
    return res.exit_code, res.stdout + (res.stderr if res.stderr_bytes is not None else "")
