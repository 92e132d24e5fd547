"""What the verb modules share with the command's assembly (``cli/commands.py``): the typer app they
add their commands to, and a job run with its launch error told in one line."""
from __future__ import annotations

import typer

from planaria.cli.runjob import launch_job as launch_job  # the verbs that run a job share it

app = typer.Typer(
    name="planaria",
    help="Keep MPI jobs alive through process failures, inject failures, and explain failed or hung runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _group() -> None:
    # a callback keeps every verb a sub-command, also when only one verb group is loaded (cli/commands.py)
    pass
