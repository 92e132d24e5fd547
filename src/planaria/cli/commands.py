"""The ``planaria`` command through typer: one sub-module per verb group, assembled here.

``planaria.cli.main`` is the entry point; it takes the common ``planaria run`` command line
without typer (``planaria.cli.runjob``) and hands every other one to ``typer_main``."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import typer

from planaria.cli._common import app
from planaria.cli.helptext import reflow_app

__all__ = ["app", "typer_main", "usage_line"]


def _demo() -> None:
    from planaria.cli import demo    # adds its command to ``app`` on import
    del demo


def _run() -> None:
    from planaria.cli import run     # adds its command to ``app`` on import
    del run


def _diagnose() -> None:
    from planaria.cli import diagnose
    app.command("diagnose")(diagnose.diagnose)


def _hosts() -> None:
    from planaria.cli import hosts
    app.add_typer(hosts.app, name="hosts")


def _abft() -> None:
    from planaria.cli import abft
    app.add_typer(abft.app, name="abft")


def _terrain() -> None:
    from planaria.cli import terrain
    app.add_typer(terrain.app, name="terrain")


def _tools() -> None:
    from planaria.cli import tools
    tools.register(app)


def _top() -> None:
    from planaria.cli import top
    app.command("top")(top.top)


def _trace() -> None:
    from planaria.cli import trace
    app.add_typer(trace.app, name="trace")


def _fragments() -> None:
    from planaria.cli import fragments
    app.add_typer(fragments.app, name="fragments")


def _campaign() -> None:
    from planaria.cli import campaign
    app.command("campaign")(campaign.campaign)


def _checkpoints() -> None:
    from planaria.cli import checkpoints
    app.command("checkpoints")(checkpoints.checkpoints)


#: each verb group's loader, in the order ``planaria --help`` lists them (commands, then groups)
LOADERS: tuple[Callable[[], None], ...] = (_demo, _run, _diagnose, _hosts, _abft, _terrain, _tools, _top,
                                           _trace, _fragments, _campaign, _checkpoints)
#: the first word of a command line -> the loader of its verb group
VERBS: dict[str, Callable[[], None]] = {
    "demo": _demo, "run": _run, "diagnose": _diagnose, "hosts": _hosts, "abft": _abft, "terrain": _terrain,
    **dict.fromkeys(("ps", "ctl", "event", "publish", "lookup", "log", "attach"), _tools),
    "top": _top, "trace": _trace, "fragments": _fragments, "campaign": _campaign, "checkpoints": _checkpoints,
}
_loaded: set[Callable[[], None]] = set()


def _load(loader: Callable[[], None]) -> None:
    """Import one verb group and add its commands to ``app`` (once), their help reflowed."""
    if loader in _loaded:
        return
    _loaded.add(loader)
    loader()
    reflow_app(app)


def _register() -> None:
    """Import every verb module; each adds its commands to ``app`` (once, however often it is called)."""
    for loader in LOADERS:
        _load(loader)


def _register_for(args: list[str]) -> None:
    """Load only the verb group that ``args`` run, or every group (help, an unknown verb).

    Importing every group costs about 0.05 s of CPU per command, and ``planaria run`` would pay it
    at each job's start. Typer builds its command tree (on its own copy of click, whose group class
    is no click ``Group``) from the commands registered on ``app`` when ``app`` is called, so a
    lazy group class would depend on typer's internals; instead only the group the first word
    names is registered. Only that word decides: when it is a verb, the parser dispatches to that
    verb whatever follows, and the verb's help and errors do not list its siblings. Anything else
    (``--help``, no word, an unknown verb) loads every group, so the list of commands is complete.
    """
    loader = VERBS.get(args[0]) if args else None
    if loader is None:
        _register()
    else:
        _load(loader)


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


def typer_main(args: list[str]) -> None:
    """Run the command line ``args`` through typer and exit; usage errors exit 2 with one line.

    Typer's standalone mode prints the parser's errors (missing option, unknown option, a value
    of the wrong type) as a usage line, a hint and a framed box; here they are caught and told
    in one line instead, like the verbs' own checks. ``--help`` and a bare group (help instead
    of an error) render as before.
    """
    _register_for(args)
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
