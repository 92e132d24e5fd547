"""Cost of ``planaria.Comm`` against the raw mpi4py communicator underneath it (``comm.mpi``).

One job per (backend, rank count). Inside it, blocks of K operations alternate between the raw
call and the planaria call (the order flips every block; a barrier separates blocks), each block
timed with ``time.perf_counter_ns`` on rank 0:

- ``Allreduce`` of one float64 (8 bytes) over all ranks: ``comm.mpi.Allreduce(a, b)`` vs ``comm.Allreduce(a, b)``;
- ``Sendrecv`` of 1 MiB between ranks 0 and 1 (other ranks idle):
  ``comm.mpi.Sendrecv(s, peer, 7, r, peer, 7)`` vs ``comm.Sendrecv(s, peer, 7, r, peer, 7)``;
- ping-pong of 8 bytes between ranks 0 and 1 (OSU latency's pattern; other ranks idle): rank 0
  ``Send`` then ``Recv``, rank 1 ``Recv`` then ``Send``; one operation is one round trip;
- mpi4py's six object collectives on a small value (a float, a 21-byte pickle; scatter and
  alltoall a list of one per rank): ``allreduce_obj``, ``bcast_obj``... (``OBJECT_CALLS``; no goal);
- the rest of mpi4py's calls at 1 MiB (``MIB_CALLS``; each rank sends 1 MiB: a collective's
  per-rank contribution, a message, a Cartesian ring's neighbour exchange), the same call on
  ``comm`` and on ``comm.mpi`` (a Cartesian communicator made from each). They cover every kind
  of method planaria has: its own (``Bcast``...), mpi4py's C method behind a generated wrapper
  (``Scan``...), a counting wrapper (``Ssend``), requests (``Iallreduce``, ``Isend``), object
  forms (``bcast``) and a topology communicator's (``Neighbor_alltoall``).

Reported per case: the median over blocks of the per-operation time of each, their ratio
(planaria / raw), and the median of the per-block-pair ratios. Goals (ulfm backend):
ratio <= 1.2 for the 8-byte Allreduce, <= 1.02 for the 1 MiB Sendrecv, <= 1.15 for the 8-byte
ping-pong, <= 1.05 for every other call at 1 MiB.

With ``detect`` the jobs run with run-time error detection on (``PLANARIA_DETECT=1``: monitored
communicators and the probe service thread), as under ``planaria run``; the difference to a run
without it is what detection adds to each call (the goals above are for the plain communicator).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import typer

from benchmarks import _launch
from benchmarks._launch import command_line, emit, launch, loadavg, median
from planaria.util.env import PLANARIA_DETECT

MODULE = "benchmarks.overhead"
MIB = 1 << 20
#: the further calls, each at 1 MiB per rank (``_mib_calls`` makes them)
MIB_CALLS = ("Bcast", "Reduce", "Allreduce", "Gather", "Scatter", "Allgather", "Alltoall", "Scan",
             "Exscan", "Reduce_scatter_block", "Iallreduce", "Ibcast", "Isend_Irecv", "Ssend_Recv",
             "Sendrecv_replace", "bcast", "Neighbor_alltoall")
#: the object forms timed on a small value (a float; a list of one per rank for scatter and alltoall)
OBJECT_CALLS = ("allreduce", "bcast", "allgather", "gather", "scatter", "alltoall")
GOALS = {"allreduce_8B": 1.2, "sendrecv_1MiB": 1.02, "pingpong_8B": 1.15,
         **{f"{c}_1MiB": 1.05 for c in MIB_CALLS}}


# --------------------------------------------------------------------------- inside the ranks
def rank_main(args: argparse.Namespace) -> None:
    import planaria as pl

    comm = pl.world(args.backend)
    raw = comm.mpi
    cases = _basic_cases(comm, args.iters, args.sr_iters)
    wanted = [c for c in args.calls.split(",") if c] if args.calls else list(MIB_CALLS)
    bufs = _buffers(comm.size)      # one set for both sides: a buffer's placement in memory is no difference
    raw_calls, pl_calls = _mib_calls(raw, wanted, bufs), _mib_calls(comm, wanted, bufs)
    for c in wanted:
        cases[f"{c}_1MiB"] = (raw_calls[c], pl_calls[c], args.sr_iters)
    if args.only:
        keep = set(args.only.split(","))
        cases = {k: v for k, v in cases.items() if k in keep}
    out: dict[str, Any] = {}
    for name, (f_raw, f_pl, k) in cases.items():
        t_raw, t_pl = _time_case(raw, f_raw, f_pl, k, args.blocks)
        if comm.rank == 0:
            out[name] = _case_figures(t_raw, t_pl, k, args.blocks)
    if comm.rank == 0:
        emit({"ranks": comm.size, "backend": args.backend, "cases": out}, args.out)


def _basic_cases(comm: Any, iters: int, sr_iters: int) -> dict[str, tuple[Any, Any, int]]:
    """``name -> (raw run(k), planaria run(k), k)`` of the 8-byte Allreduce, the 1 MiB Sendrecv and the ping-pong."""
    import numpy as np

    raw = comm.mpi
    rank = comm.rank
    peer = 1 - rank if rank < 2 else None
    a, b = np.ones(1), np.zeros(1)
    s, r = np.ones(MIB // 8), np.zeros(MIB // 8)

    def ar_raw(k: int) -> None:
        for _ in range(k):
            raw.Allreduce(a, b)

    def ar_pl(k: int) -> None:
        for _ in range(k):
            comm.Allreduce(a, b)

    def sr_raw(k: int) -> None:
        if peer is None:
            return
        for _ in range(k):
            raw.Sendrecv(s, peer, 7, r, peer, 7)

    def sr_pl(k: int) -> None:
        if peer is None:
            return
        for _ in range(k):
            comm.Sendrecv(s, peer, 7, r, peer, 7)

    p8, q8 = np.ones(1), np.zeros(1)

    def pingpong(c: Any) -> Any:
        def run(k: int) -> None:
            if rank == 0:
                for _ in range(k):
                    c.Send(p8, 1, 9)
                    c.Recv(q8, 1, 9)
            elif rank == 1:
                for _ in range(k):
                    c.Recv(q8, 0, 9)
                    c.Send(p8, 0, 9)
        return run

    def obj(c: Any, name: str) -> Any:
        call = getattr(c, name)
        arg: Any = [1.5] * c.Get_size() if name in ("scatter", "alltoall") else 1.5

        def run(k: int) -> None:
            for _ in range(k):
                call(arg)
        return run

    return {
        "allreduce_8B": (ar_raw, ar_pl, iters),
        "sendrecv_1MiB": (sr_raw, sr_pl, sr_iters),
        "pingpong_8B": (pingpong(raw), pingpong(comm), iters),
        **{f"{name}_obj": (obj(raw, name), obj(comm, name), iters) for name in OBJECT_CALLS},
    }


def _time_case(raw: Any, f_raw: Any, f_pl: Any, k: int, blocks: int) -> tuple[list[float], list[float]]:
    """Warm-up blocks, then ``blocks`` timed blocks of each side (order flipping every block): ns per operation."""
    from time import perf_counter_ns

    for _ in range(max(2, blocks // 20)):          # warm-up blocks, not recorded
        raw.Barrier()
        f_raw(k)
        raw.Barrier()
        f_pl(k)
    t_raw: list[float] = []
    t_pl: list[float] = []
    for blk in range(blocks):
        order = ((f_raw, t_raw), (f_pl, t_pl)) if blk % 2 == 0 else ((f_pl, t_pl), (f_raw, t_raw))
        for f, acc in order:
            raw.Barrier()
            t0 = perf_counter_ns()
            f(k)
            acc.append((perf_counter_ns() - t0) / k)
    return t_raw, t_pl


def _case_figures(t_raw: list[float], t_pl: list[float], k: int, blocks: int) -> dict[str, Any]:
    """One case's reported figures from its per-block times."""
    import numpy as np

    m_raw, m_pl = median(t_raw), median(t_pl)
    return {
        "ops_per_block": k, "blocks": blocks,
        "raw_ns_median": m_raw, "planaria_ns_median": m_pl,
        "overhead_ns": m_pl - m_raw, "ratio": m_pl / m_raw,
        "paired_ratio_median": median([p / q for p, q in zip(t_pl, t_raw, strict=False)]),
        "raw_ns_p10": float(np.percentile(t_raw, 10)), "raw_ns_p90": float(np.percentile(t_raw, 90)),
        "planaria_ns_p10": float(np.percentile(t_pl, 10)), "planaria_ns_p90": float(np.percentile(t_pl, 90)),
    }


