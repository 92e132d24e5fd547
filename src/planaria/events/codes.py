"""Event codes: the PMIx fault and job events by their standard names and values, plus user codes.

Values follow the PMIx standard (``pmix_common.h``), so a record written by planaria reads the
same as one from a PMIx library. User codes lie below ``EXTERNAL_BASE`` and never collide with them.
"""
from __future__ import annotations

# process and node faults
PROC_ABORTED = -7                  # PMIX_ERR_PROC_ABORTED: a process aborted (merged "process failed")
PROC_REQUESTED_ABORT = -8          # PMIX_ERR_PROC_REQUESTED_ABORT: a process asked the job to abort
UNREACH = -25                      # PMIX_ERR_UNREACH: a message could not be delivered to a process
LOST_CONNECTION = -61              # PMIX_ERR_LOST_CONNECTION: a control connection went silent
JOB_END = -145                     # PMIX_EVENT_JOB_END: the job has ended
PROC_TERM_WO_SYNC = -200           # PMIX_ERR_PROC_TERM_WO_SYNC: terminated without finalize
NODE_DOWN = -231                   # PMIX_ERR_NODE_DOWN (PMIX_EVENT_NODE_DOWN): a host is gone
PROC_KILLED_BY_CMD = -400          # PMIX_ERR_PROC_KILLED_BY_CMD: killed by a job-control command
PROC_ABORTED_BY_SIG = -402         # PMIX_ERR_PROC_ABORTED_BY_SIG: killed by a signal

EXTERNAL_BASE = -3000              # PMIX_EXTERNAL_ERR_BASE: user codes are below this value

# planaria's own events, far below the user codes (user_code(n) takes n < PLANARIA_SPAN)
PLANARIA_SPAN = 1_000_000
PLANARIA_BASE = EXTERNAL_BASE - PLANARIA_SPAN
FAULT_LOCALIZED = PLANARIA_BASE - 1    # the run-time localization found a root cause (an incident)
RECOVERED = PLANARIA_BASE - 2          # Resilient completed a recovery on every working rank

NAMES: dict[int, str] = {
    PROC_ABORTED: "PMIX_ERR_PROC_ABORTED",
    PROC_REQUESTED_ABORT: "PMIX_ERR_PROC_REQUESTED_ABORT",
    UNREACH: "PMIX_ERR_UNREACH",
    LOST_CONNECTION: "PMIX_ERR_LOST_CONNECTION",
    JOB_END: "PMIX_EVENT_JOB_END",
    PROC_TERM_WO_SYNC: "PMIX_ERR_PROC_TERM_WO_SYNC",
    NODE_DOWN: "PMIX_ERR_NODE_DOWN",
    PROC_KILLED_BY_CMD: "PMIX_ERR_PROC_KILLED_BY_CMD",
    PROC_ABORTED_BY_SIG: "PMIX_ERR_PROC_ABORTED_BY_SIG",
    FAULT_LOCALIZED: "PLANARIA_EVENT_FAULT_LOCALIZED",
    RECOVERED: "PLANARIA_EVENT_RECOVERED",
}
_ALIASES = {"PMIX_EVENT_NODE_DOWN": NODE_DOWN}

# The merged "process failed" event carries one of these codes (the nature of the failure);
# a handler that wants every process failure registers for all of them (as ULFM does in Open MPI).
PROC_FAILED_CODES: tuple[int, ...] = (PROC_ABORTED, PROC_ABORTED_BY_SIG, PROC_TERM_WO_SYNC,
                                      PROC_KILLED_BY_CMD)
# Events after which the default handler aborts the job unless an earlier handler completed them.
FAULT_CODES: tuple[int, ...] = PROC_FAILED_CODES + (LOST_CONNECTION, NODE_DOWN, PROC_REQUESTED_ABORT)


def user_code(n: int) -> int:
    """The ``n``-th user event code (n >= 1): ``EXTERNAL_BASE - n``."""
    if not 1 <= n < PLANARIA_SPAN:
        raise ValueError(f"user code numbers are 1..{PLANARIA_SPAN - 1} (got {n})")
    return EXTERNAL_BASE - n


def is_user(code: int) -> bool:
    """True for codes reserved to users."""
    return PLANARIA_BASE < code < EXTERNAL_BASE


def name_of(code: int) -> str:
    """``PMIX_ERR_PROC_ABORTED`` for -7, ``USER+3`` for ``user_code(3)``, else the number."""
    if code in NAMES:
        return NAMES[code]
    if is_user(code):
        return f"USER+{EXTERNAL_BASE - code}"
    return str(code)


def parse_code(text: str | int) -> int:
    """A code from its PMIx name (with or without ``PMIX_``/``PMIX_ERR_``), ``USER+N``, or an integer.

    Raises ValueError with one line naming the known names.
    """
    if isinstance(text, int):
        return text
    s = text.strip()
    try:
        return int(s)
    except ValueError:
        pass
    up = s.upper().replace("-", "_")
    if up.startswith("USER+"):
        return user_code(int(up[5:]))
    by_name = {v: k for k, v in NAMES.items()} | _ALIASES
    for cand in (up, "PMIX_" + up, "PMIX_ERR_" + up, "PMIX_EVENT_" + up, "PLANARIA_EVENT_" + up):
        if cand in by_name:
            return by_name[cand]
    raise ValueError(f"unknown event code {text!r} (known: {', '.join(sorted(NAMES.values()))}, "
                     f"USER+N, or an integer)")
