"""``planaria bench ...``: failure detection/shrink time, the cost of ``planaria.Comm``, checkpoint
save/restore time, the time from a kill to the first resumed step, the cost of run-time error
detection on NPB-like kernels, the speed of the hang filter and of offline diagnosis, the
cost and detection power of N-ABFT terrain analysis, and the terrain kernels' speed."""
from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="bench",
    help="Benchmarks: failure detection and shrink time, the per-call cost of planaria.Comm "
         "against raw mpi4py, checkpoint save/restore time, recovery time under Resilient and the "
         "cost of run-time error detection on NPB-like kernels (these launch mpiexec jobs on this "
         "machine), and the speed of the hang filter and of offline diagnosis (in-process).",
    no_args_is_help=True,
    add_completion=False,
)


def _progress(as_json: bool):  # type: ignore[no-untyped-def]
    from planaria.bench._launch import progress_printer
    return progress_printer(as_json)


@app.command("failure")
def failure(
    ranks: str = typer.Option("4,8,16", "--ranks", help="Rank counts, comma-separated; rank N-1 is killed."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    repeat: int = typer.Option(3, "--repeat", help="Separate launches per rank count; the median is reported."),
    delay: float = typer.Option(0.2, "--delay", help="Seconds from the shared time origin to the kill."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result (every job, every survivor) as JSON."),
) -> None:
    """Time from a rank's death to the survivors' first FailureError, and revoke()+shrink() time.

    Example: planaria bench failure --ranks 4,8,16 --repeat 3
    """
    from planaria.bench import failure as fb
    from planaria.bench._launch import parse_ranks, run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return fb.run(parse_ranks(ranks), backend, repeat, delay, timeout, progress=_progress(json_out))
    raise typer.Exit(run_and_show("failure", compute, fb.show, json_out))


@app.command("overhead")
def overhead(
    ranks: str = typer.Option("2", "--ranks", help="Rank counts, comma-separated (the Sendrecv runs between ranks 0 and 1)."),
    backend: str = typer.Option("ulfm,sim", "--backend", help="Backends, comma-separated: ulfm, sim."),
    iters: int = typer.Option(1000, "--iters", help="8-byte Allreduce operations per timed block."),
    sr_iters: int = typer.Option(20, "--sr-iters", help="1 MiB operations per timed block (Sendrecv and the other calls)."),
    blocks: int = typer.Option(200, "--blocks", help="Timed blocks per variant (raw and planaria alternate)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    detect: bool = typer.Option(False, "--detect", help="Run with run-time error detection on (PLANARIA_DETECT=1), as under planaria run: what detection adds per call."),
    calls: str = typer.Option("", "--calls", help="The further 1 MiB calls to time, comma-separated, e.g. Scan,Ssend_Recv (default: all of them)."),
    only: str = typer.Option("", "--only", help="Cases to keep, comma-separated, e.g. pingpong_8B,Scan_1MiB (default: all)."),
) -> None:
    """Median per-call time of planaria.Comm vs the raw mpi4py communicator (comm.mpi), and their ratio.

    Example: planaria bench overhead --ranks 2 --iters 1000
    """
    from planaria.bench import overhead as ob
    from planaria.bench._launch import parse_ranks, run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return ob.run(parse_ranks(ranks), [b for b in backend.split(",") if b], iters, sr_iters, blocks,
                        timeout, progress=_progress(json_out), detect=detect, calls=calls or None,
                        only=only or None)
    raise typer.Exit(run_and_show("overhead", compute, ob.show, json_out))


@app.command("checkpoint")
def checkpoint(
    ranks: int = typer.Option(8, "--ranks", help="Ranks in the job."),
    sizes: str = typer.Option("2,32,256", "--sizes", help="State size per rank in MB, comma-separated."),
    stores: str = typer.Option("memory,xor,file", "--stores", help="Stores, comma-separated: memory, xor, file."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    reps: int = typer.Option(3, "--reps", help="Timed rounds of saves and restores (and their floors) per store and size; medians."),
    warmup: int = typer.Option(2, "--warmup", help="Untimed first saves per store and size (first touch of new memory)."),
    timeout: float = typer.Option(3600.0, "--timeout", help="Seconds allowed for the job."),
    cold: bool = typer.Option(False, "--cold", help="Restore into new memory everywhere (no warm spare "
                              "buffers, survivors allocate); default: as under Resilient."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Checkpoint save, and restore of a rank that lost its state, per store and size, each next to its
    floor (the data movement the store's design requires, in plain MPI and os calls, same job).

    Example: planaria bench checkpoint --ranks 8 --sizes 2,32,256 --reps 5
    """
    from planaria.bench import checkpoint as cb
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        try:
            size_list = [float(x) for x in sizes.replace(" ", "").split(",") if x]
        except ValueError:
            raise ValueError(f"bad size list {sizes!r} (expected MB per rank, e.g. 2,32,256)") from None
        store_list = [s for s in stores.replace(" ", "").split(",") if s]
        from planaria.bench._launch import progress_printer
        return cb.run_checkpoint_bench(ranks, size_list, store_list, backend, reps=reps, warmup=warmup,
                                         timeout=timeout, cold=cold, progress=progress_printer(json_out))
    raise typer.Exit(run_and_show("checkpoint", compute, cb.show, json_out))


@app.command("events")
def events(
    ranks: int = typer.Option(8, "--ranks", help="Ranks in the job."),
    count: int = typer.Option(500, "--count", help="Paced job-range events through the controller."),
    pace: float = typer.Option(2.0, "--pace", help="Milliseconds between paced events."),
    burst: int = typer.Option(2000, "--burst", help="Events sent back to back for the throughput."),
    local: int = typer.Option(1000, "--local", help="In-process (proc_local) events."),
    repeat: int = typer.Option(1, "--repeat", help="Separate launches; the job with the median p50 is shown."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """notify -> handler latency (p50, p99) in process and through the controller, and events per second.

    Example: planaria bench events --ranks 8 --count 500 --burst 2000
    """
    from planaria.bench import events as eb
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return eb.run(ranks, count, pace, burst, local, repeat, timeout, progress=_progress(json_out))
    raise typer.Exit(run_and_show("events", compute, eb.show, json_out))


@app.command("recovery")
def recovery(
    ranks: int = typer.Option(8, "--ranks", help="Working ranks; logical rank 1 is killed."),
    spares: int = typer.Option(1, "--spares", help="Spare processes on top of the working ranks."),
    mb: float = typer.Option(2.0, "--mb", help="State per working rank in MB."),
    store: str = typer.Option("memory", "--store", help="Checkpoint store: memory, xor or file."),
    repeat: int = typer.Option(3, "--repeat", help="Separate launches; the median over them is reported."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    every: int = typer.Option(5, "--every", help="Checkpoint interval in steps."),
    kill_step: int = typer.Option(12, "--kill-step", help="Step at whose start the victim dies."),
    steps: int = typer.Option(30, "--steps", help="Steps in the run."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds allowed per launch."),
    cold_spares: bool = typer.Option(False, "--cold-spares",
                                     help="Spares do not fault in restore buffers while waiting (Resilient(warm_spares=False))."),
    launcher: str = typer.Option("run", "--launcher", help="run: under 'planaria run --spares' (spares wake on a "
                                 "message); mpiexec: a bare mpiexec (spares poll every 5 ms)."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result (every job, every rank) as JSON."),
) -> None:
    """Time from a working rank's death to the first resumed step under Resilient, and its parts,
    against the goal: survivors' detection + 10 ms + 1.25 x the restore floor measured in the job.

    Example: planaria bench recovery --ranks 8 --spares 1 --mb 2 --store memory
    """
    from planaria.bench import recovery as rb
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return rb.run(ranks, spares, mb, store, repeat, backend, every, kill_step, steps, timeout=timeout,
                        progress=_progress(json_out), cold_spares=cold_spares, launcher=launcher)
    raise typer.Exit(run_and_show("recovery", compute, rb.show, json_out))


@app.command("controlplane")
def controlplane(
    ranks: str = typer.Option("256,4096", "--ranks", help="Simulated rank counts, comma-separated (one job each)."),
    seconds: float = typer.Option(30.0, "--seconds", help="Steady window per job."),
    hb: float = typer.Option(0.5, "--hb", help="Heartbeat interval per rank (a rank's agent beats every 0.5 s)."),
    ps_every: float = typer.Option(1.0, "--ps-every", help="Seconds between ps requests during the window."),
    workers: int = typer.Option(2, "--workers", help="Processes that hold the simulated ranks' connections."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed for every rank's hello."),
    ranks_per_node: int = typer.Option(0, "--ranks-per-node", help="Ranks per real node agent (planaria run --node-agents); 0: every rank connects to the controller itself."),
    fanout: int = typer.Option(0, "--fanout", help="Node agents per branch of the routed tree (0: every node agent connects to the controller)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Control-plane scale: the real controller serving simulated ranks (agent-channel connections).

    Per job: the controller's CPU, the heartbeat round trip (p50/p99), ranks wrongly marked lost,
    the time of a ps request, and an event from a tool until the last rank has it.
    No MPI. Example: planaria bench controlplane --ranks 2000,8192 --seconds 60
    """
    from planaria.bench import controlplane as cp
    from planaria.bench._launch import run_and_show

    raise typer.Exit(run_and_show("controlplane", lambda: cp.run(ranks, seconds, hb, ps_every, workers, timeout,
                                                                   ranks_per_node, fanout),
                                  cp.show, json_out))


@app.command("start")
def start(
    ranks: int = typer.Option(16, "--ranks", help="Ranks per launch."),
    repeat: int = typer.Option(3, "--repeat", help="Launches of each launcher, alternating."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Job start: planaria run against mpiexec with raw mpi4py, the same program, side by side.

    Per launcher (medians): seconds from the command's start to the last rank holding its world
    communicator, the whole command, and each rank's CPU time by then; planaria's ratios.
    Example: planaria bench start --ranks 16 --repeat 3
    """
    from planaria.bench import start as sb
    from planaria.bench._launch import progress_printer, run_and_show

    raise typer.Exit(run_and_show("start", lambda: sb.run(ranks, repeat, timeout, progress_printer(json_out)),
                                  sb.show, json_out))


@app.command("hangfilter")
def hangfilter(
    threads: str = typer.Option("12779520", "--threads",
                                help="Thread counts, comma-separated (e.g. 399360,1597440,6389760,12779520)."),
    classes: str = typer.Option("128", "--classes", help="Numbers of hang classes M, comma-separated (e.g. 2,8,32,128)."),
    samples: int = typer.Option(4, "--samples", help="Sampling rounds s per thread."),
    repeat: int = typer.Option(5, "--repeat", help="Timed group() calls per row (median and min reported)."),
    warmup: int = typer.Option(1, "--warmup", help="Untimed group() calls per row before timing."),
    hung_fraction: float = typer.Option(1.0, "--hung-fraction", help="Fraction of threads hung in one of M classes; "
                                        "the rest change stack every round."),
    layout: str = typer.Option("rounds", "--layout", help="Samples layout: rounds (one array per round), F or C (2-D)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Time of the stack-sampling hang filter's grouping (stable threads -> classes) on synthetic samples.

    Runs in this process, no MPI. Example: planaria bench hangfilter --threads 399360,12779520 --classes 2,128
    """
    from planaria.bench import hangfilter as hb
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return hb.run(threads, samples, classes, repeat, hung_fraction, layout=layout, warmup=warmup,
                      progress=_progress(json_out))
    raise typer.Exit(run_and_show("hangfilter", compute, hb.show, json_out))


@app.command("detect")
def detect(
    kernels: str = typer.Option("cg,mg,ft,ep,is,halo", "--kernels", help="NPB-like kernels, comma-separated."),
    ranks: int = typer.Option(4, "--ranks", help="Ranks per job."),
    klass: str = typer.Option("W", "--class", help="Problem class: S (tests), W or A."),
    pairs: int | None = typer.Option(None, "--pairs", help="Pairs (detection off and on) per kernel: launches "
                              "(default 7; order flips every pair) or, with --within-job, blocks (default 200)."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result (every launch or block) as JSON."),
    within_job: bool = typer.Option(False, "--within-job", help="Compare inside one job per kernel: blocks of "
                                    "iterations with detection switched off and on in ABBA order (no launch-to-launch spread)."),
    block_s: float = typer.Option(0.25, "--block-s", help="Seconds per block with --within-job (about; set from a warm-up run)."),
    jobs: int = typer.Option(1, "--jobs", help="With --within-job: jobs per kernel, one after the other, pooled: "
                             "median of all pairs, two-stage bootstrap interval (jobs, then pairs); 'met' needs >= 2 jobs."),
    bind: str = typer.Option("none", "--bind-to", help="none: Open MPI's default (no binding once the ranks outnumber "
                             "the cores); core: pin every rank to a core, several per core when they outnumber them."),
    under_run: bool = typer.Option(False, "--under-run", help="With --within-job: run every job under 'planaria run' "
                                   "(controller and agents, as users run detection) instead of a bare mpiexec."),
) -> None:
    """Time of NPB-like kernels with run-time error detection on (PLANARIA_DETECT=1) vs off, and their ratio.

    Example: planaria bench detect --kernels cg,mg,ft,ep,is,halo --class W --pairs 7

    With --within-job each kernel's iterations are timed in blocks inside one job, planaria's
    detection paused (message log off, probe service blocked) for the 'off' blocks; the median
    on/off ratio comes with a bootstrap 95 % interval and a verdict (met / consistent / missed).
    --jobs J runs J such jobs per kernel and pools them, the job as the unit of the interval
    (the spread between jobs is larger than one job's interval shows).
    """
    from planaria.bench import detect as db
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return db.run(kernels, ranks, klass, pairs, backend, timeout, progress=_progress(json_out),
                      within=within_job, block_s=block_s, jobs=jobs, bind=bind, under_run=under_run)
    raise typer.Exit(run_and_show("detect", compute, db.show, json_out))


@app.command("diagnose")
def diagnose(
    hosts: str = typer.Option("171,683,2731,10923,32768", "--hosts",
                              help="Host counts, comma-separated (x --per-host processes each; one host is faulty)."),
    per_host: int = typer.Option(6, "--per-host", help="Processes per host."),
    repeat: int = typer.Option(3, "--repeat", help="Timed runs per size; the median is reported."),
    scenario: str = typer.Option("collective", "--scenario",
                                 help="collective (faulty host's ranks dead, everyone in Allreduce), p2p-chain, "
                                      "deadlock or spin."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Offline diagnosis time (read the state file + analyse) per job size, and whether it names the faulty host.

    No MPI job: synthetic state files of hung jobs are written to a temporary directory (not timed).
    Exit status 1 if any report names the wrong ranks.

    Example: planaria bench diagnose --hosts 171,2731,32768 --repeat 3
    """
    from planaria.bench import diagnose as db
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return db.run(db.parse_hosts(hosts), per_host, repeat, scenario, progress=_progress(json_out))
    raise typer.Exit(run_and_show("diagnose", compute, db.show, json_out))


@app.command("localize")
def localize(
    cases: str = typer.Option("killcoll,unmatched,spin,drop,slow,ioerr", "--cases",
                              help="Scenarios, comma-separated: killcoll, unmatched, spin, drop, slow, ioerr; "
                                   "also gil (a rank holding the GIL) and plain (a program without "
                                   "planaria's runtime)."),
    backend: str = typer.Option("ulfm", "--backend", help="ulfm (mpiexec --with-ft ulfm) or sim."),
    repeat: int = typer.Option(1, "--repeat", min=1, help="Runs per scenario."),
    timeout: float = typer.Option(90.0, "--timeout", help="Seconds allowed per job."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (with every report) as JSON."),
    detect_timeouts: str = typer.Option("p2p=1,coll=1.5,probe=1,slow=0.1", "--detect-timeouts",
                                        help="The jobs' detection thresholds (as planaria run --detect-timeouts)."),
) -> None:
    """Fault localization scenarios: does 'planaria diagnose' name the faulty ranks and call site, and how fast.

    Each scenario is a 4-rank job under 'planaria run' with one fault (a rank killed during a
    collective, an unmatched receive, an endless compute loop, a dropped message, a slow rank,
    repeated I/O errors on two ranks). Exit 1 when a report misses its fault.

    Example: planaria bench localize --cases spin,drop --repeat 3
    """
    from planaria.bench import localize as lb

    try:
        result = lb.run([c for c in cases.replace(" ", "").split(",") if c], backend=backend,
                        repeat=repeat, timeout=timeout, progress=_progress(json_out), detect=detect_timeouts)
    except ValueError as e:
        print(f"planaria bench localize: {e}", file=sys.stderr)
        raise typer.Exit(2)
    lb.show(result, json_out)
    raise typer.Exit(0 if result["ok"] else 1)


@app.command("fragments")
def fragments(
    workers: str = typer.Option("1,2,4,8", "--workers", help="Worker-rank counts, comma-separated (the balancer adds one rank)."),
    graphs: str = typer.Option("irregular,matmul", "--graphs", help="irregular (sleep-based skewed DAG), matmul (numpy blocks)."),
    modes: str = typer.Option("balancer,balancer-donor,static,dask", "--modes", help="balancer (all CFs created on worker 0, the paper's rule), balancer-donor (our extension: a CF moves when it ends sooner at the receiver, one queued per receiver), static (round-robin .at), dask (LocalCluster)."),
    repeat: int = typer.Option(2, "--repeat", help="Launches per cell; the median is reported."),
    tasks: int = typer.Option(96, "--tasks", help="Tasks of the irregular graph."),
    mean_ms: float = typer.Option(40.0, "--mean-ms", help="Mean task duration (sleep) of the irregular graph, ms."),
    sigma: float = typer.Option(1.0, "--sigma", help="Log-normal sigma of the durations (skew)."),
    layers: int = typer.Option(4, "--layers", help="Layers of the irregular graph (each task depends on 2 tasks of the layer before)."),
    seed: int = typer.Option(1, "--seed", help="Seed of the irregular graph's durations and edges."),
    priority: str = typer.Option("none", "--priority", help="none, or descendants: every task's priority (.priority() in the program, priority= in Dask's submit) is the number of tasks that depend on it."),
    nb: int = typer.Option(4, "--nb", help="Blocks per matrix side (matmul)."),
    bs: int = typer.Option(300, "--bs", help="Block size (matmul)."),
    jobs_left: int = typer.Option(2, "--jobs-left-threshold", help="Balancer JOBS_LEFT_THRESHOLD."),
    ratio: float = typer.Option(0.2, "--jobs-difference-ratio", help="Balancer JOBS_DIFFERENCE_RATIO (0..1)."),
    overhead_repeat: int = typer.Option(3, "--overhead-repeat", help="Trace on/off launch pairs for the tracing overhead (0: skip)."),
    timeout: float = typer.Option(180.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the full result as JSON."),
) -> None:
    """Speedup and efficiency (ideal makespan = max(work/P, critical path)) of fragmented programs, balancer on/off, vs Dask.

    Example: planaria bench fragments --workers 1,2,4,8 --repeat 2
    """
    from planaria.bench import fragments as fb
    from planaria.bench._launch import parse_counts, run_and_show

    def compute():  # type: ignore[no-untyped-def]
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"--jobs-difference-ratio must be in [0, 1], got {ratio}")
        return fb.run(parse_counts(workers, "worker", "1,2,4,8", minimum=1), [g for g in graphs.split(",") if g],
                      [m for m in modes.split(",") if m], repeat, tasks, layers, mean_ms, sigma, seed, nb, bs, jobs_left,
                      ratio, 4, overhead_repeat, timeout, progress=_progress(json_out), priority=priority)
    raise typer.Exit(run_and_show("fragments", compute, fb.show, json_out))


@app.command("abft")
def abft(
    rows: int = typer.Option(2000, "--rows", help="DEM rows (the paper: 16000)."),
    cols: int = typer.Option(1890, "--cols", help="DEM columns (the paper: 15120)."),
    workers: int = typer.Option(4, "--workers", help="Workers N (N+2 ranks per run)."),
    repeat: int = typer.Option(6, "--repeat", help="Repetitions, each one run per kernel and mode; medians and paired "
                               "ratios reported. Each repetition runs the modes in the next of their orders: a "
                               "multiple of the number of orders (2 for two modes, 6 for three) balances them."),
    kernels: str = typer.Option("slope,cutdepth", "--kernels", help="Kernels, comma-separated."),
    modes: str = typer.Option("plain,abft,duplicate", "--modes",
                              help="Modes, comma-separated: plain and at least one of abft, duplicate."),
    parts: str = typer.Option("overhead,faults,throughput", "--parts",
                              help="What to measure, comma-separated: overhead, faults, throughput."),
    trials: int = typer.Option(3000, "--trials", help="Fault-campaign trials (a third clean, covered, uncovered)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic DEMs and faults."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds allowed per run."),
    workdir: str = typer.Option(None, "--workdir", help="Keep the synthetic DEM here (reused when present)."),
    tmpfs: bool = typer.Option(False, "--tmpfs", help="Work directory (DEM, part files, output) in /dev/shm: no disk "
                               "writeback in either mode (nor in the baseline)."),
    per_job: int = typer.Option(0, "--per-job", help="0: one mpiexec per run (cold processes). K: jobs of K "
                                "repetitions in the same processes, each after a warm-up repetition not counted."),
    keep_heap: bool = typer.Option(False, "--keep-heap", help="With --per-job: malloc keeps freed memory, so later "
                                   "runs reuse pages already touched instead of faulting in fresh ones."),
    settle: float = typer.Option(1.0, "--settle", help="Pause between runs, after a sync (s): lets writeback "
                                 "finish; 0 on a tmpfs keeps memory freed by one run warm for the next."),
    combine: list[str] = typer.Option([], "--combine", help="Pool the overhead runs of earlier --json results of the "
                                      "same setup (repeatable); runs nothing."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (every run) as JSON."),
) -> None:
    """N-ABFT terrain analysis: wall and CPU time of plain / ABFT / duplicate runs with paired ratios and bootstrap
    intervals, detection of silent faults, kernel speed vs gdaldem.

    Example: planaria bench abft --rows 2000 --cols 1890 --repeat 6
    (the paper's size: --rows 16000 --cols 15120; start-up of each job is not timed)
    """
    from planaria.bench import abft as ab
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        if combine:
            return ab.combine(combine)
        return ab.run(rows, cols, workers, repeat, kernels, parts, trials, seed, timeout, workdir,
                      progress=_progress(json_out), modes=modes, per_job=per_job, tmpfs=tmpfs, keep_heap=keep_heap,
                      settle=settle)
    raise typer.Exit(run_and_show("abft", compute, ab.show, json_out))


@app.command("terrain")
def terrain(
    rows: int = typer.Option(16000, "--rows", help="DEM rows (the paper's size: 16000)."),
    cols: int = typer.Option(15120, "--cols", help="DEM columns (the paper's size: 15120)."),
    repeat: int = typer.Option(3, "--repeat", help="Timed runs of each kernel, and end-to-end runs of each side (medians)."),
    workers: str = typer.Option("1,2,4", "--workers", help="N-ABFT worker counts, comma-separated (empty: no N-ABFT runs)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic DEM."),
    timeout: float = typer.Option(900.0, "--timeout", help="Seconds allowed per process or job."),
    workdir: str = typer.Option(None, "--workdir", help="Work directory (the DEM is kept and reused; default: a "
                                "temporary directory, removed)."),
    backend: str = typer.Option("ulfm", "--backend", help="Failure backend of the N-ABFT jobs: ulfm or sim."),
    reference: bool = typer.Option(True, "--reference/--no-reference", help="Also run the numpy reference kernels "
                                   "once each and check the outputs bit for bit."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (every run) as JSON."),
) -> None:
    """Terrain kernels against a memory floor and their goals, planaria terrain slope against gdaldem slope end
    to end, and N-ABFT's speed-up over the one-process kernel per N.

    Kernel goals: slope >= 150 and cut depth >= 100 M cells/s on one core; end to end <= 0.8x gdaldem's time.
    The floor (a numpy pass reading one float32 raster and writing another) and the load average are measured
    in the same run. Run it alone on the machine.

    Example: planaria bench terrain --rows 16000 --cols 15120 --repeat 3 --workers 1,2,4
    """
    from planaria.bench import terrain as tb
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return tb.run(rows, cols, repeat, workers, seed, timeout, workdir, backend, reference,
                      progress=_progress(json_out))
    raise typer.Exit(run_and_show("terrain", compute, tb.show, json_out))


@app.command("diagnose-accuracy")
def diagnose_accuracy(
    cases: str = typer.Option("all", "--cases", help="Corpus cases, comma-separated (names in cases.toml), or all."),
    modes: str = typer.Option("ulfm,sim,plain", "--modes",
                              help="Modes, comma-separated: ulfm, sim (planaria's runtime on that backend), plain "
                                   "(the same program on MPI.COMM_WORLD without planaria); a case runs only in the "
                                   "modes that apply to it."),
    ranks: int | None = typer.Option(None, "--ranks", help="Ranks per job (at least each case's own n; default: the case's n)."),
    corpus: str | None = typer.Option(None, "--corpus", help="Corpus directory (default: tests/diagnosis_corpus of the source tree)."),
    suite: bool = typer.Option(False, "--suite", help="Only the cases marked suite = true (the regression tests)."),
    keep: str | None = typer.Option(None, "--keep", help="Keep every job directory under this directory."),
    json_out: bool = typer.Option(False, "--json", help="Print the result (every run, with what the report said) as JSON."),
) -> None:
    """Diagnosis accuracy on the corpus of faulty programs: is the first root cause (kind, ranks, file:line) right?

    Every case runs as a real 'planaria run --on-hang abort' job (fast detection thresholds, a hard
    --timeout), then 'planaria diagnose JOB --json'; per case and mode: right / wrong (what it said) /
    no answer, and the time from the fault to the first incident announcing the correct root cause.
    Exit 0 (whatever the accuracy), 2 for bad options.

    Example: planaria bench diagnose-accuracy --cases deadlock_pair,compute_loop --modes ulfm,plain
    """
    from pathlib import Path

    from planaria.bench import diagnose_accuracy as dab
    from planaria.bench._launch import run_and_show

    def compute():  # type: ignore[no-untyped-def]
        return dab.run(cases, modes, ranks, Path(corpus) if corpus else None, suite_only=suite,
                       keep=Path(keep) if keep else None, progress=_progress(json_out))
    raise typer.Exit(run_and_show("diagnose-accuracy", compute, dab.show, json_out))
