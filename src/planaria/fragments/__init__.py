"""Fragmented programs ([Vlasenko 2022]): code fragments, single-assignment data fragments, an executor over ranks.

Example (``prog.py``, run with ``planaria run -n 4 -- python prog.py``)::

    import planaria.fragments as fr

    @fr.atomic
    def set_(x: fr.Name, v: int):
        x.set(v)

    @fr.sub
    def main():
        x = fr.df("x")
        set_(x, 1)

    fr.run(main)
"""
from __future__ import annotations

import os
import sys
from typing import Any

from planaria.fragments import settings
from planaria.fragments.balancer import BalancerConfig, LoadModel
from planaria.fragments.executor import Executor, RunResult
from planaria.fragments.model import (CFSpec, Code, DFRef, Expr, FragmentError, Name, Out, ProgramError, atomic, df, dfs, sub,
                                      workers)
from planaria.fragments.settings import SettingError
from planaria.fragments.termination import RULES
from planaria.util.env import (
    PLANARIA_BALANCER,
    PLANARIA_FRAGMENT_THREADS,
    PLANARIA_FRAGMENT_TIMEOUT,
    PLANARIA_JOB_DIR,
    PLANARIA_TERMINATION,
    PLANARIA_TRACE,
    PLANARIA_TRACE_DIR,
    PLANARIA_TRACE_FLUSH_BYTES,
)
from planaria.util.paths import shown

__all__ = ["atomic", "sub", "Name", "df", "dfs", "workers", "run", "RunResult", "BalancerConfig", "LoadModel",
           "Executor", "Code", "CFSpec", "DFRef", "Expr", "Out", "FragmentError", "ProgramError", "SettingError", "default_trace_dir"]


def _under_mpi() -> bool:
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", PLANARIA_JOB_DIR))


def default_trace_dir() -> str | None:
    """$PLANARIA_TRACE_DIR, else <job dir>/trace under ``planaria run``, else None (no trace)."""
    if os.environ.get(PLANARIA_TRACE_DIR):
        return os.environ[PLANARIA_TRACE_DIR]
    if os.environ.get(PLANARIA_JOB_DIR):
        return os.path.join(os.environ[PLANARIA_JOB_DIR], "trace")
    return None


def run(main: Code, *args: Any, comm: Any = "auto", threads: int | None = None,
        trace_dir: str | None = None, trace: bool | None = None, flush_bytes: int | None = None,
        balancer: BalancerConfig | bool | None = None, timeout: float | None = None,
        termination: str | None = None, report: bool = True, **kwargs: Any) -> RunResult:
    """Run the structured code fragment ``main`` on every rank of the job (or in this process alone).

    ``comm``: a planaria communicator, None for one process without MPI, "auto" (``pl.world()`` when
    launched by mpiexec/planaria run). ``threads``: CFs run at once per rank. ``balancer``: True or a
    ``BalancerConfig`` dedicates the last rank to the §6 balancer (needs >= 3 ranks). ``timeout``:
    seconds before the run is stopped as "timeout". ``termination``: "safra" (the ring decides after
    one quiet round, workers + 1 token visits) or "paper" (after 2 x workers visits, LuNA's
    threshold). Defaults come from PLANARIA_FRAGMENT_THREADS,
    PLANARIA_TRACE_DIR / PLANARIA_JOB_DIR, PLANARIA_TRACE (0 = off), PLANARIA_TRACE_FLUSH_BYTES,
    PLANARIA_BALANCER (1 = on), PLANARIA_FRAGMENT_TIMEOUT, PLANARIA_TERMINATION; PLANARIA_FRAGMENT_WAKEUPS=poll makes
    idle ranks poll MPI instead of sleeping until rung (``doorbell.py``). A variable with a value it cannot
    use raises ``SettingError`` (a ``ValueError``) naming it. With ``report`` rank 0 prints the
    analyzer's report when the run did not finish cleanly. A DF assigned a second time stops the
    run at every rank, and ``run`` raises ``ProgramError`` naming the DF and both assignments.
    """
    if not isinstance(main, Code) or main.kind != "sub":
        raise FragmentError("run(main): main must be a @sub code fragment")
    if comm == "auto":
        if _under_mpi():
            import planaria as pl
            comm = pl.world()
        else:
            comm = None
    env = os.environ
    threads = threads if threads is not None else settings.number(PLANARIA_FRAGMENT_THREADS, int, 2, minimum=1)
    trace_dir = trace_dir or default_trace_dir()
    if trace is None:
        trace = env.get(PLANARIA_TRACE, "1").strip().lower() not in ("0", "off", "no", "false")
    if flush_bytes is None:
        from planaria.trace.writer import DEFAULT_FLUSH_BYTES
        flush_bytes = settings.number(PLANARIA_TRACE_FLUSH_BYTES, int, DEFAULT_FLUSH_BYTES, minimum=0)
    if balancer is None and env.get(PLANARIA_BALANCER, "0").strip().lower() in ("1", "on", "yes", "true"):
        balancer = True
    if timeout is None and env.get(PLANARIA_FRAGMENT_TIMEOUT, "").strip():
        timeout = settings.number(PLANARIA_FRAGMENT_TIMEOUT, float, 0.0, minimum=0.0)
    termination = termination or settings.choice(PLANARIA_TERMINATION, RULES, "safra")
    ex = Executor(comm, threads=threads, trace_dir=trace_dir, trace=bool(trace), flush_bytes=flush_bytes,
                  balancer=balancer, timeout=timeout, termination=termination)
    caller = sys._getframe(1)
    res = ex.run(main, args, kwargs, site=(shown(caller.f_code.co_filename), caller.f_lineno))
    if res.status == "error":
        # the program's own error (LuNA aborts on it): the trace keeps the details for trace analyze
        raise ProgramError(res.message or "the run was stopped by a program error")
    if report and res.rank == 0 and res.status != "finished":
        print(f"planaria.fragments: run {res.status}: {res.cfs_done} CFs done, {res.unfinished} unfinished, "
              f"{res.errors} errors", file=sys.stderr)
        if res.trace_dir and trace:
            try:
                from planaria.trace.analyze import analyze_dir, render_text
                print(render_text(analyze_dir(res.trace_dir)), file=sys.stderr, end="")
            except FileNotFoundError:
                pass
    return res
