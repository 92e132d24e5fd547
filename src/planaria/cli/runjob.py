"""``planaria run``'s work, without typer: its options read into a job, the job run.

The typer command (``planaria.cli.run``) declares the options and their help, parses every
command line it is given and calls ``start``. A job's start should not wait for typer's import,
so ``planaria.cli.main`` first offers the command line to ``run_fast``: it takes the common form
(options of ``planaria run`` only, each spelled as typer reads it, then ``--`` and the program)
with the same results typer would give, and returns None for anything else (``--help``, an
unknown or repeated-flag option, a value typer would refuse, no ``--``): typer then parses that
command line and tells its errors as before. ``OPTIONS`` mirrors the typer declaration; a test
compares the two.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planaria.errors import PlanariaError

if TYPE_CHECKING:
    from planaria.launch.options import RunOptions

#: how a value option's text becomes its value (as typer's INT, FLOAT and STRING types read it)
INT, FLOAT, STR = int, float, str
#: the value of an on/off flag's first name, of its ``--no-`` name
ON, OFF = True, False

#: option names -> (parameter, kind, default); kind: a converter (INT, FLOAT, STR), ``list`` for a
#: repeatable text option, or ``bool`` for a flag. ``--plot`` is left to typer (its path type).
OPTIONS: dict[tuple[str, ...], tuple[str, Callable[[str], Any] | type, Any]] = {
    ("-n", "--np"): ("nprocs", INT, None),
    ("--spares",): ("spares", INT, 0),
    ("--backend",): ("backend", STR, "auto"),
    ("--inject",): ("inject", list, ()),
    ("--timeout",): ("timeout", FLOAT, 3600.0),
    ("--start-timeout",): ("start_timeout", FLOAT, 300.0),
    ("--hosts",): ("hosts", STR, None),
    ("--json",): ("json_out", bool, False),
    ("--mpiexec-arg",): ("mpiexec_arg", list, ()),
    ("--control",): ("control", STR, None),
    ("--restart",): ("restart", INT, 0),
    ("--reinject",): ("reinject", bool, False),
    ("--netns",): ("netns", STR, None),
    ("--detect", "--no-detect"): ("detect", bool, True),
    ("--detect-timeouts",): ("detect_timeouts", STR, None),
    ("--diagnose-on-timeout", "--no-diagnose-on-timeout"): ("diagnose_on_timeout", bool, True),
    ("--launcher-kills",): ("launcher_kills", bool, False),
    ("--rank-fates", "--no-rank-fates"): ("rank_fates", bool, True),
    ("--stdin",): ("stdin", STR, "0"),
    ("--on-hang",): ("on_hang", STR, "report"),
    ("--node-agents", "--no-node-agents"): ("node_agents", bool, None),
    ("--world",): ("world", bool, False),
    ("--default-handler",): ("default_handler", STR, "abort"),
}
_VALUE: dict[str, tuple[str, Callable[[str], Any] | type]] = {}    # a value option's name -> (parameter, kind)
_FLAG: dict[str, tuple[str, bool]] = {}                             # a flag's name -> (parameter, value)
for _names, (_param, _kind, _) in OPTIONS.items():
    for _i, _name in enumerate(_names):
        if _kind is bool:
            _FLAG[_name] = (_param, _i == 0)
        else:
            _VALUE[_name] = (_param, _kind)


class _NotMine(PlanariaError):
    """The command line is left to typer."""


def _split(word: str, rest: list[str]) -> tuple[str, str]:
    """An option word's name and value: ``--name=V``, ``--name V`` (taking V from ``rest``) or ``-nV``."""
    if word.startswith("--"):
        name, eq, value = word.partition("=")
        if eq:
            if name not in _VALUE:
                raise _NotMine
            return name, value
    elif word[:2] == "-n" and len(word) > 2:
        return "-n", word[2:]
    else:
        name = word
    if name not in _VALUE or not rest or rest[0] == "--":
        raise _NotMine
    return name, rest.pop(0)


