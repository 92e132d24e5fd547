"""Checkpoint save and restore of the memory, xor and file stores, each next to its floor, in one job.

One job (default 8 ranks, real ULFM). For each state size per rank (default 2, 32, 256 MB)
every rank holds one float64 array of that size, and for each store, in the same job, the
store's save and restore alternate with their floors (``benchmarks.checkpoint_floor``: the
data movement the store's design requires, done with plain numpy, MPI and ``os`` calls into
buffers faulted in beforehand; the definitions are in that module's docstring):

- ``save``: ``--warmup`` untimed saves first (their times are kept as ``save_cold_s``: first
  saves touch new memory), then ``--reps`` rounds of [floor, ``store.save``] (every other
  round in the opposite order, so that neither inherits more of the other's after-effects),
  each started from a barrier; the time of the slowest rank, median over the rounds;
- ``restore``: logical rank ``lost`` (default 1) drops its store (a new, empty store object:
  a fresh process holding nothing; for files, its rank file is dropped from the page cache
  with ``posix_fadvise(DONTNEED)``) and every rank calls ``store.restore(comm, v, fresh={lost})``,
  after the floor's restore in the same round. As under ``Resilient`` (whose spares fault in
  the buffers a restore needs while they wait, and whose survivors restore into the arrays they
  hold), the lost rank first reserves the store's ``footprint()`` in ``WARM`` (untimed) and the
  others pass ``into=state``; ``--cold`` does neither. As under ``Resilient``, whose recovery
  exchanges the stores' ``offer``s in the allgather it makes anyway, the ranks first exchange
  their offers (untimed) and pass them to the restore (memory and XOR; the file store makes
  none). Timed: the lost rank, from the barrier to its state being back (``restore_all_s``: the
  slowest rank); the state is checked bit-exact.

Each store records where the time of its last save and restore went (``last_save`` /
``last_restore``: copy, metadata, exchange, fsync...), and so does each floor; a row carries the
phases of the median round (the slowest rank's for saves, the lost rank's for restores), and
``breakdown`` sets each phase beside the floor's phase of the same name, so a missed goal shows
which part of the time is above the floor.

Goals: memory and xor save <= 1.10x their floor at 32 MB and more; file save <= 1.10x
its floor at every size; restore of the lost rank <= 1.25x its floor at every size. Stores:
``memory`` = MemoryStore(copies=1, distance=1), ``xor`` = XorStore(group_size=4), ``file`` =
FileStore in a scratch directory next to the job (fsync on every write). The load average is
recorded before and after each store's measurements.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from typing import Any

import typer

from benchmarks import _launch
from benchmarks._launch import command_line, emit, launch, loadavg, median

MODULE = "benchmarks.checkpoint"
STORES = ("memory", "xor", "file")
MB = 1 << 20
REPS = 11                   # timed rounds per store and size: their medians decide the goals
GOAL_SAVE = 1.10            # store save / its floor
GOAL_RESTORE = 1.25         # restore of the lost rank / its floor
SAVE_GOAL_FROM_MB = {"memory": 32.0, "xor": 32.0, "file": 0.0}   # sizes the save goal applies to


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


def _make_floor(kind: str, comm: Any, state: dict[str, Any], store: Any, group_size: int) -> Any:
    import numpy as np

    from benchmarks import checkpoint_floor as cf
    data = np.ascontiguousarray(state["u"]).reshape(-1).view(np.uint8)
    if kind == "memory":
        return cf.MemoryFloor(comm, data, store.copies, store.distance)
    if kind == "xor":
        return cf.XorFloor(comm, data, group_size)
    from planaria.checkpoint.file import MAGIC, _header
    from planaria.checkpoint.store import describe
    return cf.FileFloor(comm, data, store.directory, len(MAGIC) + 8 + len(_header(describe(state))))


#: the plain forms a floor is measured in: the floor is the faster one, except for the file
#: store's, whose floor is the form named in SAVE_FLOOR / RESTORE_FLOOR, the other one being
#: reported beside it (see benchmarks.checkpoint_floor)
FORMS = {"memory": (None,), "xor": ("collective", "p2p"), "file": ("overwrite", "new")}
RESTORE_FORMS = {"memory": (None,), "xor": ("collective", "p2p"), "file": ("all", "alone")}
SAVE_FLOOR = {"file": "overwrite"}
RESTORE_FLOOR = {"file": "all"}


def _median_round(times: list[float]) -> int:
    """Index of the median round (the lower middle one for an even count)."""
    order = sorted(range(len(times)), key=lambda i: times[i])
    return order[(len(order) - 1) // 2]


class _Rounds:
    """The job's clock: rounds started from a barrier, and the time of one rank or of the slowest."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.n = comm.size

    def timed(self, fn: Any) -> tuple[float, dict[str, float]]:
        self.comm.Barrier()
        t0 = time.perf_counter()
        ph = fn()
        return time.perf_counter() - t0, dict(ph or {})

    def pick(self, dt: float, ph: dict[str, float], who: int | None) -> tuple[float, dict[str, float]]:
        """The time and phases of rank ``who``, or of the slowest rank (None); on rank 0."""
        got = self.comm.gather((dt, ph), root=0)
        if got is None:
            return 0.0, {}
        i = max(range(self.n), key=lambda k: got[k][0]) if who is None else who
        return got[i]


