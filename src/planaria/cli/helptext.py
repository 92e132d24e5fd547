"""Help texts as flowing paragraphs, so ``--help`` wraps cleanly at any terminal width.

Typer's rich help keeps the single line breaks of a docstring's later paragraphs; at a terminal
narrower than the source lines every line then wraps twice. The commands' docstrings stay
readable in the source, and their prose paragraphs are joined here before typer renders them.
"""
from __future__ import annotations

import inspect

import typer


def reflow(text: str) -> str:
    """``text`` with each prose paragraph on one line; paragraphs with an indented line (examples,
    command lines) are kept as written."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    out = []
    for para in paragraphs:
        lines = para.split("\n")
        if any(line[:1].isspace() for line in lines):
            out.append(para)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def reflow_app(app: typer.Typer) -> None:
    """Reflow the help of every command and group registered on ``app``, recursively."""
    for cmd in app.registered_commands:
        text = cmd.help if cmd.help is not None else inspect.getdoc(cmd.callback)
        if text:
            cmd.help = reflow(text)
    for group in app.registered_groups:
        if isinstance(group.help, str):          # typer's unset values are placeholders, not str
            group.help = reflow(group.help)
        if group.typer_instance is not None:
            reflow_app(group.typer_instance)
    if isinstance(app.info.help, str):
        app.info.help = reflow(app.info.help)
