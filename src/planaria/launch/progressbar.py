"""The progress bar of ``planaria run``: the working rank furthest behind, its step out of the total
the program announced (``pl.step(i, total=n)``), its rate and the time left, on stderr.

Shown only when stderr is a terminal and the run is not ``--json``, from the first heartbeat that
carries a total on. While it is shown, the ranks' lines and the launcher's own that go to that
terminal (stderr, and stdout when it is a terminal too) are printed through the bar's console,
which puts them above the bar (``Output.above``), in batches every 0.1 s; stdout into a pipe or a
file gets them as before.
The bar is a watcher of the supervision loop: it reads the rank table twice a second under its lock
(``RankTable.progress``, no copy) and stops, showing the last state, when the supervision ends.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from planaria.launch.controller import Controller
    from planaria.launch.output import Output

EVERY = 0.5               # seconds between two looks at the rank table
HELD_MAX = 2000           # lines held for the terminal before they are printed without waiting


def wanted(json_mode: bool, stderr: Any = None) -> bool:
    """Whether ``planaria run`` shows the bar: stderr is a terminal and the output is not JSON."""
    err = sys.stderr if stderr is None else stderr
    try:
        return not json_mode and bool(err.isatty())
    except (AttributeError, ValueError):
        return False


def _eta(done: int, total: int, rate: float | None) -> str:
    if not isinstance(rate, (int, float)) or rate <= 0 or done >= total:
        return ""
    left = (total - done) / rate
    return f"about {left:.0f} s left" if left < 120 else f"about {left / 60:.0f} min left"


class ProgressBar:
    """A watcher of the supervision loop that shows the job's progress on stderr (never ends it)."""

    def __init__(self, controller: Controller, out: Output) -> None:
        self.controller, self.out = controller, out
        self._next = 0.0
        self._progress: Any = None
        self._task: Any = None
        self._console: Any = None
        self._stdout_tty = False
        self._held: list[str] = []            # lines for the terminal, printed above the bar in batches
        self._held_lock = threading.Lock()

    def check(self) -> None:
        """Print the lines held for the terminal; update the bar (started at the first total), at
        most every ``EVERY`` s. The job goes on."""
        self._flush()
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + EVERY
        self._show(self.controller.rank_table.progress())
        return None

    def _show(self, got: tuple[int, int, float | None] | None) -> None:
        if got is None:
            return
        done, total, rate = got
        if self._progress is None:
            self._start(total)
        speed = f"{rate:.3g} steps/s" if isinstance(rate, (int, float)) else ""
        self._progress.update(self._task, completed=done, total=total, rate=speed, eta=_eta(done, total, rate))

    def _start(self, total: int) -> None:
        """Show the bar; from now on the terminal's lines go through its console."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        self._console = Console(file=sys.stderr)
        try:
            self._stdout_tty = sys.stdout.isatty()
        except (AttributeError, ValueError):
            self._stdout_tty = False
        self._progress = Progress(TextColumn("slowest rank"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[eta]}"),
                                  console=self._console, refresh_per_second=4)
        self._task = self._progress.add_task("steps", total=total, rate="", eta="")
        self._progress.start()
        self.out.above = self._above

    def _above(self, line: str, dest: TextIO) -> bool:
        """Hold ``line`` for the bar's terminal (printed above it by the next ``check``, within
        0.1 s); False: it does not go there."""
        if dest is not sys.stderr and not (dest is sys.stdout and self._stdout_tty):
            return False
        with self._held_lock:
            self._held.append(line)
            full = len(self._held) >= HELD_MAX
        if full:
            self._flush()
        return True

    def _flush(self) -> None:
        """Print the held lines above the bar, all in one print: the console redraws the bar after
        each print (about 0.4 ms), so line by line it would slow down a program that prints much."""
        with self._held_lock:
            lines, self._held = self._held, []
        if lines and self._console is not None:
            from rich.text import Text
            self._console.print(Text.from_ansi("\n".join(lines)), soft_wrap=True)

    def close(self) -> None:
        """The last state, then the bar stops (it stays on the screen); the lines go straight again."""
        if self._progress is None:
            return
        try:
            self._show(self.controller.rank_table.progress())
        finally:
            self.out.above = None
            self._flush()
            self._progress.stop()
            self._progress = None
