"""Checkpoint write and restore time of the memory, xor and file stores, next to memcpy bandwidth.

One job (default 8 ranks, real ULFM). For each state size per rank (default 2, 32, 256 MB)
every rank holds one float64 array of that size, and in the same job:

- ``memcpy``: ``np.copyto`` of the state into a buffer of the same size on every rank at once
  (median of ``--reps``), the reference bandwidth;
- ``floor``: that copy followed by a ``Sendrecv`` of it to the next rank (from the one before),
  all ranks at once, slowest rank, median: what any partner-memory checkpoint with one copy must
  move (its own snapshot and its partner's), so the memory save can get no faster than this and
  ``file save / floor`` bounds the memory-vs-file ratio this machine can show;
- ``save``: ``store.save`` of ``--warmup`` versions first (their times are kept as ``save_cold_s``:
  the first saves touch new memory, which is slow on some machines), then ``--reps`` timed saves,
  the time of the slowest rank (median): the steady cost of checkpointing in a long run;
- ``restore``: logical rank ``lost`` (default 1) drops its store (a new, empty store object:
  a fresh process holding nothing) and ``store.restore(comm, v, fresh={lost})`` rebuilds its
  state from partners / parity / files (for files, the rank's file is first evicted from the
  page cache with ``posix_fadvise(DONTNEED)``). As under ``Resilient`` (whose spares fault in
  the buffers a restore needs while they wait, and whose survivors restore into the arrays they
  hold), the lost rank first reserves the store's ``footprint()`` in ``WARM`` (untimed) and the
  other ranks pass ``into=state``; ``--cold`` does neither (new memory everywhere). Reported:
  the lost rank's time (its data is back) and the slowest rank's time (everyone has their data
  back); the restored state is checked bit-exact.

Stores: ``memory`` = MemoryStore(copies=1, distance=1), ``xor`` = XorStore(group_size=4),
``file`` = FileStore in a scratch directory next to the job (fsync on every write).
Goals (from the issue): memory checkpoint >= 10x faster than file at 32 MB per rank;
restore throughput of the lost rank >= 25% of the memcpy bandwidth.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from planaria.bench import _launch
from planaria.bench._launch import command_line, emit, launch, median

MODULE = "planaria.bench.checkpoint"
STORES = ("memory", "xor", "file")
MB = 1 << 20
GOAL_SAVE_RATIO = 10.0        # file save time / memory save time at 32 MB
GOAL_RESTORE_FRACTION = 0.25  # restore throughput / memcpy bandwidth


# --------------------------------------------------------------------------- inside the ranks
def _make_store(kind: str, scratch: str, size_mb: float, group_size: int) -> Any:
    from planaria.checkpoint import FileStore, MemoryStore, XorStore
    if kind == "memory":
        return MemoryStore(copies=1, distance=1)
    if kind == "xor":
        return XorStore(group_size=group_size)
    if kind == "file":
        return FileStore(os.path.join(scratch, f"ckpt-{size_mb:g}MB"))
    raise ValueError(f"unknown store {kind!r}")


def _evict(store: Any, version: int, rank: int) -> None:
    """Drop this rank's checkpoint file from the page cache (so restore reads the device)."""
    from planaria.checkpoint.file import rank_file_name, vdir_name
    path = store.directory / vdir_name(version) / rank_file_name(rank)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(fd)


