"""The ``planaria`` command: one sub-module per verb group, assembled here."""
from __future__ import annotations

import sys

import typer

from planaria.cli.helptext import reflow_app

app = typer.Typer(
    name="planaria",
    help="Keep MPI jobs alive through process failures, inject failures, and explain failed or hung runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    """Import verb modules; each adds its commands to ``app``."""
    from planaria.cli import demo, run    # these two add their commands to ``app`` on import
    from planaria.cli import abft, bench, diagnose, fragments, hosts, tools, trace

    del demo, run

    app.command("diagnose")(diagnose.diagnose)
    app.add_typer(hosts.app, name="hosts")
    app.add_typer(bench.app, name="bench")
    app.add_typer(abft.app, name="abft")
    tools.register(app)
    app.add_typer(trace.app, name="trace")
    app.add_typer(fragments.app, name="fragments")
    reflow_app(app)


def main() -> None:
    """Console-script entry point; usage errors exit 2 with one line."""
    _register()
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    from planaria.cli.main import main as _main  # the module's single copy, where verbs register
    _main()
