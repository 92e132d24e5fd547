"""What one rank knows about its job: one record per process, shared by the bootstrap (which fills
it) and the readers that must not import the bootstrap (the state snapshot)."""
from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False          # typing stays out of a rank's start (about 3 ms of CPU)
if TYPE_CHECKING:
    from typing import Any
    from planaria.comm.base import Comm


class Runtime:
    """What one rank knows about its job (one instance per process)."""

    def __init__(self) -> None:
        self.comm: Comm | None = None  # the world communicator, once world() made it
        self.backend = "?"
        self.agent: Any = None
        self.injector: Any = None
        self.step = -1
        self.total: int | None = None  # the step count the program announced (``step(i, total=n)``)
        # what a task runtime on this rank has done (the fragments executor): (done, queued, moved,
        # busy seconds, slots), read by the agent at most once a second for its heartbeat
        self.work: Callable[[], tuple[int, int, int, float, int]] | None = None
        self.finalized = False
        self.exit_code = 0
        self.exit_reason = ""          # why this rank ends with a non-zero status, told in its bye
        self.exit_site = ""            # where the program called sys.exit, told in its bye
        self.dead = False
        self.localizer: Any = None
        self.job_failures = False      # the controller knew of a failed rank when this one said bye


RT = Runtime()


def current_step() -> int | None:
    """The last value passed to ``planaria.step`` (None before the first)."""
    return None if RT.step < 0 else RT.step


def provide_work(fn: Callable[[], tuple[int, int, int, float, int]] | None) -> None:
    """Have the agent report ``fn()``: (tasks done, queued, moved away, busy seconds so far, slots),
    cheap to call; ``None`` stops it. A layer above the runtime (the fragments executor) says what it
    does this way, so ``planaria top`` shows it per rank."""
    RT.work = fn
