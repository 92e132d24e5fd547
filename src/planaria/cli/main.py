"""The ``planaria`` command's entry point.

``planaria run`` starts a job, and typer's import (about 50 ms of CPU) would delay every job's
start: a ``run`` command line that ``planaria.cli.runjob`` reads by itself is run without typer.
Every other command line (other verbs, ``--help``, anything unusual) goes through typer
(``planaria.cli.commands``), which also reports the errors.
"""
from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    """Console-script entry point; usage errors exit 2 with one line."""
    args = sys.argv[1:]
    if args[:1] == ["run"]:
        from planaria.cli.runjob import run_fast
        status = run_fast(args[1:])
        if status is not None:
            sys.exit(status)
    from planaria.cli.commands import typer_main
    typer_main(args)


def __getattr__(name: str) -> Any:
    """The typer assembly's names (``app``, ``usage_line``...), read from here as before."""
    if name.startswith("__"):     # the import system's questions (``__path__``...) load nothing
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from planaria.cli import commands
    try:
        return getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


if __name__ == "__main__":
    main()
