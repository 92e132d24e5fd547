"""The launcher's error: a problem that prevents launching the job."""
from __future__ import annotations

from planaria.errors import PlanariaError


class LaunchError(PlanariaError, RuntimeError):
    """A problem that prevents launching the job: the command says it in one line and exits 2."""

    exit_status = 2
