"""Recovery time under ``planaria.recovery.Resilient``: from a rank's death to the first resumed step.

Each job is one ``mpiexec`` launch of ``ranks + spares`` processes: ``ranks`` working ranks (logical
ranks 0..N-1) and ``spares`` spare processes, run by ``Resilient(store, every=K, spares=S)``. Every
working rank holds ``mb`` MB of state (one float64 array, filled at start), and one step is trivial:
add 1.0 to one element per 4 KiB page of the state (every page is touched) and an 8-byte
``Allreduce`` over the working communicator; the wall clock at the end of every step is recorded.
A checkpoint is taken every ``every`` steps (and at step 0).

At the start of step ``kill_step`` the victim (logical rank ``victim``, default 1, never 0) writes
``t_kill = time.time()`` to a file in the job's scratch directory and calls ``planaria.fail_stop``
(SIGKILL on ulfm). The others are then in that step's ``Allreduce``; the recovery driver revokes,
shrinks, gives the lost logical rank to a spare, restores the newest checkpoint and resumes.

Per working rank after the run, from ``res.recoveries[0]``:

- detection = its ``t_detect`` - ``t_kill`` (the spare notices through the revoked world);
- revoke+shrink, substitution (allgather of roles + split of the new working communicator), and
  restore (agreeing on the version + ``store.restore``), as timed by the driver;
- kill -> resumed = end of the first step this rank completed after ``t_detect`` - ``t_kill``;
- the phases of the store's last restore on this rank (``last_restore``: where the time of the
  restore of the rank that lost its state went).

Each rank's ``marks``: the driver's marks of its recovery's steps (``planaria.recovery.driver.MARKS``:
revoked, shrunk, roles gathered, working communicator split, restored...), in ms from the kill.

ULFM's own floor for revoke+shrink, measured in the same job after the figures are gathered
(``raw_ulfm``): the last working rank dies in a loop of 8-byte ``Allreduce`` on a plain mpi4py
duplicate of the working communicator, and the others time mpi4py's ``Revoke`` and ``Shrink``
from the error, nothing of planaria around them (8 processes, 7 living, against the recovery's 9
and 8).

Also measured in the same job, after the run, on every working rank at once: ``np.copyto`` of the
same number of bytes (median of 5, after one untimed copy), the memcpy reference for the restore
throughput of the rank that lost its state (bytes / its restore time). The final state of every
rank is checked (every touched element counts each of the ``steps`` steps exactly once).

Per job: median and max over the working ranks; over ``repeat`` launches, the median of each
per-job value. Goal: kill -> resumed step <= the survivors' detection + 10 ms + 1.25 x the
restore floor.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from typing import Any

import typer

from benchmarks import _launch
from benchmarks._launch import BenchError, command_line, emit, launch, loadavg, median
from planaria.util.env import PLANARIA_FINALIZE_TIMEOUT

MODULE = "benchmarks.recovery"
STORES = ("memory", "xor", "file")
MB = 1 << 20
PAGE_FLOATS = 512                 # one float64 per 4 KiB page is touched by each step
GOAL_SLACK_MS = 10.0              # kill -> resumed step <= detection + this + factor x restore floor
GOAL_RESTORE_FACTOR = 1.25


# --------------------------------------------------------------------------- inside the ranks
def _make_store(kind: str, scratch: str, group_size: int) -> Any:
    from planaria.checkpoint import FileStore, MemoryStore, XorStore
    if kind == "memory":
        return MemoryStore(copies=1, distance=1)
    if kind == "xor":
        return XorStore(group_size=group_size)
    if kind == "file":
        return FileStore(os.path.join(scratch, "checkpoints"))
    raise ValueError(f"unknown store {kind!r}")


def rank_main(args: argparse.Namespace) -> None:
    import numpy as np

    import planaria as pl
    from planaria.recovery.driver import Resilient

    world = pl.world(args.backend)
    if args.detection_paused:
        from planaria.runtime.bootstrap import set_detection
        set_detection(False)            # every rank, at the same point: before any step
    res = Resilient(_make_store(args.store, args.scratch, args.group_size), every=args.every,
                    spares=args.spares, world=world, warm_spares=not args.cold_spares)
    count = max(1, int(args.mb * MB) // 8)
    ends: list[tuple[float, int]] = []
    one, out = np.ones(1), np.zeros(1)
    victim_file = os.path.join(args.scratch, "victim.json")

    def init(comm: pl.Comm) -> dict[str, np.ndarray]:
        return {"u": np.full(count, float(comm.rank))}

    def step(comm: pl.Comm, state: dict[str, np.ndarray], i: int) -> None:
        if i == args.kill_step and comm.rank == args.victim and res.role == "initial":
            t_kill = time.time()
            with open(victim_file, "w") as f:
                json.dump({"t_kill": t_kill, "step": i}, f)
            pl.fail_stop("benchmark victim")
        state["u"][::PAGE_FLOATS] += 1.0
        comm.Allreduce(one, out)
        ends.append((time.time(), i))

    state = res.run(init, step, args.steps)
    if state is None:                       # a spare that was never needed
        return
    comm = res.comm
    mine, floor_s = _rank_figures(comm, res, world.rank, state["u"], ends, args)
    everyone = comm.gather(mine, root=0)
    raw = _raw_revoke_shrink(comm, args) if args.backend == "ulfm" else None
    if comm.rank != 0:
        return
    assert everyone is not None
    try:
        with open(victim_file) as f:
            t_kill = float(json.load(f)["t_kill"])
    except (OSError, ValueError, KeyError):
        emit({"error": "the victim left no kill time (did it die?)", "per_rank": everyone}, args.out)
        return
    result = _job_result(everyone, t_kill, floor_s, comm.size, world.size, args)
    if raw is not None and "error" not in result:
        result["raw_ulfm"] = raw
        result["raw_revoke_shrink_ms_max"] = raw["revoke_shrink_ms_max"]
    emit(result, args.out)


RAW_KILL_AT = 20          # iteration of the raw loop at whose start its victim dies


def _raw_revoke_shrink(comm: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    """ULFM's own recovery floor, after the run, on the working ranks: mpi4py's ``Revoke`` and
    ``Shrink`` on a plain duplicate of the working communicator, nothing of planaria around them.

    Its last rank dies (SIGKILL) at the start of an iteration of a loop of 8-byte ``Allreduce``,
    as the benchmark's victim does; every other rank times, from the error that tells it, its
    ``Revoke`` and ``Shrink``. Collective over ``comm``; on its rank 0 the figures in ms (maxima
    over the ranks), None elsewhere; the last rank does not return."""
    import signal

    import numpy as np
    from mpi4py import MPI

    raw = MPI.Intracomm(comm._c).Dup()
    raw.Set_errhandler(MPI.ERRORS_RETURN)
    victim = raw.Get_size() - 1
    one, out = np.ones(1), np.zeros(1)
    raw.Barrier()
    for i in range(10 * RAW_KILL_AT):
        if i == RAW_KILL_AT and raw.Get_rank() == victim:
            with open(os.path.join(args.scratch, "raw_victim.json"), "w") as f:
                json.dump({"t_kill": time.time()}, f)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            raw.Allreduce(one, out)
        except MPI.Exception:
            break
    t_detect = time.time()
    t0 = time.perf_counter()
    raw.Revoke()
    t1 = time.perf_counter()
    shrunk = raw.Shrink()
    t2 = time.perf_counter()
    times = shrunk.gather((t_detect, t1 - t0, t2 - t0, t2 - t1), root=0)
    if shrunk.Get_rank() != 0:
        return None
    with open(os.path.join(args.scratch, "raw_victim.json")) as f:
        t_kill = float(json.load(f)["t_kill"])
    ms = 1e3
    last_detect = max(t for t, *_ in times)
    return {"processes": raw.Get_size(), "living": shrunk.Get_size(),
            "detect_ms_max": (last_detect - t_kill) * ms,
            "revoke_ms_max": max(r for _, r, _, _ in times) * ms,
            "shrink_ms_max": max(s for _, _, _, s in times) * ms,
            "revoke_shrink_ms_max": max(rs for _, _, rs, _ in times) * ms,
            "last_detect_to_shrunk_ms": (max(t + rs for t, _, rs, _ in times) - last_detect) * ms}


def _rank_figures(comm: Any, res: Any, world_rank: int, u: Any, ends: list[tuple[float, int]],
                  args: argparse.Namespace) -> tuple[dict[str, Any], float | None]:
    """This working rank's figures after the run (state check, memcpy reference, its first recovery's
    times), and the restore floor (on rank 0). Collective over ``comm``."""
    import numpy as np

    L = comm.rank
    ok = bool(np.all(u[::PAGE_FLOATS] == L + args.steps)) and bool(np.all(u[1:PAGE_FLOATS] == L))
    # memcpy reference: the same number of bytes, every working rank at once
    dst = np.empty_like(u)
    np.copyto(dst, u)
    t_copy = []
    for _ in range(5):
        comm.Barrier()
        t0 = time.perf_counter()
        np.copyto(dst, u)
        t_copy.append(time.perf_counter() - t0)
    del dst
    floor_s = _restore_floor(comm, res, args, u.nbytes)
    mine: dict[str, Any] = {"logical": L, "world": world_rank, "role": res.role, "ok": ok,
                            "bytes": int(u.nbytes), "memcpy_s": median(t_copy),
                            "save_s_median": median(res.checkpoint_times),
                            "recoveries": len(res.recoveries)}
    if res.recoveries:
        r = res.recoveries[0]
        after = [(t, i) for t, i in ends if t > r.t_detect]
        mine.update(t_detect=r.t_detect, error=r.error, detected_at=r.detected_at, lost=r.lost,
                    version=r.version, attempts=r.attempts, revoke_shrink_s=r.revoke_shrink_s,
                    substitution_s=r.substitution_s, restore_s=r.restore_s,
                    t_first_step=after[0][0] if after else None, first_step=after[0][1] if after else None,
                    t_resumed=r.t_done, step_s_median=_step_median(ends, r.t_detect),
                    restore_phases=dict(getattr(res.store, "last_restore", {}) or {}),
                    marks=list(recovery_marks()))
    return mine, floor_s


def _step_median(ends: list[tuple[float, int]], t_detect: float) -> float | None:
    """The median time of one step before the failure (between consecutive step ends)."""
    before = [t for t, _ in ends if t < t_detect]
    gaps = [b - a for a, b in itertools.pairwise(before)]
    return median(gaps) if gaps else None


def recovery_marks() -> list[tuple[str, float]]:
    """This process's marks of its last recovery (``planaria.recovery.driver.MARKS``)."""
    from planaria.recovery.driver import MARKS
    return MARKS