def rank_main(args: argparse.Namespace) -> None:
    import gc

    import numpy as np
    from mpi4py import MPI

    import planaria as pl
    from planaria.checkpoint.store import WARM

    comm = pl.world(args.backend)
    rank, n = comm.rank, comm.size
    lost = args.lost % n
    reps = max(1, args.reps)

    def slowest(t: float) -> float:
        out = np.zeros(1)
        comm.Allreduce(np.array([t]), out, op=MPI.MAX)
        return float(out[0])

    rows = []
    for size_mb in args.sizes:
        count = int(size_mb * MB) // 8
        rng = np.random.default_rng(rank)
        u = rng.random(count)
        state = {"u": u}
        nbytes = u.nbytes
        # reference: memcpy of the same size, all ranks at once
        dst = np.empty_like(u)
        np.copyto(dst, u)
        t_copy = []
        for _ in range(reps):
            comm.Barrier()
            t0 = time.perf_counter()
            np.copyto(dst, u)
            t_copy.append(time.perf_counter() - t0)
        memcpy_s = median(t_copy)
        memcpy_all = slowest(memcpy_s)
        got = np.empty_like(u)
        got.fill(0.0)
        t_floor = []
        for _ in range(reps):
            comm.Barrier()
            t0 = time.perf_counter()
            np.copyto(dst, u)
            comm.Sendrecv(dst, (rank + 1) % n, 7, got, (rank - 1) % n, 7)
            t_floor.append(slowest(time.perf_counter() - t0))
        floor_s = median(t_floor)
        del dst, got
        for kind in args.stores:
            store = _make_store(kind, args.scratch, size_mb, args.group_size)
            t_cold, t_save_all = [], []
            last = args.warmup + reps
            for v in range(1, last + 1):
                comm.Barrier()
                t0 = time.perf_counter()
                store.save(comm, v, state)
                dt = slowest(time.perf_counter() - t0)
                (t_cold if v <= args.warmup else t_save_all).append(dt)
            t_lost, t_all, ok = [], [], True
            for _ in range(reps):
                if rank == lost:
                    footprint = store.footprint()
                    if kind == "file":
                        _evict(store, last, rank)
                    else:
                        store = _make_store(kind, args.scratch, size_mb, args.group_size)
                    gc.collect()
                    if not args.cold:
                        WARM.reserve(footprint)      # what a waiting spare would have done
                comm.Barrier()
                t0 = time.perf_counter()
                back = store.restore(comm, last, {lost}, into=None if args.cold or rank == lost else state)
                dt = time.perf_counter() - t0
                if rank == lost:
                    got = back["u"]
                    ok = ok and got.dtype == u.dtype and got.shape == u.shape and \
                        bool(np.array_equal(got.view(np.uint64), u.view(np.uint64)))
                del back
                t_all.append(slowest(dt))
                lost_dt = np.array([dt if rank == lost else 0.0])
                out = np.zeros(1)
                comm.Allreduce(lost_dt, out, op=MPI.MAX)
                t_lost.append(float(out[0]))
            oks = comm.allgather(ok)
            del store
            gc.collect()
            if rank == 0:
                save_s = median(t_save_all)
                rest_s = median(t_lost)
                rows.append({
                    "store": kind, "size_mb": size_mb, "bytes_per_rank": nbytes,
                    "save_s": save_s, "save_s_per_rep": t_save_all, "save_cold_s": t_cold,
                    "restore_lost_s": rest_s, "restore_all_s": median(t_all),
                    "restore_lost_s_per_rep": t_lost,
                    "memcpy_s": memcpy_all, "memcpy_GBps": nbytes / memcpy_all / 1e9,
                    "partner_floor_s": floor_s,
                    "save_GBps_per_rank": nbytes / save_s / 1e9,
                    "restore_GBps": nbytes / rest_s / 1e9,
                    "restore_vs_memcpy": (nbytes / rest_s) / (nbytes / memcpy_all),
                    "bit_exact": all(oks),
                })
        del u, state
        gc.collect()
    if rank == 0:
        emit({"ranks": n, "backend": args.backend, "reps": reps, "warmup": args.warmup, "lost": lost,
              "group_size": args.group_size, "rows": rows}, args.out)


# --------------------------------------------------------------------------- driver (outside MPI)
def run_checkpoint_bench(ranks: int = 8, sizes_mb: list[float] | tuple[float, ...] = (2, 32, 256),
                         stores: list[str] | tuple[str, ...] = STORES, backend: str = "ulfm",
                         reps: int = 3, warmup: int = 2, group_size: int = 4, lost: int = 1, timeout: float = 3600.0,
                         scratch: str | None = None, cold: bool = False, progress: Any = None) -> dict[str, Any]:
    """Run one job of ``ranks`` ranks; returns the rows (one per store and size) and the goal checks.

    ``progress`` (a callable) is told what the job runs once the arguments have been checked."""
    if backend not in ("ulfm", "sim"):
        raise ValueError(f"backend must be ulfm or sim, not {backend!r}")
    if int(ranks) < 2:
        raise ValueError("the checkpoint benchmark needs >= 2 ranks")
    stores = list(stores)
    for s in stores:
        if s not in STORES:
            raise ValueError(f"unknown store {s!r} (expected some of {', '.join(STORES)})")
    sizes = [float(s) for s in sizes_mb]
    if not sizes or any(s <= 0 for s in sizes):
        raise ValueError("sizes must be > 0 MB")
    if progress:
        progress(f"checkpoint: {ranks} ranks, {','.join(f'{x:g}' for x in sizes)} MB/rank, {','.join(stores)}, "
                 f"{backend}")
    args = ["--backend", backend, "--sizes", ",".join(f"{s:g}" for s in sizes),
            "--stores", ",".join(stores), "--reps", str(reps), "--warmup", str(warmup), "--group-size", str(group_size),
            "--lost", str(lost)] + (["--cold"] if cold else [])
    env = {"PLANARIA_CKPT_SCRATCH": scratch} if scratch else None
    got = launch(int(ranks), MODULE, args, ft=(backend == "ulfm"), timeout=timeout, env=env)
    res = got.result
    rows = res["rows"]
    goals: dict[str, Any] = {}
    by = {(r["store"], r["size_mb"]): r for r in rows}
    if ("memory", 32.0) in by and ("file", 32.0) in by:
        file_s, mem = by[("file", 32.0)]["save_s"], by[("memory", 32.0)]
        ratio = file_s / mem["save_s"]
        goals["memory_vs_file_save_32MB"] = {"ratio": ratio, "goal": GOAL_SAVE_RATIO,
                                             "met": ratio >= GOAL_SAVE_RATIO,
                                             # the ratio a memory store saving at the floor would reach
                                             "ratio_at_floor": file_s / mem["partner_floor_s"],
                                             "memory_save_vs_floor": mem["save_s"] / mem["partner_floor_s"]}
    for r in rows:
        r["restore_goal_met"] = r["restore_vs_memcpy"] >= GOAL_RESTORE_FRACTION
    return {"benchmark": "checkpoint", "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
            "command": command_line(), "mpiexec": " ".join(got.cmd[:-2] + ["..."]),
            "ranks": res["ranks"], "backend": backend, "reps": res["reps"], "warmup": res["warmup"], "lost_rank": res["lost"], "cold": cold,
            "group_size": res["group_size"], "rows": rows, "goals": goals, "wall_s": got.wall_s}


