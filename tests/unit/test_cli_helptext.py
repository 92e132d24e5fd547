"""Command help is reflowed into whole paragraphs, so it wraps cleanly at any terminal width."""
from __future__ import annotations

import os
import subprocess
import sys

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
    assert len(helps) >= 25
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