def _per_rank_rows(rec: list[dict[str, Any]], t_kill: float) -> list[dict[str, Any]]:
    """The working ranks' figures in ms from the kill time."""
    ms = 1e3
    per_rank = []
    for p in rec:
        per_rank.append({
            "logical": p["logical"], "world": p["world"], "role": p["role"], "error": p["error"],
            "detect_ms": (p["t_detect"] - t_kill) * ms, "revoke_shrink_ms": p["revoke_shrink_s"] * ms,
            "substitution_ms": p["substitution_s"] * ms, "restore_ms": p["restore_s"] * ms,
            "kill_to_resumed_ms": (p["t_first_step"] - t_kill) * ms, "first_step": p["first_step"],
            # the first resumed step (from the recovery's end) against a step before the failure
            "first_step_ms": (p["t_first_step"] - p["t_resumed"]) * ms,
            "step_ms_median": p["step_s_median"] * ms if p.get("step_s_median") is not None else None,
            "version": p["version"], "attempts": p["attempts"], "memcpy_ms": p["memcpy_s"] * ms,
            "save_ms_median": p["save_s_median"] * ms, "ok": p["ok"],
            # where the store's last restore went on this rank (the recovery's, unless it restored again)
            "restore_phases_ms": {k: v * ms for k, v in p.get("restore_phases", {}).items()},
            "marks": [(k, (t - t_kill) * ms) for k, t in p.get("marks", [])],
        })
    return per_rank