class _StoreRun:
    """One store at one state size in the job, beside its floor: the save rounds, then the restore rounds."""

    def __init__(self, args: argparse.Namespace, clock: _Rounds, kind: str, size_mb: float,
                 state: dict[str, Any]) -> None:
        self.args, self.clock, self.kind, self.size_mb, self.state = args, clock, kind, size_mb, state
        self.comm = clock.comm
        self.rank = self.comm.rank
        self.lost = args.lost % clock.n
        self.reps = max(1, args.reps)
        self.store = _make_store(kind, args.scratch, size_mb, args.group_size)
        self.floor = _make_floor(kind, self.comm, state, self.store, args.group_size)

    def saves(self) -> dict[str, Any]:
        """The untimed-first (cold) saves, then the rounds of [floor forms, store.save]; ``last``: the last version."""
        args, clock, store, floor, forms = self.args, self.clock, self.store, self.floor, FORMS[self.kind]
        t_cold = []
        for v in range(1, args.warmup + 1):
            dt, _ = clock.pick(*clock.timed(partial(store.save, self.comm, v, self.state)), None)
            t_cold.append(dt)
        for form in forms:                       # the floor's buffers, written once untimed
            floor.save(form) if form else floor.save()
        save: list[float] = []
        save_ph: list[dict[str, float]] = []
        fsave: dict[Any, list[float]] = {f: [] for f in forms}
        fsave_ph: dict[Any, list[dict[str, float]]] = {f: [] for f in forms}
        last = args.warmup + self.reps
        for v in range(args.warmup + 1, last + 1):
            # ABBA: the store after its floors in one round, before them (in reverse) in the next,
            # so that neither inherits more of the other's after-effects (page cache, journal)
            first = (v - args.warmup) % 2 == 0
            if first:
                self._store_save(v, save, save_ph)
            for form in (forms if not first else tuple(reversed(forms))):
                if self.kind == "file":
                    store.wait_pruned()          # the store's deletions do not slow the floor down
                    floor.prepare_save(form)
                dt, ph = clock.pick(*clock.timed(partial(floor.save, form) if form else floor.save), None)
                fsave[form].append(dt)
                fsave_ph[form].append(ph)
            if not first:
                self._store_save(v, save, save_ph)
        return {"save": save, "save_ph": save_ph, "t_cold": t_cold, "fsave": fsave, "fsave_ph": fsave_ph,
                "last": last}

    def _store_save(self, v: int, save: list[float], save_ph: list[dict[str, float]]) -> None:
        """One timed ``store.save`` of version ``v``: its time and phases appended."""
        dt, ph = self.clock.timed(partial(self.store.save, self.comm, v, self.state))
        dt, ph = self.clock.pick(dt, self.store.last_save, None)
        save.append(dt)
        save_ph.append(ph)

    def _floor_restores(self, path: Any, frest: dict[Any, list[float]],
                        frest_ph: dict[Any, list[dict[str, float]]]) -> None:
        """One round of the floor's restore forms, each timed on the lost rank."""
        floor, lost = self.floor, self.lost
        for form in RESTORE_FORMS[self.kind]:
            if self.kind == "file":
                self.store.wait_pruned()
                floor.prepare_restore(path, evicted=self.rank == lost)
                mine = path if form == "all" or self.rank == lost else None
                fn = partial(floor.restore, mine)
            else:
                floor.prepare_restore(lost)
                fn = partial(floor.restore, lost, form) if form else partial(floor.restore, lost)
            dt, ph = self.clock.pick(*self.clock.timed(fn), lost)
            frest[form].append(dt)
            frest_ph[form].append(ph)

    def _lose(self, path: Any) -> None:
        """On the lost rank: drop the store's data (a fresh store, or the rank file out of the page cache)."""
        import gc

        from benchmarks.checkpoint_floor import evict
        from planaria.checkpoint.store import WARM
        footprint = self.store.footprint()
        if self.kind == "file":
            evict(path)
        else:
            self.store = _make_store(self.kind, self.args.scratch, self.size_mb, self.args.group_size)
        gc.collect()
        if not self.args.cold:
            WARM.reserve(footprint)      # what a waiting spare would have done

    def restores(self, last: int) -> dict[str, Any]:
        """The rounds of [floor forms, store.restore of version ``last`` with the lost rank fresh]; ``ok``: bit-exact."""
        import numpy as np

        from planaria.checkpoint.file import rank_file_name, vdir_name
        comm, clock, rank, lost, u = self.comm, self.clock, self.rank, self.lost, self.state["u"]
        rest, rest_all, rest_ph, ok = [], [], [], True
        rforms = RESTORE_FORMS[self.kind]
        frest: dict[Any, list[float]] = {f: [] for f in rforms}
        frest_ph: dict[Any, list[dict[str, float]]] = {f: [] for f in rforms}
        path = getattr(self.store, "directory", None)
        path = path / vdir_name(last) / rank_file_name(rank) if path is not None else None
        for _ in range(self.reps):
            self._floor_restores(path, frest, frest_ph)
            if rank == lost:
                self._lose(path)
            into = None if self.args.cold or rank == lost else self.state
            store = self.store
            offers = comm.allgather(None if rank == lost else store.offer(rank))
            offers = offers if all(o is not None for i, o in enumerate(offers) if i != lost) else None
            comm.Barrier()
            t0 = time.perf_counter()
            back = store.restore(comm, last, {lost}, into=into, offers=offers)
            dt = time.perf_counter() - t0
            if rank == lost:
                got = back["u"]
                ok = ok and got.dtype == u.dtype and got.shape == u.shape and \
                    bool(np.array_equal(got.view(np.uint64), u.view(np.uint64)))
            del back
            dt_lost, ph = clock.pick(dt, store.last_restore, lost)
            dt_all, _ = clock.pick(dt, {}, None)
            store = None
            rest.append(dt_lost)
            rest_all.append(dt_all)
            rest_ph.append(ph)
        return {"rest": rest, "rest_all": rest_all, "rest_ph": rest_ph, "frest": frest, "frest_ph": frest_ph,
                "ok": ok}

    def close(self) -> None:
        """Free the floor's buffers and files; drop the store and the floor."""
        floor = self.floor
        if hasattr(floor, "free"):
            floor.free()
        if hasattr(floor, "cleanup"):
            floor.cleanup()
        self.store = self.floor = floor = None


