"""Command help is reflowed into whole paragraphs, so it wraps cleanly at any terminal width;
errors of the command-line parser are one line and exit 2, for every verb."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from planaria.cli.helptext import reflow


def test_prose_paragraphs_become_one_line_each():
    text = """First line
    goes on.

    Second paragraph
    in three
    lines.
    """
    assert reflow(text) == "First line goes on.\n\nSecond paragraph in three lines."


def test_indented_paragraphs_stay_as_written():
    text = "Examples:\n\n  planaria demo\n  planaria demo --json\n\nTail\ntext."
    assert reflow(text) == "Examples:\n\n  planaria demo\n  planaria demo --json\n\nTail text."


def test_every_registered_command_is_reflowed():
    from planaria.cli import main
    main._register()

    def walk(app, seen):
        for cmd in app.registered_commands:
            seen.append(cmd.help)
        for group in app.registered_groups:
            walk(group.typer_instance, seen)
        return seen

    helps = [h for h in walk(main.app, []) if h]
    assert len(helps) >= 20          # every verb (the benchmarks have their own command: python -m benchmarks)
    assert all(reflow(h) == h for h in helps)


def test_rendered_help_fills_narrow_lines():
    env = dict(os.environ, COLUMNS="60", TERM="dumb", NO_COLOR="1")
    out = subprocess.run([sys.executable, "-m", "planaria.cli.main", "demo", "--help"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [ln.strip() for ln in out.stdout.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("A failed rank"))
    end = next(i for i in range(start, len(lines)) if not lines[i])
    para = lines[start:end]
    assert len(para) >= 3
    # before reflowing, every 95-character source line wrapped into a full line and a short one
    assert all(len(ln) >= 45 for ln in para[:-1]), para


# --------------------------------------------------------------------------- parser errors in one line

def _leaf_paths() -> list[list[str]]:
    import typer

    from planaria.cli import main
    main._register()

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, [*path, name])
        else:
            yield path
    return list(walk(typer.main.get_command(main.app), []))


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``planaria ARGS`` through the console-script entry point, in this process."""
    from planaria.cli import main
    monkeypatch.setattr(sys, "argv", ["planaria", *args])
    with pytest.raises(SystemExit) as info:
        main.main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_every_verb_tells_an_unknown_option_in_one_line(monkeypatch, capsys):
    paths = _leaf_paths()
    assert len(paths) >= 20          # every verb (the benchmarks have their own command: python -m benchmarks)
    for path in paths:
        # run and fragments run pass unknown words on to the program: their -n comes first
        extra = ["-n", "1"] if path[-1] == "run" else []
        code, out, err = _main(monkeypatch, capsys, *path, *extra, "--no-such-option")
        where = "planaria " + " ".join(path)
        assert code == 2, (path, err)
        assert out == "" and err.count("\n") == 1, (path, err)
        assert err.startswith(f"{where}: no such option: --no-such-option") and f"'{where} --help'" in err, err


@pytest.mark.parametrize("args, line", [
    (["run"], "planaria run: missing option '-n' / '--np' (try 'planaria run --help')"),
    (["run", "-n", "x", "--", "true"], "planaria run: invalid value for '-n' / '--np': "),
    (["demo", "--steps"], "planaria demo: option '--steps' requires an argument (try 'planaria demo --help')"),
    (["demo", "--timeout", "soon"], "planaria demo: invalid value for '--timeout': "),
    (["diagnose", "--fanout", "1"], "planaria diagnose: invalid value for '--fanout': "),
    (["diagnose", "a", "b"], "planaria diagnose: got unexpected extra argument"),
    (["hosts", "up", "--names"], "planaria hosts up: option '--names' requires an argument"),
    (["no-such-verb"], "planaria: no such command 'no-such-verb' (try 'planaria --help')"),
    # the benchmarks are not part of the installed command (python -m benchmarks, from the source tree)
    (["bench", "start"], "planaria: no such command 'bench' (try 'planaria --help')"),
])
def test_parser_errors_are_one_line_exit_2(monkeypatch, capsys, args, line):
    code, out, err = _main(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(line), err


def test_help_still_renders(monkeypatch, capsys):
    code, out, err = _main(monkeypatch, capsys, "run", "--help")
    assert code == 0 and err == ""
    assert "Usage: planaria run" in out and "--timeout" in out and "planaria run -n 4 -- python app.py" in out
    code, out, err = _main(monkeypatch, capsys, "abft", "slope", "--help")
    assert code == 0 and "Usage: planaria abft slope" in out
    code, out, err = _main(monkeypatch, capsys, "hosts")           # a bare group shows its help
    assert code == 2 and "Usage: planaria hosts" in out + err and "up" in out + err


def test_flags_show_no_value_placeholder(monkeypatch, capsys):
    # a boolean flag takes no value: its help line is "--json", not "--json <bool>"
    for verb in (["run"], ["demo"], ["diagnose"], ["campaign"]):
        code, out, err = _main(monkeypatch, capsys, *verb, "--help")
        assert code == 0, (verb, err)
        assert "--json" in out or "--help" in out
        assert "<bool>" not in out, (verb, out)


@pytest.mark.timeout(60)
def test_a_verb_loads_only_its_group():
    # planaria run pays for no other verb group's imports; --help still lists every verb
    code = ("import sys\nfrom planaria.cli import main\nsys.argv = ['planaria', *sys.argv[1:]]\n"
            "try:\n    main.main()\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('planaria.cli.'))), file=sys.stderr)")
    env = dict(os.environ, COLUMNS="100", TERM="dumb", NO_COLOR="1")
    run = subprocess.run([sys.executable, "-c", code, "run", "--help"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.stderr.split() == ["planaria.cli._common", "planaria.cli.commands", "planaria.cli.helptext",
                                  "planaria.cli.main", "planaria.cli.run", "planaria.cli.runjob"], run.stderr
    assert "Usage: planaria run" in run.stdout
    every = subprocess.run([sys.executable, "-c", code, "--help"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert "planaria.cli.hosts" in every.stderr.split()
    assert all(verb in every.stdout for verb in ("demo", "checkpoints", "hosts", "fragments", "attach"))