def _t(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.2f} s"


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    t = Table(title=f"checkpoint stores: {result['ranks']} ranks, {result['backend']}, "
                    f"{result['cores']} cores, median of {result['reps']} (after {result['warmup']} untimed saves), "
                    f"{'cold restore' if result.get('cold') else 'warm spare, survivors in place'}")
    for col in ("store", "MB/rank", "save", "1st save", "floor", "save GB/s/rank", "restore lost", "restore all",
                "restore GB/s", "memcpy GB/s", "restore/memcpy", "bit-exact"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        cold = _t(r["save_cold_s"][0]) if r["save_cold_s"] else "-"
        floor = _t(r["partner_floor_s"]) if "partner_floor_s" in r else "-"
        t.add_row(r["store"], f"{r['size_mb']:g}", _t(r["save_s"]), cold, floor, f"{r['save_GBps_per_rank']:.2f}",
                  _t(r["restore_lost_s"]), _t(r["restore_all_s"]), f"{r['restore_GBps']:.2f}",
                  f"{r['memcpy_GBps']:.2f}",
                  f"{r['restore_vs_memcpy']:.2f} {'met' if r['restore_goal_met'] else 'MISSED'}",
                  "yes" if r["bit_exact"] else "NO")
    cap = [f"restore: rank {result['lost_rank']} starts empty and gets its state back; goal restore/memcpy >= "
           f"{GOAL_RESTORE_FRACTION}"]
    g = result["goals"].get("memory_vs_file_save_32MB")
    if g:
        cap.append(f"file/memory save time at 32 MB: {g['ratio']:.1f}x (goal >= {g['goal']:g}x, "
                   f"{'met' if g['met'] else 'MISSED'}; {g['ratio_at_floor']:.1f}x for a memory save at the floor)")
    cap.append("floor: a copy of the state and a Sendrecv of it to the next rank, all ranks at once")
    t.caption = "; ".join(cap)
    return t


def show(result: dict[str, Any], as_json: bool) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=150)


def _sizes(spec: str) -> list[float]:
    try:
        out = [float(x) for x in spec.replace(" ", "").split(",") if x]
    except ValueError:
        raise ValueError(f"bad size list {spec!r} (expected e.g. 2,32,256)") from None
    if not out or any(s <= 0 for s in out):
        raise ValueError(f"bad size list {spec!r}: sizes are MB per rank, > 0")
    return out


# --------------------------------------------------------------------------- entry point
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python benchmarks/checkpoint.py",
                                description="Checkpoint save/restore time of the memory, xor and file stores.")
    p.add_argument("--ranks", type=int, default=8, help="ranks in the job (default 8)")
    p.add_argument("--sizes", default="2,32,256", help="state size per rank in MB, e.g. 2,32,256")
    p.add_argument("--stores", default=",".join(STORES), help="stores to measure, e.g. memory,file")
    p.add_argument("--backend", default="ulfm", help="ulfm (default) or sim")
    p.add_argument("--reps", type=int, default=3, help="saves and restores per store and size")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed first saves (first touch of new memory; reported as save_cold_s)")
    p.add_argument("--group-size", type=int, default=4, help="XOR group size")
    p.add_argument("--lost", type=int, default=1, help="logical rank that loses its data")
    p.add_argument("--cold", action="store_true",
                   help="restore into new memory everywhere (no warm spare buffers, survivors allocate)")
    _launch.add_common_args(p, timeout=3600.0)
    args = p.parse_args(argv)
    if args.rank:
        args.sizes = _sizes(args.sizes)
        args.stores = [s for s in args.stores.split(",") if s]
        args.scratch = os.environ.get("PLANARIA_CKPT_SCRATCH") or args.scratch
        rank_main(args)
        return 0
    def compute() -> dict[str, Any]:
        return run_checkpoint_bench(args.ranks, _sizes(args.sizes), [s for s in args.stores.split(",") if s],
                                    args.backend, reps=args.reps, warmup=args.warmup,
                                    group_size=args.group_size, lost=args.lost, timeout=args.timeout,
                                    cold=args.cold, progress=_launch.progress_printer(args.json))
    return _launch.run_and_show("checkpoint", compute, show, args.json)


if __name__ == "__main__":
    sys.exit(main())
