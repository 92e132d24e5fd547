"""Every ``python -m benchmarks ...`` command line in the docs parses with the benchmark's options.

The docs' reference page gives each figure's command; an option renamed or removed in a benchmark
must fail here, not in a user's shell.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from benchmarks.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: a command: its name, then its arguments up to a comment, a redirection or a pipe
_CMD = re.compile(r"python -m benchmarks ([a-z][a-z0-9-]*(?: [^#>|]*)?)")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_SPAN = re.compile(r"`([^`]+)`")


def _snippets(text: str) -> list[str]:
    """Code block lines, and inline code spans (joined when a paragraph wraps them)."""
    lines = [ln for block in _FENCE.findall(text) for ln in block.splitlines()]
    return lines + [" ".join(span.split()) for span in _SPAN.findall(_FENCE.sub("", text))]


def _commands() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for snippet in _snippets(doc.read_text()):
            for m in _CMD.finditer(snippet):
                text = m.group(1).strip()
                words = text.split()
                if any(c in text for c in "[…") or "..." in text or any(w.isupper() for w in words):
                    continue                       # a synopsis with placeholders, not a command
                found.append((f"{doc.relative_to(ROOT)}: {text}", text))
    return found


COMMANDS = _commands()


def test_the_docs_give_benchmark_commands() -> None:
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize("where,text", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_parses(where: str, text: str) -> None:
    group = typer.main.get_command(app)
    name, *args = shlex.split(text)
    cmd = group.get_command(group.make_context("benchmarks", [name]), name)  # type: ignore[attr-defined]  # a group
    assert cmd is not None, f"{where}: no benchmark named {name!r}"
    try:
        cmd.make_context(name, list(args))          # parses and converts every option, runs nothing
    except Exception as exc:                         # typer's click raises its own UsageError classes
        if not hasattr(exc, "format_message"):
            raise
        pytest.fail(f"{where}: {exc.format_message()}")