def rank_main(args: argparse.Namespace) -> None:
    import gc

    import numpy as np

    import planaria as pl

    comm = pl.world(args.backend)
    rank, n = comm.rank, comm.size
    clock = _Rounds(comm)
    rows = []
    for size_mb in args.sizes:
        count = int(size_mb * MB) // 8
        u = np.random.default_rng(rank).random(count)
        state = {"u": u}
        for kind in args.stores:
            load_before = loadavg()
            run = _StoreRun(args, clock, kind, size_mb, state)
            sv = run.saves()
            rs = run.restores(sv["last"])
            oks = comm.allgather(rs["ok"])
            run.close()
            run = None
            gc.collect()
            if rank == 0:
                rows.append(_row(kind, size_mb, u.nbytes, sv["save"], sv["save_ph"], sv["t_cold"], sv["fsave"],
                                 sv["fsave_ph"], rs["rest"], rs["rest_all"], rs["rest_ph"], rs["frest"],
                                 rs["frest_ph"], all(oks), load_before, loadavg()))
        u = state = None
        gc.collect()
    if rank == 0:
        emit({"ranks": n, "backend": args.backend, "reps": max(1, args.reps), "warmup": args.warmup,
              "lost": args.lost % n, "group_size": args.group_size, "rows": rows}, args.out)


