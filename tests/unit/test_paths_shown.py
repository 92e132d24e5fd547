"""File names in the tools' output are normalized: a program started as ``python tag/../x.py`` is
reported at ``x.py``."""
from __future__ import annotations

import sys

import pytest

from planaria.comm import msglog
from planaria.diagnose import hangfilter
from planaria.util.paths import shown

PROG = "/work/app/tag/../prog.py"        # what co_filename holds for `python /work/app/tag/../prog.py`


def _frame_in(filename: str):  # type: ignore[no-untyped-def]
    """A live frame of code compiled as ``filename`` (line 3, function ``f``)."""
    space: dict = {"sys": sys}
    exec(compile("import sys\ndef f():\n    return sys._getframe()\n", filename, "exec"), space)
    return space["f"]()


@pytest.mark.parametrize("name, want", [(PROG, "/work/app/prog.py"), ("tag/../x.py", "x.py"),
                                        ("./a//b/./c.py", "a/b/c.py"), ("<string>", "<string>"), ("", "")])
def test_shown(name: str, want: str) -> None:
    assert shown(name) == want


def test_call_sites_and_stacks_name_the_normalized_file() -> None:
    frame = _frame_in(PROG)
    assert msglog.call_site(frame) == "/work/app/prog.py:3 in f"
    stack = hangfilter._walk(frame)
    assert stack[-1] == ("/work/app/prog.py", 3, "f")
    assert not any("/../" in f for f, _, _ in stack)
