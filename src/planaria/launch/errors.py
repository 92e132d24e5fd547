"""The launcher's error: a problem that prevents launching the job."""
from __future__ import annotations


class LaunchError(RuntimeError):
    """A problem that prevents launching the job: the command says it in one line and exits 2."""

    exit_status = 2
