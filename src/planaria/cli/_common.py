"""What the verb modules share with the command's assembly (``cli/main.py``): the typer app they
add their commands to, and a job run with its launch error told in one line."""
from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from planaria.launch.options import RunOptions

app = typer.Typer(
    name="planaria",
    help="Keep MPI jobs alive through process failures, inject failures, and explain failed or hung runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _group() -> None:
    # a callback keeps every verb a sub-command, also when only one verb group is loaded (cli/main.py)
    pass


def launch_job(opts: RunOptions) -> int:
    """``run_job(opts)``'s exit status; a launch error is told as ``PROG: MESSAGE`` and gives its status (2)."""
    # imported here, as every verb imports its work: ``planaria --help`` does not load the launcher
    from planaria.launch.errors import LaunchError
    from planaria.launch.options import say
    from planaria.launch.runner import run_job

    try:
        return run_job(opts)
    except LaunchError as exc:
        say(str(exc), opts.prog)
        return exc.exit_status
