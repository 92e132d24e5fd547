"""How much of mpi4py's own test suite passes with ``pl.world()`` in place of ``MPI.COMM_WORLD``.

    python benchmarks/compat.py [--modules p2p_obj,cco_obj,...] [--np 2] [--modes raw,ulfm,sim]
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

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modules", default=",".join(MODULES), help="comma-separated, without test_")
    ap.add_argument("--np", type=int, default=2, help="ranks per job")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: raw, ulfm, sim")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per job")
    ap.add_argument("--tests", default=None, help="mpi4py's test/ directory (default: fetched)")
    ap.add_argument("--json", action="store_true", help="print every job's record as JSON")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or args.np < 1 or not args.timeout > 0:
        print(f"compat: bad arguments (modes {bad or 'ok'}, --np {args.np}, --timeout {args.timeout})", file=sys.stderr)
        return 2
    tests = tests_dir(args.tests)
    records = [job(mode, m, tests, args.np, args.timeout) for m in args.modules.split(",") if m for mode in modes]
    if args.json:
        print(json.dumps(records, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"mpi4py's tests on pl.world(), {args.np} ranks (passed/run)")
    t.add_column("module")
    for mode in modes:
        t.add_column(mode, justify="right")
    for m in [x for x in args.modules.split(",") if x]:
        t.add_row(m, *[cell(next(r for r in records if r["module"] in (m, f"test_{m}") and r["mode"] == mode))
                       for mode in modes])
    totals = []
    for mode in modes:
        rs = [r for r in records if r["mode"] == mode]
        totals.append(f"{sum(r.get('passed', 0) for r in rs)}/{sum(r.get('run', 0) for r in rs)}")
    t.add_row("all", *totals)
    Console().print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
