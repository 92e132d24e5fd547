"""Whether a process still runs, as far as this user can tell (shared by the launcher's cleanups)."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool | None:
    """True if ``pid`` exists, False if it is gone, None when that cannot be told."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return None
    return True