def _job_result(everyone: list[dict[str, Any]], t_kill: float, floor_s: float | None, ranks: int, processes: int,
               args: argparse.Namespace) -> dict[str, Any]:
    """One job's result from every working rank's figures (``_rank_figures``) and the victim's kill time;
    an ``error`` entry when some rank saw no recovery."""
    ms = 1e3
    rec = [p for p in everyone if p["recoveries"] and p.get("t_first_step") is not None]
    if len(rec) != len(everyone):
        return {"error": "some working ranks saw no recovery or no resumed step", "per_rank": everyone}
    per_rank = _per_rank_rows(rec, t_kill)
    lost_rows = [p for p in per_rank if p["role"] == "recovered"]
    lost = lost_rows[0] if lost_rows else None
    nbytes = everyone[0]["bytes"]
    memcpy_s = median([p["memcpy_s"] for p in everyone])
    result: dict[str, Any] = {
        "ranks": ranks, "spares": args.spares, "processes": processes, "backend": args.backend,
        "store": args.store, "mb": args.mb, "bytes_per_rank": nbytes, "every": args.every,
        "kill_step": args.kill_step, "steps": args.steps, "victim": args.victim,
        "version": per_rank[0]["version"], "steps_redone": args.kill_step - per_rank[0]["version"],
        "recoveries_max": max(p["recoveries"] for p in everyone),
        "attempts_max": max(p["attempts"] for p in per_rank),
        "all_ok": all(p["ok"] for p in per_rank), "replaced": lost is not None,
        "memcpy_ms_median": memcpy_s * ms, "memcpy_GBps": nbytes / memcpy_s / 1e9,
        "restore_floor_ms": floor_s * ms if floor_s is not None else None,
        "save_ms_median": median([p["save_ms_median"] for p in per_rank]),
    }
    for k in ("detect_ms", "revoke_shrink_ms", "substitution_ms", "restore_ms", "kill_to_resumed_ms"):
        xs = [p[k] for p in per_rank]
        result[k + "_median"] = median(xs)
        result[k + "_max"] = max(xs)
    survivors = [p["detect_ms"] for p in per_rank if p["role"] != "recovered"]
    result["detect_survivors_ms_max"] = max(survivors) if survivors else None
    result["detect_replacement_ms"] = lost["detect_ms"] if lost is not None else None
    result["goal"] = _job_goal(result)
    if lost is not None:
        result["restore_lost_ms"] = lost["restore_ms"]
        result["restore_lost_GBps"] = nbytes / (lost["restore_ms"] / ms) / 1e9 if lost["restore_ms"] > 0 else None
        result["restore_vs_memcpy"] = (result["restore_lost_GBps"] / result["memcpy_GBps"]
                                       if result["restore_lost_GBps"] else None)
    result["critical_path_ms"] = critical_path(per_rank, result["detect_survivors_ms_max"],
                                               result["kill_to_resumed_ms_max"])
    steps = [p["step_ms_median"] for p in per_rank if p.get("step_ms_median") is not None]
    result["step_ms_median"] = median(steps) if steps else None
    result["per_rank"] = per_rank
    return result