def parse(args: list[str]) -> tuple[dict[str, Any], list[str]] | None:
    """``(params, program)`` as typer would give them for ``planaria run ARGS`` (``params`` keyed as
    ``ctx.params``, ``program`` the words after ``--``), or None when typer should read ``args``."""
    params: dict[str, Any] = {param: default for param, _, default in OPTIONS.values()}
    params["plot"] = None
    seen: set[str] = set()
    rest = list(args)
    try:
        while rest:
            word = rest.pop(0)
            if word == "--":
                break
            if word in _FLAG:
                param, value = _FLAG[word]
                if param in seen:
                    raise _NotMine
                seen.add(param)
                params[param] = value
                continue
            if not word.startswith("-"):
                raise _NotMine                 # a program without -- (typer reads options after it)
            name, text = _split(word, rest)
            param, kind = _VALUE[name]
            if kind is list:
                params[param] = (*params[param], text)
            else:
                params[param] = kind(text)
        else:
            raise _NotMine                     # no --
    except (_NotMine, ValueError):
        return None
    if params["nprocs"] is None or not rest or rest[0].startswith("-"):
        return None                            # typer tells what is missing or wrong
    return params, rest


def run_fast(args: list[str]) -> int | None:
    """Run ``planaria run ARGS`` when ``parse`` reads them: the job's exit status; else None."""
    parsed = parse(args)
    if parsed is None:
        return None
    return start(*parsed)


class _Usage(PlanariaError):
    """A usage error, already told in one line: the command's exit status is 2."""


def start(params: dict[str, Any], program: list[str]) -> int:
    """Run the job that typer's ``params`` (``ctx.params``) and the words after the options
    describe; its exit status (2 for a usage error, told in one line)."""
    from planaria.launch.options import RunOptions

    try:
        command = _command(list(program), bool(params["world"]))
        _check_plot(params["plot"])
    except _Usage:
        return 2
    p = params
    opts = RunOptions(command=command, nprocs=p["nprocs"], spares=p["spares"], backend=p["backend"],
                      inject=list(p["inject"]), timeout=p["timeout"], start_timeout=p["start_timeout"],
                      hosts=p["hosts"], json=p["json_out"],
                      mpiexec_args=list(p["mpiexec_arg"]), control=p["control"], restart=p["restart"],
                      reinject=p["reinject"], netns=p["netns"], detect=p["detect"],
                      detect_timeouts=p["detect_timeouts"], diagnose_on_timeout=p["diagnose_on_timeout"],
                      default_handler=p["default_handler"], rank_fates=p["rank_fates"],
                      launcher_kills=p["launcher_kills"], stdin=p["stdin"], on_hang=p["on_hang"],
                      node_agents=p["node_agents"])
    return _launch(opts, p["plot"])


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


def _command(command: list[str], world: bool) -> list[str]:
    """The program to run from the words after the options; ``_Usage`` on an unknown option."""
    if command and command[0] == "--":
        command = command[1:]
    if command and command[0].startswith("-"):
        # options unknown to run are passed on as the command's first words (they may follow --)
        print(f"planaria run: no such option: {command[0]} (the program to run goes after --; "
              f"try 'planaria run --help')", file=sys.stderr)
        raise _Usage
    return _as_world(command) if world else command


def _launch(opts: RunOptions, plot: Path | None) -> int:
    """Run the job, then draw its timeline when ``--plot`` asks; the job's exit status."""
    jobdirs: list[Path] = []
    opts.on_jobdir = jobdirs.append
    code = launch_job(opts)
    if plot is not None and jobdirs:
        _plot(jobdirs[0], plot)
    return code


def _check_plot(plot: Path | None) -> None:
    """``_Usage``, told in one line, before the run when ``--plot``'s file cannot be written or
    matplotlib is missing."""
    if plot is None:
        return
    from planaria.util.fsutil import output_problem
    from planaria.util.plotting import matplotlib_missing
    problem = output_problem(plot) or matplotlib_missing()
    if problem:
        print(f"planaria run: --plot {plot}: {problem}", file=sys.stderr)
        raise _Usage


def _plot(jobdir: Path, plot: Path) -> None:
    """The timeline of the job that just ended, written to ``plot`` (a line on stderr says where)."""
    from planaria.launch.timeline import job_timeline, plot_timeline
    try:
        plot_timeline(job_timeline(jobdir), plot)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"planaria run: --plot {plot}: {exc}", file=sys.stderr)
        return
    print(f"planaria run: timeline written to {plot}", file=sys.stderr)


def _as_world(command: list[str]) -> list[str]:
    """``python PROG ARGS`` -> ``python -m planaria PROG ARGS`` (``--world``); anything else is a usage error."""
    import os

    exe = os.path.basename(command[0]) if command else ""
    if not exe.startswith("python") or len(command) < 2 or command[1] in ("-c", "-"):
        print("planaria run: --world: the command must be 'python PROGRAM.py ...' or 'python -m MODULE ...'",
              file=sys.stderr)
        raise _Usage
    return [command[0], "-m", "planaria", *command[1:]]
