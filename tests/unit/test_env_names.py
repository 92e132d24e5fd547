"""Every ``PLANARIA_*`` environment variable is named in ``planaria.util.env`` and only there."""
from __future__ import annotations

import re
from pathlib import Path

from planaria.launch import rankfate
from planaria.util import env

SRC = Path(__file__).resolve().parents[2] / "src" / "planaria"
# a quoted name starting with PLANARIA_; PLANARIA_EVENT_* are event names (events/codes.py), not variables
_LITERAL = re.compile(r"""["']PLANARIA_(?!EVENT_)""")
# bench: moving out of src; the rank recorder runs with ``python -S -I`` and cannot import planaria
_EXEMPT = {"util/env.py", "launch/rankfate.py"}


def _constants() -> dict[str, object]:
    return {k: v for k, v in vars(env).items() if k.startswith("PLANARIA_")}


def test_no_planaria_literal_outside_env_module() -> None:
    found = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC).as_posix()
        if rel in _EXEMPT or rel.startswith("bench/"):
            continue
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if _LITERAL.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_every_constant_is_its_own_name() -> None:
    consts = _constants()
    assert len(consts) >= 32
    assert {k: v for k, v in consts.items() if k != v} == {}
    assert env.PREFIX == "PLANARIA_"


def test_rank_recorder_names_match() -> None:
    assert rankfate.FATES_ENV == env.PLANARIA_FATES_DIR
    assert rankfate.STDIN_ENV == env.PLANARIA_STDIN


def test_env_module_imports_nothing_from_planaria() -> None:
    text = (SRC / "util" / "env.py").read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import)\s+planaria", text, re.M)
