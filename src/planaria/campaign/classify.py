"""Classifying a run from what it did: correct, documented exit, library crash, wrong, hung or unexplained.

The targets reduce each launched command to an :class:`Observation` (exit status, whether it
hit a time bound, whether the result it produced matches the expected one, the documented
stop it announced); :func:`classify` turns that into a class and a one-line reason. Pure
functions: nothing here launches anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field

CORRECT, DOCUMENTED, WRONG, HUNG, UNEXPLAINED = "correct", "documented exit", "wrong", "hung", "unexplained"
# A documented exit that only the MPI library's known crash explains (docs/recovery.md, "A limit of
# the MPI library"): surviving processes died inside Open MPI, so more processes ended than the
# plan killed. Kept apart from DOCUMENTED so the table shows how often the library failed.
LIBRARY = "library crash"
CLASSES = (CORRECT, DOCUMENTED, LIBRARY, WRONG, HUNG, UNEXPLAINED)
BAD = (WRONG, HUNG, UNEXPLAINED)
# when a run launches two commands, the worse class wins
_SEVERITY = {CORRECT: 0, DOCUMENTED: 1, LIBRARY: 2, UNEXPLAINED: 3, HUNG: 4, WRONG: 5}

EXIT_TIMEOUT = 124          # planaria run: --timeout exceeded
EXIT_STOPPED = 3            # demo, abft, and an uncaught SparesExhausted / Unrecoverable
SPARES_EXHAUSTED, UNRECOVERABLE, CANNOT_CORRECT = "spares exhausted", "unrecoverable", "cannot correct"


@dataclass
class Observation:
    """What one launched command did, as far as classification needs it."""

    code: int | None                  # exit status; None: the campaign killed it at its own bound
    result: str = "missing"           # "match", "differs" or "missing" (no result produced)
    stop: str | None = None           # documented stop announced: SPARES_EXHAUSTED, UNRECOVERABLE, CANNOT_CORRECT
    timed_out: bool = False           # the job reported its --timeout (exit 124, or job_exit 124)
    failures: int = 0                 # processes the plan may end
    spares: int | None = None         # spares of the job (None: the target has none)
    exhaust_stops: bool = True        # the job stops when spares run out (demo --when-exhausted stop)
    damaged: bool = False             # checkpoint files were damaged before this command
    crashed: int = 0                  # processes whose backtrace shows the MPI library's known crash
    notes: list[str] = field(default_factory=list)


def classify(obs: Observation) -> tuple[str, str]:
    """(class, reason) of one command."""
    note = ("; " + "; ".join(obs.notes)) if obs.notes else ""
    if obs.code is None:
        return HUNG, "did not end within the campaign's bound and was killed" + note
    if obs.timed_out or obs.code == EXIT_TIMEOUT:
        return HUNG, f"ran into --timeout (exit {obs.code})" + note
    if obs.result == "differs":
        return WRONG, f"result differs from the expected one (exit {obs.code})" + note
    if obs.code == 0:
        if obs.result == "match":
            return CORRECT, "exit 0, result as expected"
        return WRONG, "exit 0 without a result" + note
    if obs.code == EXIT_STOPPED and obs.stop is not None:
        doubt = _implausible(obs)
        if doubt and obs.crashed and not _implausible(obs, obs.crashed):
            return LIBRARY, (f"exit 3: {obs.stop} after {obs.crashed} process(es) crashed inside the MPI "
                             f"library ({doubt})")
        if doubt:
            return UNEXPLAINED, doubt + note
        return DOCUMENTED, f"exit 3: {obs.stop}"
    if obs.code == EXIT_STOPPED:
        return UNEXPLAINED, "exit 3 without a documented message" + note
    what = f"exit {obs.code}" + (", result as expected" if obs.result == "match" else "")
    return UNEXPLAINED, what + note


def _implausible(obs: Observation, extra: int = 0) -> str | None:
    """Why the documented stop cannot be what happened (None when it can), with ``extra`` unplanned ends."""
    failures = obs.failures + extra
    if obs.stop == SPARES_EXHAUSTED and obs.spares is not None:
        if not obs.exhaust_stops:
            return "spares exhausted, though the job was to continue on fewer ranks"
        if failures <= obs.spares:
            return f"spares exhausted after at most {failures} failure(s) with {obs.spares} spare(s)"
    if obs.stop == UNRECOVERABLE and failures < 2 and not obs.damaged:
        return f"unrecoverable after at most {failures} failure(s) and no damaged checkpoint"
    return None


def combine(verdicts: list[tuple[str, str]]) -> tuple[str, str]:
    """The verdict of a run made of several commands: the worst one, naming which command it was."""
    if not verdicts:
        return UNEXPLAINED, "nothing was run"
    k = max(range(len(verdicts)), key=lambda i: _SEVERITY[verdicts[i][0]])
    cls, why = verdicts[k]
    return (cls, why) if len(verdicts) == 1 else (cls, f"command {k + 1} of {len(verdicts)}: {why}")
