"""``python -m benchmarks NAME [options]``: every benchmark of planaria under one command.

Each benchmark module declares its own options in its ``command`` function; this module only
registers them. Run from the repository root (the package is not installed).
"""
from __future__ import annotations

import importlib
from typing import Any

import typer

from planaria.cli.helptext import reflow_app

#: command name -> (module, one line for the list of commands)
COMMANDS: dict[str, tuple[str, str]] = {
    "failure": ("failure", "Failure detection and revoke+shrink time (MPI jobs)."),
    "overhead": ("overhead", "Per-call cost of planaria.Comm against raw mpi4py (MPI jobs)."),
    "checkpoint": ("checkpoint", "Checkpoint save/restore time per store and size, beside their floors (one MPI job)."),
    "recovery": ("recovery", "Time from a rank's death to the first resumed step under Resilient (MPI jobs)."),
    "events": ("events", "Event notify -> handler latency and throughput (jobs under planaria run)."),
    "controlplane": ("controlplane", "The controller serving many simulated ranks (no MPI)."),
    "start": ("start", "Job start: planaria run against mpiexec with raw mpi4py (MPI jobs)."),
    "detect": ("detect", "Cost of run-time error detection on NPB-like kernels (MPI jobs)."),
    "hangfilter": ("hangfilter", "Speed of the stack-sampling hang filter's grouping (in this process)."),
    "diagnose": ("diagnose", "Offline diagnosis time of synthetic hung jobs per size (in this process)."),
    "diagnose-accuracy": ("diagnose_accuracy", "Diagnosis accuracy on the corpus of faulty programs (jobs under planaria run)."),
    "localize": ("localize", "Fault localization scenarios: does planaria diagnose name the fault (jobs under planaria run)."),
    "fragments": ("fragments", "Fragmented programs: speedup with the balancer on and off, against Dask (MPI jobs)."),
    "abft": ("abft", "N-ABFT terrain analysis: cost and detection power (MPI jobs)."),
    "terrain": ("terrain", "Terrain kernels against their floors and gdaldem; N-ABFT speed-up (MPI jobs)."),
    "compat": ("compat", "mpi4py's own test suite on pl.world() (MPI jobs)."),
    "mpi4py-demos": ("mpi4py_demos", "mpi4py's own demos under planaria run --world (MPI jobs)."),
}

app = typer.Typer(
    name="benchmarks",
    help="Benchmarks of planaria. Run from the repository root: python -m benchmarks NAME --OPTION VALUE ...; "
         "python -m benchmarks NAME --help shows a benchmark's options and an example. "
         "Most launch mpiexec jobs on this machine; --json prints the full result for scripts.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)



def _register(name: str, module: str, short: str) -> None:
    mod: Any = importlib.import_module(f"benchmarks.{module}")
    app.command(name, short_help=short)(mod.command)


for _name, (_module, _short) in COMMANDS.items():
    _register(_name, _module, _short)
reflow_app(app)


def main() -> None:
    """Entry point of ``python -m benchmarks``."""
    app(prog_name="python -m benchmarks")