def _buffers(n: int) -> dict[str, Any]:
    """The 1 MiB calls' buffers for ``n`` ranks (shared by the raw and the planaria calls)."""
    import numpy as np
    m = MIB // 8
    return {"s": np.ones(m), "r": np.zeros(m), "big": np.zeros(m * n), "part": np.zeros(m // n),
            "ring": np.zeros(m),            # two neighbours in a periodic ring: two blocks of 512 KiB
            "obj": bytes(MIB)}


def _mib_calls(c: Any, names: list[str], bufs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``name -> run(k)``: k calls of mpi4py's ``name`` on communicator ``c``, 1 MiB sent per rank."""
    from mpi4py import MPI

    n, rank = c.Get_size(), c.Get_rank()
    peer = 1 - rank if rank < 2 else None
    b = bufs or _buffers(n)
    s, r, big, part, ring, obj = b["s"], b["r"], b["big"], b["part"], b["ring"], b["obj"]
    cart = c.Create_cart([n], periods=[True]) if "Neighbor_alltoall" in names else None

    def p2p(step: Any) -> Any:
        def run(k: int) -> None:
            if peer is not None:
                for _ in range(k):
                    step()
        return run

    def loop(step: Any) -> Any:
        def run(k: int) -> None:
            for _ in range(k):
                step()
        return run

    def ssend_recv() -> None:               # one round trip: 0 Ssend then Recv, 1 the other way
        if rank == 0:
            c.Ssend(s, 1, 4)
            c.Recv(r, 1, 4)
        else:
            c.Recv(r, 0, 4)
            c.Ssend(s, 0, 4)

    steps = {
        "Bcast": loop(lambda: c.Bcast(s, 0)),
        "Reduce": loop(lambda: c.Reduce(s, r, MPI.SUM, 0)),
        "Allreduce": loop(lambda: c.Allreduce(s, r)),
        "Gather": loop(lambda: c.Gather(s, big, 0)),
        "Scatter": loop(lambda: c.Scatter(big, s, 0)),
        "Allgather": loop(lambda: c.Allgather(s, big)),
        "Alltoall": loop(lambda: c.Alltoall(s, r)),
        "Scan": loop(lambda: c.Scan(s, r)),
        "Exscan": loop(lambda: c.Exscan(s, r)),
        "Reduce_scatter_block": loop(lambda: c.Reduce_scatter_block(s, part)),
        "Iallreduce": loop(lambda: c.Iallreduce(s, r).Wait()),
        "Ibcast": loop(lambda: c.Ibcast(s, 0).Wait()),
        "Isend_Irecv": p2p(lambda: MPI.Request.Waitall([c.Irecv(r, peer, 3), c.Isend(s, peer, 3)])),
        "Ssend_Recv": p2p(ssend_recv),
        "Sendrecv_replace": p2p(lambda: c.Sendrecv_replace(r, peer, 5, peer, 5)),
        "bcast": loop(lambda: c.bcast(obj, 0)),
        "Neighbor_alltoall": loop(lambda: cart.Neighbor_alltoall(s, ring)),
    }
    unknown = [x for x in names if x not in steps]
    if unknown:
        raise ValueError(f"unknown call(s) {unknown}; known: {', '.join(steps)}")
    return {x: steps[x] for x in names}


# --------------------------------------------------------------------------- driver (outside MPI)
def run(ranks: list[int], backends: list[str], iters: int = 1000, sr_iters: int = 20, blocks: int = 200,
        timeout: float = 300.0, progress: Any = None, detect: bool = False, calls: str | None = None,
        only: str | None = None) -> dict[str, Any]:
    """One job per (backend, rank count); rows carry rank 0's medians and the planaria/raw ratios.
    ``calls``: the 1 MiB calls to time (comma-separated ``MIB_CALLS``; None: all); ``only``:
    the cases to keep (``pingpong_8B,Scan_1MiB``...; None: all)."""
    for c in (calls or "").split(","):
        if c and c not in MIB_CALLS:
            raise ValueError(f"unknown call {c!r}; known: {', '.join(MIB_CALLS)}")
    timed = ["allreduce_8B", "sendrecv_1MiB", "pingpong_8B", *(f"{c}_obj" for c in OBJECT_CALLS)] + [
        f"{c}_1MiB" for c in ([x for x in calls.split(",") if x] if calls else MIB_CALLS)]
    for case in (only or "").split(","):
        if case and case not in timed:
            raise ValueError(f"unknown case {case!r} for --only; these run: {', '.join(timed)}")
    for be in backends:
        if be not in ("ulfm", "sim"):
            raise ValueError(f"backend must be ulfm or sim, not {be!r}")
    if min(iters, sr_iters, blocks) < 1:
        raise ValueError("iters, sendrecv iters and blocks must be >= 1")
    load0 = loadavg()
    rows = []
    for be in backends:
        for n in ranks:
            if progress:
                progress(f"overhead: {n} ranks, {be}")
            extra = (["--calls", calls] if calls else []) + (["--only", only] if only else [])
            got = launch(n, MODULE, ["--backend", be, "--iters", str(iters), "--sr-iters", str(sr_iters),
                                     "--blocks", str(blocks), *extra], ft=(be == "ulfm"), timeout=timeout,
                         env={PLANARIA_DETECT: "1" if detect else "0"})
            for case, c in got.result["cases"].items():
                goal = GOALS.get(case) if (be == "ulfm" and not detect) else None
                rows.append({"backend": be, "ranks": n, "case": case, **c, "goal": goal,
                             "goal_met": (c["ratio"] <= goal) if goal is not None else None,
                             "launch_s": got.wall_s,
                             "mpiexec": " ".join(got.cmd[:-4] + ["..."])})
    return {"benchmark": "overhead", "detect": detect, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
            "loadavg_before": load0, "loadavg_after": loadavg(),
            "command": command_line(), "rows": rows}


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    t = Table(title="planaria.Comm" + (" with detection on" if result.get("detect") else "")
                    + " vs raw mpi4py (median per operation over blocks; "
                    f"{result['cores']} cores; load {result['loadavg_before'][0]:.1f}->{result['loadavg_after'][0]:.1f})")
    for col in ("backend", "ranks", "case", "raw", "planaria", "ratio", "pair ratio", "goal"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        goal = "-" if r["goal"] is None else f"<= {r['goal']} {'met' if r['goal_met'] else 'MISSED'}"
        t.add_row(r["backend"], str(r["ranks"]), r["case"], _t(r["raw_ns_median"]), _t(r["planaria_ns_median"]),
                  f"{r['ratio']:.3f}", f"{r['paired_ratio_median']:.3f}", goal)
    t.caption = "pair ratio = median over blocks of planaria/raw for adjacent blocks; goals apply to ulfm"
    return t


def _t(ns: float) -> str:
    return f"{ns / 1e3:.2f} us" if ns < 1e6 else f"{ns / 1e6:.3f} ms"


def show(result: dict[str, Any], as_json: bool) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table)


# --------------------------------------------------------------------------- command


def command(
    ranks: str = typer.Option("2", "--ranks", help="Rank counts, comma-separated (the Sendrecv runs between ranks 0 and 1)."),
    backend: str = typer.Option("ulfm,sim", "--backend", help="Backends, comma-separated: ulfm, sim."),
    iters: int = typer.Option(1000, "--iters", help="8-byte Allreduce (and small object) operations per timed block."),
    sr_iters: int = typer.Option(20, "--sr-iters", help="1 MiB operations per timed block (Sendrecv and the other calls)."),
    blocks: int = typer.Option(200, "--blocks", help="Timed blocks per variant (raw and planaria alternate)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    detect: bool = typer.Option(False, "--detect", help="Run with run-time error detection on (PLANARIA_DETECT=1), as under planaria run: what detection adds per call."),
    calls: str = typer.Option("", "--calls", help="The further 1 MiB calls to time, comma-separated, e.g. Scan,Ssend_Recv (default: all of them)."),
    only: str = typer.Option("", "--only", help="Cases to keep, comma-separated, e.g. pingpong_8B,Scan_1MiB (default: all)."),
) -> None:
    """Median per-call time of planaria.Comm vs the raw mpi4py communicator (comm.mpi), and their ratio.

    Example: python -m benchmarks overhead --ranks 2 --iters 1000
    """

    def compute() -> dict[str, Any]:
        return run(_launch.parse_ranks(ranks), [b for b in backend.split(",") if b], iters, sr_iters, blocks,
                        timeout, progress=_launch.progress_printer(json_out), detect=detect, calls=calls or None,
                        only=only or None)
    raise typer.Exit(_launch.run_and_show("overhead", compute, show, json_out))


def rank_entry(argv: list[str] | None = None) -> int:
    """One rank of the job (``python -m benchmarks.overhead --rank ...``, started by the driver)."""
    p = _launch.rank_parser("benchmarks.overhead")
    p.add_argument("--backend", default="ulfm")
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--sr-iters", type=int, default=20)
    p.add_argument("--blocks", type=int, default=200)
    p.add_argument("--calls", default=None)
    p.add_argument("--only", default=None)
    rank_main(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(rank_entry())
