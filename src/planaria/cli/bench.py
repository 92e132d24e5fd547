"""``planaria bench failure|overhead``: measure failure detection/shrink time and the cost of ``planaria.Comm``."""
from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="bench",
    help="Benchmarks: failure detection and shrink time, and the per-call cost of planaria.Comm "
         "against raw mpi4py. Each launches mpiexec jobs on this machine.",
    no_args_is_help=True,
    add_completion=False,
)


def _progress(as_json: bool):  # type: ignore[no-untyped-def]
    if as_json:
        return None
    return lambda msg: print(msg, file=sys.stderr, flush=True)


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
    from planaria.bench._launch import BenchError, parse_ranks
    try:
        result = fb.run(parse_ranks(ranks), backend, repeat, delay, timeout, progress=_progress(json_out))
    except (BenchError, ValueError) as e:
        print(f"planaria bench failure: {e}", file=sys.stderr)
        raise typer.Exit(1) from None
    fb.show(result, json_out)


@app.command("overhead")
def overhead(
    ranks: str = typer.Option("2", "--ranks", help="Rank counts, comma-separated (the Sendrecv runs between ranks 0 and 1)."),
    backend: str = typer.Option("ulfm,sim", "--backend", help="Backends, comma-separated: ulfm, sim."),
    iters: int = typer.Option(1000, "--iters", help="8-byte Allreduce operations per timed block."),
    sr_iters: int = typer.Option(20, "--sr-iters", help="1 MiB Sendrecv operations per timed block."),
    blocks: int = typer.Option(200, "--blocks", help="Timed blocks per variant (raw and planaria alternate)."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds allowed per launch."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Median per-call time of planaria.Comm vs the raw mpi4py communicator (comm.mpi), and their ratio.

    Example: planaria bench overhead --ranks 2 --iters 1000
    """
    from planaria.bench import overhead as ob
    from planaria.bench._launch import BenchError, parse_ranks
    try:
        result = ob.run(parse_ranks(ranks), [b for b in backend.split(",") if b], iters, sr_iters, blocks,
                        timeout, progress=_progress(json_out))
    except (BenchError, ValueError) as e:
        print(f"planaria bench overhead: {e}", file=sys.stderr)
        raise typer.Exit(1) from None
    ob.show(result, json_out)
