"""Fragmented programs on real ranks: placement, DFs fetched across ranks, hangs, the balancer, a killed rank,
a job ended by a signal while a CF spins, ranks idle while one CF runs, two runs at once, a steady run to watch.

    mpiexec -n 4 python fragments_prog.py MODE TRACE_DIR
"""
import os
import signal
import sys
import time

import planaria.fragments as fr

RESULTS = []


@fr.atomic
def put(x: fr.Name, v: int):
    x.set(v)


@fr.atomic
def square_plus(out: fr.Name, a: int, b: int):
    out.set(a * a + b)


@fr.atomic
def report(vals: list, where: list):
    import planaria as pl
    RESULTS.append(sum(vals))
    print(f"RESULT {sum(vals)} on {pl.world().rank} inputs from {sorted(set(where))}", flush=True)


@fr.atomic
def where_am_i(out: fr.Name):
    import planaria as pl
    out.set(pl.world().rank)


@fr.sub
def spread_main(k: int):
    n = fr.workers()
    a, b, w = fr.dfs("a b w")
    for i in range(k):
        put(a[i], i).at(i)                         # a[i] set on worker i % n
        square_plus(b[i], a[i], a[(i + 1) % k]).at(i + 1)   # read there and on the next worker
        where_am_i(w[i]).at(i + 2)
    report([b[i] for i in range(k)], [w[i] for i in range(k)]).at(n - 1)


@fr.sub
def hang_main(k: int):
    x, y = fr.dfs("x y")
    for i in range(k - 2):                         # x[k-2], x[k-1] are never set
        put(x[i], i).at(i)
    for i in range(k):
        square_plus(y[i], x[i], 1).at(i + 1)


@fr.atomic
def work(out: fr.Name, seconds: float):
    time.sleep(seconds)
    out.set(seconds)


@fr.sub
def skewed_main(k: int):
    r = fr.df("r")
    for i in range(k):                             # all created on worker 0; every 4th is long
        work(r[i], 0.2 if i % 4 == 0 else 0.05)


@fr.sub
def steady_main(k: int, seconds: float):
    r = fr.df("r")
    for i in range(k):                             # spread evenly: every rank busy for k / n * seconds
        work(r[i], seconds).at(i)


@fr.atomic
def die(out: fr.Name, v: int):
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)


@fr.sub
def kill_main(k: int):
    z = fr.df("z")
    for i in range(k):
        put(z[i], i).at(i)
    die(fr.df("never"), z[0]).at(1)


@fr.sub
def idle_main(seconds: float):
    work(fr.df("w"), seconds).at(0)                # every other rank has nothing to do meanwhile


@fr.atomic
def spin(out: fr.Name, v: int):
    import planaria as pl
    print(f"SPINNING on {pl.world().rank}", flush=True)
    while True:                                    # never returns: the job is ended from outside
        time.sleep(0.02)


@fr.sub
def spin_main(k: int):
    z, s, y = fr.dfs("z s y")
    for i in range(k):
        put(z[i], i).at(i)
    spin(s[0], z[0]).at(1)
    for i in range(k):                             # every one waits for s[0]
        square_plus(y[i], s[0], z[i]).at(i)


@fr.sub
def twice_main(k: int):
    x, y = fr.dfs("x y")
    put(x[0], 1).at(1)                             # assigned on two ranks; the home may be a third
    put(x[0], 2).at(2)
    for i in range(k):                             # work that would go on after the error
        square_plus(y[i], x[0], i).at(i)


if __name__ == "__main__":
    mode, trace_dir = sys.argv[1], (sys.argv[2] if sys.argv[2] != "-" else None)   # "-": $PLANARIA_JOB_DIR/trace
    import planaria as pl
    comm = pl.world()
    t = time.time()
    if mode == "spread":
        res = fr.run(spread_main, 12, trace_dir=trace_dir, threads=2, timeout=30)
    elif mode == "hang":
        res = fr.run(hang_main, 10, trace_dir=trace_dir, timeout=30)
    elif mode in ("balance", "nobalance"):
        res = fr.run(skewed_main, 24, trace_dir=trace_dir, threads=1, timeout=30,
                     balancer=fr.BalancerConfig(2, 0.2) if mode == "balance" else None)
    elif mode == "steady":                         # long enough to watch with planaria top
        res = fr.run(steady_main, 120, 0.1, trace_dir=trace_dir, threads=1, timeout=30)
    elif mode == "tiny":                           # over before the balancer's link probe is
        res = fr.run(skewed_main, 0, trace_dir=trace_dir, threads=1, timeout=30, balancer=fr.BalancerConfig(2, 0.2))
    elif mode == "kill":
        res = fr.run(kill_main, 6, trace_dir=trace_dir, flush_bytes=1, timeout=30)
    elif mode == "spin":                           # default flush threshold: only the run record is on disk before the signal
        res = fr.run(spin_main, 6, trace_dir=trace_dir, timeout=60)
    elif mode == "halves":                         # two runs at once, on disjoint communicators of one size
        half = comm.split(comm.rank % 2, comm.rank)
        res = fr.run(spread_main, 6, comm=half, trace_dir=os.path.join(trace_dir, str(comm.rank % 2)),
                     threads=2, timeout=30)
    elif mode == "twice":                          # a DF assigned twice: the run stops, fr.run raises ProgramError
        res = fr.run(twice_main, 6, trace_dir=trace_dir, timeout=30)
    elif mode == "idle":                           # the CPU a rank burns while it waits
        c0, w0 = time.process_time(), time.monotonic()
        res = fr.run(idle_main, 1.0, trace_dir=trace_dir, threads=1, timeout=30)
        print(f"CPU {comm.rank} {time.process_time() - c0:.4f} {time.monotonic() - w0:.3f}", flush=True)
    print(f"STATUS {comm.rank} {res.status} done={res.cfs_done} unfinished={res.unfinished} "
          f"moves={res.balancer_moves} local_done={res.local['done']} unmatched={res.local['unmatched']} "
          f"elapsed={time.time() - t:.2f}", flush=True)
