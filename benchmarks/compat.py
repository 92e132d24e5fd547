"""How much of mpi4py's own test suite passes with ``pl.world()`` in place of ``MPI.COMM_WORLD``.

    python -m benchmarks compat [--modules p2p_obj,cco_obj,...] [--np 2] [--modes raw,ulfm,sim]
                                 [--timeout 120] [--tests DIR] [--json]

For each module of mpi4py's ``test/`` directory (of the installed mpi4py version: its source
distribution is fetched once with ``pip download`` into ``~/.cache/planaria``, or pass ``--tests``),
the world-communicator test classes run three ways, each as one job of ``--np`` ranks:

* ``raw``: plain mpi4py under ``mpiexec --with-ft ulfm`` (the reference);
* ``ulfm``: the same tests on ``pl.world()`` under ``planaria run --backend ulfm``;
* ``sim``: the same under ``planaria run --backend sim``.

A job still running at ``--timeout`` is counted as ``hang``. Rows: passed / run per module and
mode; ``--json`` prints every job's record, with the first failures and their last lines.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import typer

HERE = Path(__file__).resolve().parent
MODULES = ("p2p_obj", "p2p_buf", "cco_obj", "cco_buf", "cco_vec", "cco_nb_buf", "cco_nb_vec", "comm",
           "comm_topo", "request", "status", "ulfm")
MODES = ("raw", "ulfm", "sim")


def tests_dir(explicit: str | None) -> Path:
    """mpi4py's ``test/`` for the installed version: ``explicit``, or its sdist's, fetched once."""
    return Path(explicit) if explicit else sdist_part("test")


def sdist_part(part: str) -> Path:
    """A directory (``test``, ``demo``) of the installed mpi4py version's sdist, fetched once into
    ``~/.cache/planaria/mpi4py-VERSION/PART``."""
    import mpi4py
    version = mpi4py.__version__
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "planaria" / f"mpi4py-{version}"
    if (cache / part).is_dir():
        return cache / part
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"mpi4py=={version}", "--no-binary", ":all:",
                        "--no-deps", "-d", tmp], check=True, timeout=900)
        sdist = next(Path(tmp).glob("mpi4py-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"mpi4py-{version}/{part}/")]
            tar.extractall(tmp, members=members, filter="data")
        cache.mkdir(parents=True, exist_ok=True)
        staged = cache / f"{part}.tmp"
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(Path(tmp) / f"mpi4py-{version}" / part, staged)
        os.replace(staged, cache / part)             # whole or not at all
    return cache / part


def job(mode: str, module: str, tests: Path, np_: int, timeout: float) -> dict:
    """One module in one mode: the rank-0 record, or ``{"hang": True}`` / ``{"error": ...}``."""
    rank = [sys.executable, str(HERE / "compat_rank.py"), str(tests), f"test_{module}"]
    bindir = Path(sys.executable).parent
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if mode == "raw":
        cmd = [str(bindir / "mpiexec"), "--with-ft", "ulfm", "--oversubscribe", "-n", str(np_), *rank, "--raw"]
    else:
        cmd = [sys.executable, "-m", "planaria.cli.main", "run", "-n", str(np_), "--backend", mode,
               "--timeout", str(timeout), "--stdin", "none", "--", *rank]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30, env=env,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"module": module, "mode": mode, "hang": True}
    for line in res.stdout.splitlines():
        if "COMPAT " in line:
            return json.loads(line.split("COMPAT ", 1)[1]) | {"mode": mode, "exit": res.returncode}
    hang = res.returncode == 124
    return {"module": module, "mode": mode, "hang": hang, "exit": res.returncode,
            "error": None if hang else (res.stderr.strip().splitlines() or ["no output"])[-1][:300]}


def cell(rec: dict) -> str:
    if rec.get("hang"):
        return "hang"
    if "passed" not in rec:
        return "error"
    return f"{rec['passed']}/{rec['run']}"


def table(records: list[dict[str, Any]], module_names: list[str], modes: list[str], np_: int) -> Any:
    """The rich table of passed/run per module and mode, with the totals."""
    from rich.table import Table
    t = Table(title=f"mpi4py's tests on pl.world(), {np_} ranks (passed/run)")
    t.add_column("module")
    for mode in modes:
        t.add_column(mode, justify="right")
    for m in module_names:
        t.add_row(m, *[cell(next(r for r in records if r["module"] in (m, f"test_{m}") and r["mode"] == mode))
                       for mode in modes])
    totals = []
    for mode in modes:
        rs = [r for r in records if r["mode"] == mode]
        totals.append(f"{sum(r.get('passed', 0) for r in rs)}/{sum(r.get('run', 0) for r in rs)}")
    t.add_row("all", *totals)
    return t


def command(
    modules: str = typer.Option(",".join(MODULES), "--modules", help="mpi4py test modules, comma-separated, without test_."),
    np_: int = typer.Option(2, "--np", help="Ranks per job."),
    modes: str = typer.Option(",".join(MODES), "--modes", help="Modes, comma-separated: raw, ulfm, sim."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds per job; a job still running then counts as hang."),
    tests: str | None = typer.Option(None, "--tests", help="mpi4py's test/ directory (default: fetched once with pip download)."),
    json_out: bool = typer.Option(False, "--json", help="Print every job's record as JSON."),
) -> None:
    """mpi4py's own test suite on pl.world() (ulfm, sim) against plain mpi4py (raw): passed/run per module.

    Example: python -m benchmarks compat --modules cco_obj,p2p_buf --modes raw,ulfm,sim
    """
    mode_list = [m for m in modes.split(",") if m]
    bad = [m for m in mode_list if m not in MODES]
    if bad or np_ < 1 or not timeout > 0:
        print(f"compat: bad arguments (modes {bad or 'ok'}, --np {np_}, --timeout {timeout})", file=sys.stderr)
        raise typer.Exit(2)
    tdir = tests_dir(tests)
    names = [m for m in modules.split(",") if m]
    records = [job(mode, m, tdir, np_, timeout) for m in names for mode in mode_list]
    if json_out:
        print(json.dumps(records, indent=1))
        return
    from rich.console import Console
    Console().print(table(records, names, mode_list, np_))
