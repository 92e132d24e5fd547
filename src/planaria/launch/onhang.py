"""The launcher's console side of run-time detection: one line per incident, and ``--on-hang``.

The ranks' localization services report incidents (one root cause each, [Gao 2024]) to the
controller while the job runs. ``IncidentWatch`` turns the feed into the lines ``planaria run``
prints at once, and decides what a hang or deadlock does to the job:

* ``report`` (default): the line only, and the job runs on (STAT's habit: say so, do not stop);
* ``diagnose``: the line, then one global diagnosis printed on the console, and the job runs on;
* ``abort``: the line, a diagnosis, then the job is stopped (exit 124, outcome ``hung``).

Pure: no I/O; the runner prints the lines and acts.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

MODES = ("report", "diagnose", "abort")
#: incident kinds that mean ranks wait for something that does not come
HANG_KINDS = frozenset({"deadlock", "not-sending", "collective-hang", "timeout", "tag-mismatch", "source-mismatch",
                        "injected", "network"})     # network: a message that never arrived, its receiver waits
#: incident kinds that say ranks are gone: a hang too when the ranks still run (stopped, cut off) or
#: have finished (their peers wait for them and get no error)
UNREACHABLE_KINDS = frozenset({"rank-failed", "unreachable"})
#: an incident is announced once its verdict does not wait for a probe any more
_SETTLED = frozenset({"confirmed", "detected"})
MAX_LINES = 20        # incident lines per job; then one line says where the rest is


class IncidentWatch:
    """Which incidents to announce (each once), and the ``--on-hang`` action to take (at most once)."""

    def __init__(self, mode: str, job: str) -> None:
        if mode not in MODES:
            raise ValueError(f"--on-hang must be one of {', '.join(MODES)} (got {mode!r})")
        self.mode, self.job = mode, job
        self._seen: set[tuple[Any, ...]] = set()
        self._lines = 0
        self._acted = False

    def take(self, incidents: Iterable[tuple[dict[str, Any], Any]],
             running: Callable[[list[int]], bool] | None = None,
             finished: Callable[[list[int]], str | None] | None = None) -> tuple[list[str], str | None]:
        """(lines to print, action) for newly reported ``(incident, responsible rank)`` pairs;
        action is None, ``"diagnose"`` or ``"abort"``. ``running(ranks)``: whether those ranks
        still run or have finished; a rank found unreachable (``UNREACHABLE_KINDS``) that does
        hangs the job (a failed one does not: the survivors get an error). ``finished(ranks)``:
        which of them finished, and where; said instead of "failed" for such ranks."""
        lines: list[str] = []
        action: str | None = None
        for inc, by in incidents:
            if inc.get("status") not in _SETTLED:
                continue
            kind = str(inc.get("kind"))
            key = (by, kind, tuple(inc.get("ranks") or ()))
            if key in self._seen:
                continue
            self._seen.add(key)
            self._lines += 1
            ranks = [int(r) for r in inc.get("ranks") or ()]
            verdict = inc.get("verdict")
            if kind in UNREACHABLE_KINDS and finished is not None:
                note = finished(ranks)
                if note:
                    verdict = f"{note}; its peers wait for it"
            if self._lines <= MAX_LINES:
                lines.append(f"incident ({kind}, found by rank {by}): {verdict}; "
                             f"full report: planaria diagnose {self.job}")
            elif self._lines == MAX_LINES + 1:
                lines.append(f"more incidents: planaria diagnose {self.job}")
            hang = kind in HANG_KINDS or (kind in UNREACHABLE_KINDS and running is not None
                                          and running(ranks))
            if hang and self.mode != "report" and not self._acted:
                self._acted = True
                action = self.mode
        return lines, action