def _floor_of(times: dict[Any, list[float]], phases: dict[Any, list[dict[str, float]]],
              form: Any = None) -> dict[str, Any]:
    """The floor: the plain form ``form``, or the faster one (by median); its rounds and the phases
    of its median round, and every form's median."""
    meds = {f: median(ts) for f, ts in times.items()}
    if form is None:
        form = min(meds, key=lambda f: meds[f])
    i = _median_round(times[form])
    return {"s": meds[form], "per_rep": times[form], "phases": phases[form][i], "form": form,
            "forms": {str(f): m for f, m in meds.items()} if len(meds) > 1 else None}


def _breakdown(store_ph: dict[str, float], floor_ph: dict[str, float]) -> list[list[Any]]:
    """[phase, store seconds, floor seconds or None] for every phase of either, the store's order first."""
    names = list(store_ph) + [k for k in floor_ph if k not in store_ph]
    return [[k, store_ph.get(k, 0.0), floor_ph.get(k)] for k in names]


def _row(kind: str, size_mb: float, nbytes: int, save: list[float], save_ph: list[dict[str, float]],
         t_cold: list[float], fsave: dict[Any, list[float]], fsave_ph: dict[Any, list[dict[str, float]]],
         rest: list[float], rest_all: list[float], rest_ph: list[dict[str, float]],
         frest: dict[Any, list[float]], frest_ph: dict[Any, list[dict[str, float]]], bit_exact: bool,
         load_before: list[float], load_after: list[float]) -> dict[str, Any]:
    """One row of the result: a store at one size, with its floors, ratios, goals and breakdowns."""
    fs, fr = _floor_of(fsave, fsave_ph, SAVE_FLOOR.get(kind)), _floor_of(frest, frest_ph, RESTORE_FLOOR.get(kind))
    save_s, rest_s = median(save), median(rest)
    sph, rph = save_ph[_median_round(save)], rest_ph[_median_round(rest)]
    save_goal = GOAL_SAVE if size_mb >= SAVE_GOAL_FROM_MB[kind] else None
    save_ratio, rest_ratio = save_s / fs["s"], rest_s / fr["s"]
    return {
        "store": kind, "size_mb": size_mb, "bytes_per_rank": nbytes,
        "save_s": save_s, "save_s_per_rep": save, "save_cold_s": t_cold, "save_phases": sph,
        "save_phases_per_rep": save_ph,
        "save_floor_s": fs["s"], "save_floor_s_per_rep": fs["per_rep"], "save_floor_phases": fs["phases"],
        "save_floor_form": fs["form"], "save_floor_forms": fs["forms"],
        "save_ratio": save_ratio, "save_goal": save_goal,
        "save_goal_met": None if save_goal is None else save_ratio <= save_goal,
        "restore_lost_s": rest_s, "restore_lost_s_per_rep": rest, "restore_all_s": median(rest_all),
        "restore_phases": rph, "restore_phases_per_rep": rest_ph,
        "restore_floor_s": fr["s"], "restore_floor_s_per_rep": fr["per_rep"], "restore_floor_phases": fr["phases"],
        "restore_floor_form": fr["form"], "restore_floor_forms": fr["forms"],
        "restore_ratio": rest_ratio, "restore_goal": GOAL_RESTORE, "restore_goal_met": rest_ratio <= GOAL_RESTORE,
        "breakdown": {"save": _breakdown(sph, fs["phases"]), "restore": _breakdown(rph, fr["phases"])},
        "load_before": load_before, "load_after": load_after, "bit_exact": bit_exact,
    }


