"""``planaria run`` without typer (``planaria.cli.runjob``): the command lines it reads give what
typer gives, the others are left to typer, and a job's launcher starts without typer or ZeroMQ."""
from __future__ import annotations

from typing import Any

import pytest
import typer

from planaria.cli import runjob
from tests.fresh import fresh_python


def _typer_run() -> Any:
    from planaria.cli import commands
    commands._register_for(["run"])
    return typer.main.get_command(commands.app).commands["run"]


def _by_typer(args: list[str]) -> tuple[dict[str, Any], list[str]] | str:
    """What typer's parser makes of ``planaria run ARGS``: (params, extra words), or its error's class."""
    import click

    try:
        ctx = _typer_run().make_context("run", list(args))
    except click.exceptions.ClickException as exc:      # typer's own copy of click has the same name
        return type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - any other parser exception, by name
        return type(exc).__name__
    return dict(ctx.params), list(ctx.args)


def test_the_option_table_mirrors_the_typer_command() -> None:
    mine = {names: spec for names, spec in runjob.OPTIONS.items()}
    for p in _typer_run().params:
        if p.name == "plot":           # left to typer
            continue
        names = (*p.opts, *p.secondary_opts)
        assert names in mine, names
        param, kind, default = mine.pop(names)
        assert param == p.name
        if p.multiple:
            assert kind is list and default == () and tuple(p.default) == ()
        elif getattr(p, "is_flag", False):
            assert kind is bool and default == p.default
        else:
            assert {"integer": runjob.INT, "int": runjob.INT, "float": runjob.FLOAT, "text": runjob.STR, "str": runjob.STR}[p.type.name] is kind
            assert default == p.default
    assert not mine, f"options typer does not declare: {list(mine)}"


READ_HERE = [
    ["-n", "4", "--", "python", "app.py", "--steps", "3"],
    ["-n4", "--", "python", "app.py"],
    ["--np=16", "--timeout", "60.5", "--", "python", "x.py"],
    ["-n", "4", "--spares", "1", "--inject", "kill:rank=2,iter=50", "--inject=hang:rank=1", "--", "python", "a"],
    ["-n", "2", "-n", "3", "--backend", "sim", "--json", "--no-detect", "--", "x"],
    ["-n", "2", "--mpiexec-arg", "--bind-to", "--mpiexec-arg=none", "--", "x", "-y"],
    ["-n", "2", "--hosts", "a:2,b:2", "--control", "tcp://127.0.0.1:*", "--restart", "1", "--reinject", "--", "x"],
    ["-n", "2", "--netns", "h1,h2", "--detect-timeouts", "p2p=1", "--no-diagnose-on-timeout", "--", "x"],
    ["-n", "2", "--launcher-kills", "--no-rank-fates", "--stdin", "none", "--on-hang", "abort", "--", "x"],
    ["-n", "2", "--node-agents", "--world", "--default-handler", "none", "--", "python", "a.py"],
    ["-n", "2", "--no-node-agents", "--rank-fates", "--detect", "--diagnose-on-timeout", "--", "x"],
    ["-n", "-3", "--timeout", "-inf", "--spares", " 2", "--", "x"],
]

LEFT_TO_TYPER = [
    [], ["--help"], ["-n", "2", "--help", "--", "x"], ["-n", "2"], ["-n", "2", "--"], ["--", "x"],
    ["-n", "2", "python", "x"],                   # no --: typer reads options after the program
    ["-n", "two", "--", "x"], ["-n", "2", "--timeout", "soon", "--", "x"], ["-n=2", "--", "x"],
    ["-n", "2", "--bogus", "--", "x"], ["-n", "2", "--json=1", "--", "x"], ["-n", "2", "--json", "--json", "--", "x"],
    ["-n", "2", "--plot", "t.png", "--", "x"], ["-n", "--", "x"], ["-n", "2", "--", "-x"], ["-n", "2", "--", "--", "x"],
    ["-n", "2", "--inject"], ["-x", "--", "x"],
]


@pytest.mark.parametrize("args", READ_HERE, ids=lambda a: " ".join(a))
def test_a_common_command_line_reads_as_typer_reads_it(args: list[str]) -> None:
    mine = runjob.parse(args)
    assert mine is not None
    params, program = mine
    assert _by_typer(args) == (params, program)


@pytest.mark.parametrize("args", LEFT_TO_TYPER, ids=lambda a: " ".join(a) or "(none)")
def test_anything_else_is_left_to_typer(args: list[str]) -> None:
    assert runjob.parse(args) is None


def test_the_launcher_starts_without_typer_or_zeromq() -> None:
    """What ``planaria run`` imports before it starts mpiexec: neither the CLI library nor ZeroMQ
    nor the event code (the controller loads them once mpiexec runs)."""
    code = (
        "import sys\n"
        "from planaria.cli import runjob\n"
        "assert runjob.parse(['-n', '2', '--', 'python', 'a.py']) is not None\n"
        "import planaria.launch.runner\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', 'rich', 'zmq', 'msgpack')\n"
        "             or m.startswith(('planaria.events', 'planaria.launch.controller')))\n"
        "print(' '.join(bad))\n"
    )
    assert fresh_python(code) == []


def test_the_controller_loads_without_dataclasses_or_openssl() -> None:
    """The controller loads while mpiexec starts the ranks, on the same cores: on one host it
    imports neither dataclasses (with inspect and ast, ~6 ms) nor hmac/hashlib (OpenSSL, ~3 ms)."""
    code = (
        "import sys\n"
        "import planaria.launch.controller\n"
        "print(' '.join(sorted(m for m in ('dataclasses', 'inspect', 'ast', 'hmac', 'hashlib', '_hashlib')\n"
        "                      if m in sys.modules)))\n"
    )
    assert fresh_python(code) == []