#: the driver's marks on the way from the survivors' detection to the resumed step, each with
#: the name of the stretch that ends at it (``planaria.recovery.driver.MARKS``)
PATH_MARKS = (("voted", "agreement on the old working communicator"), ("shrunk", "shrink of the world"),
              ("roles", "allgather of roles"), ("split", "split of the new working communicator"),
              ("restored", "restore"))


def critical_path(per_rank: list[dict[str, Any]], detect_ms: float | None,
                  resumed_ms: float) -> dict[str, float] | None:
    """Where the time from the survivors' last detection to the last rank's resumed step went:
    each stretch ends when the last working rank passed the mark that closes it, and the first
    resumed step ends the path (ms; None without marks or detection)."""
    if detect_ms is None:
        return None
    out: dict[str, float] = {}
    t = detect_ms
    for mark, name in PATH_MARKS:
        seen = [ms for p in per_rank for k, ms in p.get("marks", []) if k == mark]
        if not seen:
            continue
        last = max(seen)
        out[name] = max(0.0, last - t)
        t = max(t, last)
    out["first resumed step"] = max(0.0, resumed_ms - t)
    return out


def _restore_floor(comm: Any, res: Any, args: argparse.Namespace, nbytes: int) -> float | None:
    """The least a restore of the lost rank must take, measured here with the same bytes (median
    of 5, slowest side, after one untimed round): memory and XOR stores, one message of the state
    from a survivor to the rank that took the lost one's place, into a buffer it has touched
    before (a spare keeps its restore buffers warm); file store, reading the lost rank's newest checkpoint
    file into such a buffer (from the page cache, as the restore after this run's save does).
    Collective over ``comm``; the value on rank 0."""
    import numpy as np
    n = comm.size
    dst_rank = args.victim
    src_rank = (args.victim + 1) % n
    buf = np.ones(nbytes // 8)
    times = []
    path = None
    if args.store == "file":
        from planaria.checkpoint.file import rank_file_name, vdir_name
        kept = res.store.versions()      # the version restored may be deleted by now: the newest kept
        v = max(kept) if kept else None
        path = os.path.join(res.store.directory, vdir_name(v), rank_file_name(args.victim)) if v is not None else None
    for i in range(6):
        comm.Barrier()
        t0 = time.perf_counter()
        if path is not None:
            if comm.rank == dst_rank:
                with open(path, "rb", buffering=0) as fh:
                    fh.readinto(memoryview(buf).cast("B"))
        elif comm.rank == src_rank:
            comm.Send(buf, dest=dst_rank, tag=77)
        elif comm.rank == dst_rank:
            comm.Recv(buf, source=src_rank, tag=77)
        dt = comm.allreduce(time.perf_counter() - t0, op=max)
        if i:
            times.append(dt)
    return median(times)


def _job_goal(job: dict[str, Any]) -> dict[str, Any]:
    """One job against the goal: kill -> resumed step (slowest working rank) <= the survivors'
    detection + 10 ms + 1.25 x the restore floor; what lies above each part when missed."""
    floor = job.get("restore_floor_ms")
    det = job.get("detect_survivors_ms_max")
    km = job["kill_to_resumed_ms_max"]
    if floor is None or det is None:
        return {"met": None}
    limit = det + GOAL_SLACK_MS + GOAL_RESTORE_FACTOR * floor
    return {"kill_to_resumed_ms_max": km, "detect_ms": det, "restore_floor_ms": floor, "limit_ms": limit,
            "met": km <= limit, "over_ms": km - limit,
            # the parts of the time after the survivors' detection (maxima over ranks)
            "after_detect_ms": km - det, "revoke_shrink_ms": job["revoke_shrink_ms_max"],
            "substitution_ms": job["substitution_ms_max"], "restore_ms": job["restore_ms_max"],
            "restore_over_floor": job["restore_ms_max"] / floor if floor > 0 else None}


# --------------------------------------------------------------------------- driver (outside MPI)
LAUNCHERS = ("run", "mpiexec")
AGG_KEYS = ("restore_floor_ms", "detect_survivors_ms_max", "detect_replacement_ms", "detect_ms_median", "detect_ms_max", "revoke_shrink_ms_median", "revoke_shrink_ms_max",
            "substitution_ms_median", "substitution_ms_max", "restore_ms_median", "restore_ms_max",
            "restore_lost_ms", "kill_to_resumed_ms_median", "kill_to_resumed_ms_max",
            "restore_lost_GBps", "memcpy_GBps", "restore_vs_memcpy", "save_ms_median", "raw_revoke_shrink_ms_max")


def run(ranks: int = 8, spares: int = 1, mb: float = 2.0, store: str = "memory", repeat: int = 3,
        backend: str = "ulfm", every: int = 5, kill_step: int = 12, steps: int = 30, victim: int = 1,
        group_size: int = 4, timeout: float = 300.0, progress: Any = None,
        cold_spares: bool = False, launcher: str = "run", detection_paused: bool = False) -> dict[str, Any]:
    """Launch ``repeat`` jobs of ``ranks`` working ranks + ``spares`` spares; median over jobs of each per-job value."""
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, not {launcher!r}")
    if detection_paused and launcher != "run":
        raise ValueError("--detection-paused needs --launcher run (a bare mpiexec has no run-time detection)")
    if backend not in ("ulfm", "sim"):
        raise ValueError(f"backend must be ulfm or sim, not {backend!r}")
    if store not in STORES:
        raise ValueError(f"unknown store {store!r} (expected one of {', '.join(STORES)})")
    if ranks < 2:
        raise ValueError("the recovery benchmark needs >= 2 working ranks (the victim is not rank 0)")
    if spares < 1:
        raise ValueError("the recovery benchmark needs >= 1 spare to replace the victim")
    if not 0 < victim < ranks:
        raise ValueError(f"the victim must be a working rank other than 0 (1..{ranks - 1}), not {victim}")
    if mb <= 0:
        raise ValueError("--mb must be > 0")
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    if every < 1 or not every <= kill_step < steps:
        raise ValueError(f"need 1 <= every <= kill_step < steps (got every={every}, kill_step={kill_step}, "
                         f"steps={steps}): the kill must come after a checkpoint and before the end")
    args = ["--backend", backend, "--spares", str(spares), "--mb", f"{mb:g}", "--store", store,
            "--every", str(every), "--kill-step", str(kill_step), "--steps", str(steps),
            "--victim", str(victim), "--group-size", str(group_size)] + (["--cold-spares"] if cold_spares else []) + (["--detection-paused"] if detection_paused else [])
    # a failed job's MPI_Finalize can linger; planaria's finalize watchdog bounds it
    env = {PLANARIA_FINALIZE_TIMEOUT: "3"}
    load0 = loadavg()
    jobs: list[dict[str, Any]] = []
    cmd: list[str] = []
    for i in range(repeat):
        if progress:
            progress(f"recovery: {ranks}+{spares} processes, {mb:g} MB/rank, {store}, {backend}, "
                     f"job {i + 1}/{repeat}")
        got = launch(ranks + spares, MODULE, args, ft=(backend == "ulfm"), timeout=timeout, env=env,
                     under_run=(launcher == "run"), spares=spares)
        if "error" in got.result:
            raise BenchError(f"recovery job {i + 1}: {got.result['error']}\n"
                             f"{json.dumps(got.result.get('per_rank'))[:3000]}")
        job = dict(got.result)
        job["launch_s"] = got.wall_s
        jobs.append(job)
        cmd = got.cmd
    summary: dict[str, Any] = {}
    for k in AGG_KEYS:
        xs = [j[k] for j in jobs if j.get(k) is not None]
        summary[k] = median(xs) if xs else None
    summary["launch_s_median"] = median([j["launch_s"] for j in jobs])
    goals = [j.get("goal") or {} for j in jobs]
    goal = {"jobs_met": sum(1 for g in goals if g.get("met")), "jobs": len(goals),
            "limit_ms": [g.get("limit_ms") for g in goals],
            "kill_to_resumed_ms_max": [g.get("kill_to_resumed_ms_max") for g in goals],
            "met": all(g.get("met") for g in goals)}
    return {"benchmark": "recovery", "backend": backend, "ranks": ranks, "spares": spares,
            "processes": ranks + spares, "launcher": launcher, "store": store, "mb": mb, "warm_spares": not cold_spares, "detection_paused": detection_paused, "every": every, "kill_step": kill_step,
            "steps": steps, "victim": victim, "repeat": repeat, "cores": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d"), "loadavg_before": load0, "loadavg_after": loadavg(),
            "command": command_line(), "mpiexec": " ".join(cmd[:-2] + ["..."]) if cmd else "",
            "all_ok": all(j["all_ok"] for j in jobs), "replaced": all(j["replaced"] for j in jobs),
            "summary": summary, "goal": goal, "jobs": jobs}


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def table(result: dict[str, Any]) -> Any:
    from rich.table import Table
    s = result["summary"]
    t = Table(title=f"Recovery: {result['ranks']} working + {result['spares']} spare ({result['processes']} processes), "
                    f"{result['mb']:g} MB/rank, {result['store']} store, {result['backend']}, "
                    f"under {'planaria run' if result.get('launcher', 'run') == 'run' else 'mpiexec'}, "
                    f"{result['cores']} cores, {'warm' if result.get('warm_spares', True) else 'cold'} spares; "
                    f"load {result['loadavg_before'][0]:g}")
    cols = ("job", "detect (survivors)", "detect (spare)", "revoke+shrink", "ULFM revoke+shrink", "substitution",
            "restore", "restore floor", "kill->resumed", "goal limit", "")
    for col in cols:
        t.add_column(col, justify="right")
    for n, j in enumerate(result["jobs"], 1):
        g = j.get("goal") or {}
        verdict = "-" if g.get("met") is None else ("met" if g["met"] else f"missed by {g['over_ms']:.1f} ms")
        t.add_row(str(n), _ms(j.get("detect_survivors_ms_max")), _ms(j.get("detect_replacement_ms")),
                  _ms(j["revoke_shrink_ms_max"]), _ms((j.get("raw_ulfm") or {}).get("revoke_shrink_ms_max")),
                  _ms(j["substitution_ms_max"]), _ms(j["restore_ms_max"]),
                  _ms(j.get("restore_floor_ms")), _ms(j["kill_to_resumed_ms_max"]), _ms(g.get("limit_ms")), verdict)
    g = result["goal"]
    cap = [f"maxima over the working ranks; goal: kill->resumed <= survivors' detection + {GOAL_SLACK_MS:g} ms + "
           f"{GOAL_RESTORE_FACTOR:g} x restore floor, met in {g['jobs_met']} of {g['jobs']} job(s)"]
    if s.get("restore_lost_GBps") is not None:
        cap.append(f"replacement's restore {_ms(s['restore_lost_ms'])} (median over jobs), memcpy "
                   f"{s['memcpy_GBps']:.2f} GB/s")
    cap.append(f"checkpoint save {_ms(s['save_ms_median'])}; state bit-exact: {'yes' if result['all_ok'] else 'NO'}")
    for n, j in enumerate(result["jobs"], 1):
        path = j.get("critical_path_ms")
        if path:
            cap.append(f"job {n} after the survivors' detection (last rank at each mark): "
                       + ", ".join(f"{k} {v:.1f}" for k, v in path.items())
                       + f" ms (a step before the failure: {_ms(j.get('step_ms_median'))})")
    t.caption = "; ".join(cap)
    return t


def show(result: dict[str, Any], as_json: bool) -> None:
    """Print the result as JSON or as a table."""
    _launch.show(result, as_json, table, min_width=150)


# --------------------------------------------------------------------------- command


def command(
    ranks: int = typer.Option(8, "--ranks", help="Working ranks; logical rank --victim (1) is killed."),
    spares: int = typer.Option(1, "--spares", help="Spare processes on top of the working ranks."),
    mb: float = typer.Option(2.0, "--mb", help="State per working rank in MB."),
    store: str = typer.Option("memory", "--store", help="Checkpoint store: memory, xor or file."),
    repeat: int = typer.Option(3, "--repeat", help="Separate launches; the median over them is reported."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    every: int = typer.Option(5, "--every", help="Checkpoint interval in steps."),
    kill_step: int = typer.Option(12, "--kill-step", help="Step at whose start the victim dies."),
    steps: int = typer.Option(30, "--steps", help="Steps in the run."),
    victim: int = typer.Option(1, "--victim", help="Logical rank that dies (not 0)."),
    group_size: int = typer.Option(4, "--group-size", help="Ranks per XOR group (--store xor)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds allowed per launch."),
    cold_spares: bool = typer.Option(False, "--cold-spares",
                                     help="Spares do not fault in restore buffers while waiting (Resilient(warm_spares=False))."),
    launcher: str = typer.Option("run", "--launcher", help="run: under 'planaria run --spares' (spares wake on a "
                                 "message through the controller); mpiexec: a bare mpiexec (spares wake on the "
                                 "working ranks' datagrams, on this host)."),
    detection_paused: bool = typer.Option(False, "--detection-paused",
                                          help="Pause run-time detection in every rank right after pl.world() "
                                          "(what detection costs a recovery; --launcher run)."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result (every job, every rank) as JSON."),
) -> None:
    """Time from a working rank's death to the first resumed step under Resilient, and its parts,
    against the goal: survivors' detection + 10 ms + 1.25 x the restore floor measured in the job.

    Example: python -m benchmarks recovery --ranks 8 --spares 1 --mb 2 --store memory
    """

    def compute() -> dict[str, Any]:
        return run(ranks, spares, mb, store, repeat, backend, every, kill_step, steps, victim, group_size,
                   timeout=timeout, progress=_launch.progress_printer(json_out), cold_spares=cold_spares,
                   launcher=launcher, detection_paused=detection_paused)
    raise typer.Exit(_launch.run_and_show("recovery", compute, show, json_out))


def rank_entry(argv: list[str] | None = None) -> int:
    """One process of the job (``python -m benchmarks.recovery --rank ...``, started by the driver)."""
    p = _launch.rank_parser("benchmarks.recovery")
    p.add_argument("--backend", default="ulfm", choices=["ulfm", "sim"])
    p.add_argument("--spares", type=int, default=1)
    p.add_argument("--mb", type=float, default=2.0)
    p.add_argument("--store", default="memory", choices=list(STORES))
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--kill-step", type=int, default=12)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--victim", type=int, default=1)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--cold-spares", action="store_true")
    p.add_argument("--detection-paused", action="store_true")
    rank_main(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(rank_entry())