# --------------------------------------------------------------------------- driver (outside MPI)
def run_checkpoint_bench(ranks: int = 8, sizes_mb: list[float] | tuple[float, ...] = (2, 32, 256),
                         stores: list[str] | tuple[str, ...] = STORES, backend: str = "ulfm",
                         reps: int = REPS, warmup: int = 2, group_size: int = 4, lost: int = 1, timeout: float = 3600.0,
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
    load_before = loadavg()
    got = launch(int(ranks), MODULE, args, ft=(backend == "ulfm"), timeout=timeout, env=env)
    res = got.result
    rows = res["rows"]
    goals = []
    for r in rows:
        if r["save_goal"] is not None:
            goals.append({"store": r["store"], "size_mb": r["size_mb"], "what": "save",
                          "ratio": r["save_ratio"], "goal": r["save_goal"], "met": r["save_goal_met"]})
        goals.append({"store": r["store"], "size_mb": r["size_mb"], "what": "restore",
                      "ratio": r["restore_ratio"], "goal": r["restore_goal"], "met": r["restore_goal_met"]})
    return {"benchmark": "checkpoint", "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
            "command": command_line(), "mpiexec": " ".join(got.cmd[:-2] + ["..."]),
            "ranks": res["ranks"], "backend": backend, "reps": res["reps"], "warmup": res["warmup"],
            "lost_rank": res["lost"], "cold": cold, "group_size": res["group_size"], "rows": rows,
            "goals": goals, "all_met": all(g["met"] for g in goals),
            "load_before": load_before, "load_after": loadavg(), "wall_s": got.wall_s}


def _t(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.2f} s"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def _goal(ratio: float, goal: float | None, met: bool | None) -> str:
    if goal is None:
        return f"{ratio:.2f} (no goal)"
    return f"{ratio:.2f} {'met' if met else 'MISSED'}"


def breakdown_lines(result: dict[str, Any], every: bool = False) -> list[str]:
    """One line per missed goal (or per row and operation with ``every``): each phase beside its floor's."""
    out = []
    for r in result["rows"]:
        for what in ("save", "restore"):
            met = r[f"{what}_goal_met"]
            if not every and met is not False:
                continue
            parts = [f"{k} {_ms(a)}" + (f" (floor {_ms(b)})" if b is not None else " (floor -)")
                     for k, a, b in r["breakdown"][what]]
            out.append(f"{r['store']} {r['size_mb']:g} MB {what} {r[f'{what}_ratio']:.2f}x its floor: "
                       + ", ".join(parts) + " ms")
    return out


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    t = Table(title=f"checkpoint stores against their floors: {result['ranks']} ranks, {result['backend']}, "
                    f"{result['cores']} cores, median of {result['reps']} (after {result['warmup']} untimed saves), "
                    f"{'cold restore' if result.get('cold') else 'warm spare, survivors in place'}, "
                    f"load {result['load_before'][0]:.2f} -> {result['load_after'][0]:.2f}")
    for col in ("store", "MB/rank", "save", "floor", "save/floor", "restore lost", "floor", "restore/floor",
                "restore all", "load", "bit-exact"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        t.add_row(r["store"], f"{r['size_mb']:g}", _t(r["save_s"]), _t(r["save_floor_s"]),
                  _goal(r["save_ratio"], r["save_goal"], r["save_goal_met"]),
                  _t(r["restore_lost_s"]), _t(r["restore_floor_s"]),
                  _goal(r["restore_ratio"], r["restore_goal"], r["restore_goal_met"]),
                  _t(r["restore_all_s"]), f"{r['load_before'][0]:.2f}-{r['load_after'][0]:.2f}",
                  "yes" if r["bit_exact"] else "NO")
    cap = [f"goals: save <= {GOAL_SAVE:g}x its floor (memory and xor from 32 MB, file at every size), "
           f"restore of rank {result['lost_rank']} <= {GOAL_RESTORE:g}x its floor; floors: "
           "benchmarks.checkpoint_floor"]
    cap += breakdown_lines(result)
    t.caption = "\n".join(cap)
    return t


def show(result: dict[str, Any], as_json: bool) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=150)


def _sizes(spec: str) -> list[float]:
    try:
        out = [float(x) for x in spec.replace(" ", "").split(",") if x]
    except ValueError:
        raise ValueError(f"bad size list {spec!r} (expected MB per rank, e.g. 2,32,256)") from None
    if not out or any(s <= 0 for s in out):
        raise ValueError(f"bad size list {spec!r}: sizes are MB per rank, > 0")
    return out


# --------------------------------------------------------------------------- command


def command(
    ranks: int = typer.Option(8, "--ranks", help="Ranks in the job."),
    sizes: str = typer.Option("2,32,256", "--sizes", help="State size per rank in MB, comma-separated."),
    stores: str = typer.Option("memory,xor,file", "--stores", help="Stores, comma-separated: memory, xor, file."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    reps: int = typer.Option(REPS, "--reps", help="Timed rounds of saves and restores (and their floors) per store and "
                             "size; medians (with 5, one store's median moved by 10-25 % between runs with 8 ranks on 2 cores)."),
    warmup: int = typer.Option(2, "--warmup", help="Untimed first saves per store and size (first touch of new memory)."),
    group_size: int = typer.Option(4, "--group-size", help="Ranks per XOR group (the xor store)."),
    lost: int = typer.Option(1, "--lost", help="Logical rank that loses its data before each restore."),
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds allowed for the job."),
    cold: bool = typer.Option(False, "--cold", help="Restore into new memory everywhere (no warm spare "
                              "buffers, survivors allocate); default: as under Resilient."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Checkpoint save, and restore of a rank that lost its state, per store and size, each next to its
    floor (the data movement the store's design requires, in plain MPI and os calls, same job).

    Example: python -m benchmarks checkpoint --ranks 8 --sizes 2,32,256 --reps 11
    """

    def compute() -> dict[str, Any]:
        store_list = [s for s in stores.replace(" ", "").split(",") if s]
        return run_checkpoint_bench(ranks, _sizes(sizes), store_list, backend, reps=reps, warmup=warmup,
                                    group_size=group_size, lost=lost, timeout=timeout, cold=cold,
                                    progress=_launch.progress_printer(json_out))
    raise typer.Exit(_launch.run_and_show("checkpoint", compute, show, json_out))


def rank_entry(argv: list[str] | None = None) -> int:
    """One rank of the job (``python -m benchmarks.checkpoint --rank ...``, started by the driver)."""
    p = _launch.rank_parser("benchmarks.checkpoint")
    p.add_argument("--backend", default="ulfm")
    p.add_argument("--sizes", default="2")
    p.add_argument("--stores", default=",".join(STORES))
    p.add_argument("--reps", type=int, default=REPS)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--lost", type=int, default=1)
    p.add_argument("--cold", action="store_true")
    args = p.parse_args(argv)
    args.sizes = _sizes(args.sizes)
    args.stores = [s for s in args.stores.split(",") if s]
    args.scratch = os.environ.get("PLANARIA_CKPT_SCRATCH") or args.scratch
    rank_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(rank_entry())
