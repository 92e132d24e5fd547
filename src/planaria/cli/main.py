"""The ``planaria`` command: one sub-module per verb group, assembled here."""
from __future__ import annotations

import sys
from typing import Any

import typer

from planaria.cli._common import app
from planaria.cli.helptext import reflow_app

__all__ = ["app", "main", "usage_line"]


_registered = False


def _register() -> None:
    """Import verb modules; each adds its commands to ``app`` (once, however often it is called)."""
    global _registered
    if _registered:
        return
    _registered = True
    from planaria.cli import demo, run    # these two add their commands to ``app`` on import
    from planaria.cli import abft, campaign, checkpoints, diagnose, fragments, hosts, terrain, tools, top, trace

    del demo, run

    app.command("diagnose")(diagnose.diagnose)
    app.add_typer(hosts.app, name="hosts")
    app.add_typer(abft.app, name="abft")
    app.add_typer(terrain.app, name="terrain")
    tools.register(app)
    app.command("top")(top.top)
    app.add_typer(trace.app, name="trace")
    app.add_typer(fragments.app, name="fragments")
    app.command("campaign")(campaign.campaign)
    app.command("checkpoints")(checkpoints.checkpoints)
    reflow_app(app)


# The parser's exceptions: click's, or those of the copy of click that newer typer versions carry:
# wherever typer.BadParameter comes from.
_errors = sys.modules[typer.BadParameter.__module__]
_NoArgsIsHelp = getattr(_errors, "NoArgsIsHelpError", ())      # click >= 8.2


def _command_path(args: list[str]) -> str:
    """``planaria VERB ...``: the (sub)command that ``args`` name, as far as they name one."""
    cmd = typer.main.get_command(app)
    path = ["planaria"]
    for word in args:
        sub = getattr(cmd, "commands", {}).get(word)
        if sub is None:
            break
        path.append(word)
        cmd = sub
    return " ".join(path)


def usage_line(exc: Any, args: list[str]) -> str:
    """One line for an error the command-line parser raised (a click exception, of click's or typer's
    copy of it): ``planaria VERB: MESSAGE (try ...)``."""
    ctx = getattr(exc, "ctx", None)        # some errors (an option without its value) carry none
    where = ctx.command_path if ctx is not None else _command_path(args)
    message = " ".join(exc.format_message().split()).rstrip(".")
    if message[:1].isupper() and message[1:2].islower():   # "Missing option" -> "missing option", as the verbs write
        message = message[0].lower() + message[1:]
    hint = f" (try '{where} --help')" if isinstance(exc, _errors.UsageError) else ""
    return f"{where}: {message}{hint}"


def main() -> None:
    """Console-script entry point; usage errors exit 2 with one line.

    Typer's standalone mode prints the parser's errors (missing option, unknown option, a value
    of the wrong type) as a usage line, a hint and a framed box; here they are caught and told
    in one line instead, like the verbs' own checks. ``--help`` and a bare group (help instead
    of an error) render as before.
    """
    _register()
    args = sys.argv[1:]
    try:
        rv = app(args=args, prog_name="planaria", standalone_mode=False)
    except _NoArgsIsHelp as exc:
        sys.exit(exc.exit_code)               # the help was printed while the error was made
    except _errors.ClickException as exc:
        print(usage_line(exc, args), file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("Aborted!", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    # without standalone mode a verb's ``typer.Exit(code)`` comes back as the return value
    sys.exit(rv if type(rv) is int else 0)


if __name__ == "__main__":
    main()
