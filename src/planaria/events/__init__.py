"""Fault events and notification, modeled on PMIx: codes, ranges, handler chains, caching, relay.

    import planaria.events as ev
    ev.register(ev.PROC_FAILED_CODES, on_failure, name="mine", first=True)
    ev.notify(ev.user_code(1), range="job", info={"phase": "io"})

See docs/events.md.
"""
from planaria.events.codes import (
    EXTERNAL_BASE,
    FAULT_CODES,
    FAULT_LOCALIZED,
    JOB_END,
    LOST_CONNECTION,
    NODE_DOWN,
    PROC_ABORTED,
    PROC_ABORTED_BY_SIG,
    PROC_FAILED_CODES,
    PROC_KILLED_BY_CMD,
    PROC_REQUESTED_ABORT,
    PROC_TERM_WO_SYNC,
    RECOVERED,
    UNREACH,
    name_of,
    parse_code,
    user_code,
)
from planaria.events.local import (
    DEFAULT_HANDLER,
    LOOKUP_WAIT,
    EventsUnavailable,
    NotPublished,
    default_action,
    deregister,
    handle_failures,
    log,
    lookup,
    lookup_value,
    notify,
    publish,
    register,
    registry,
    set_default_action,
)
from planaria.events.ranges import CUSTOM, GLOBAL, JOB, LOCAL, PROC_LOCAL, RM, SESSION, Range, parse_range
from planaria.events.registry import (
    COMPLETE,
    DEFERRED,
    NO_ACTION,
    PARTIAL,
    Event,
    RegistrationError,
    Registry,
    Result,
    Status,
)

__all__ = [
    "EXTERNAL_BASE", "FAULT_CODES", "FAULT_LOCALIZED", "JOB_END", "LOST_CONNECTION", "NODE_DOWN", "PROC_ABORTED",
    "PROC_ABORTED_BY_SIG", "PROC_FAILED_CODES", "PROC_KILLED_BY_CMD", "PROC_REQUESTED_ABORT",
    "PROC_TERM_WO_SYNC", "RECOVERED", "UNREACH", "name_of", "parse_code", "user_code",
    "DEFAULT_HANDLER", "EventsUnavailable", "LOOKUP_WAIT", "NotPublished", "default_action", "deregister",
    "handle_failures", "log", "lookup", "lookup_value", "notify",
    "publish", "register", "registry", "set_default_action",
    "CUSTOM", "GLOBAL", "JOB", "LOCAL", "PROC_LOCAL", "RM", "SESSION", "Range", "parse_range",
    "COMPLETE", "DEFERRED", "NO_ACTION", "PARTIAL", "Event", "RegistrationError", "Registry", "Result",
    "Status",
]
