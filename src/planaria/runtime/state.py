"""What one rank knows about its job: one record per process, shared by the bootstrap (which fills
it) and the readers that must not import the bootstrap (the state snapshot)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planaria.comm.base import Comm


class Runtime:
    """What one rank knows about its job (one instance per process)."""

    def __init__(self) -> None:
        self.comm: Comm | None = None  # the world communicator, once world() made it
        self.backend = "?"
        self.agent: Any = None
        self.injector: Any = None
        self.step = -1
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
