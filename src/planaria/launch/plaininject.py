"""Time-triggered kills of ``--inject`` for a program without planaria's runtime, sent by the launcher.

In a rank that uses the runtime, its injector applies the plan. A plain mpi4py program has no
injector, so its plan would do nothing. The launcher knows each rank's pid from the rank
recorder (``planaria.launch.rankfate``), so it can apply the faults that need nothing inside
the process: kills at a time (``kill:rank=R,time=T``) and random kills (``kill:mtbf=...``).
Time is counted from the moment every rank's recorder had started, the plain program's
counterpart of "every rank has called ``planaria.world()``". A program counts as plain once no
rank has said hello ``plain_after`` seconds after that moment, so a kill due earlier fires
then, and its reason says so. The faults that act inside a rank (an iteration or a phase, hang,
delay, drop, bitflip, ioerror) need the runtime; they are named once as not applied.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from planaria.launch import rankfate


class PlainKills:
    """The launcher's share of an injection plan, for the ranks of a job without the runtime."""

    def __init__(self, spec: str, size: int, where: Path, plain_after: float = 2.0) -> None:
        from planaria.inject.plan import Kill, Plan, RandomKill  # the plan was validated at launch

        plan = Plan.parse(spec)
        self.size, self.where, self.plain_after = size, where, plain_after
        self.pending = sorted((t, r, why) for t, _it, r, why in plan.kill_schedule(size) if t is not None)
        self.unsupported = [f.to_spec() for f in plan.faults
                            if not isinstance(f, RandomKill)
                            and not (isinstance(f, Kill) and f.time is not None and f.phase is None)]
        self.decided: bool | None = None        # None: not known yet; True: plain; False: runtime in use
        self.t0: float | None = None
        self.missed: list[tuple[int, str]] = []  # (rank, why) of kills that could not be sent

    def check(self, now: float, runtime_in_use: Callable[[], bool]) -> list[tuple[int, str]]:
        """Send the kills that are due; return ``(rank, reason)`` for each one sent."""
        if self.decided is False or (self.decided and not self.pending):
            return []
        if self.decided is None:
            if runtime_in_use():
                self.decided = False            # the ranks' own injectors apply the plan
                return []
            fates = rankfate.read_fates(self.where)
            if len(fates) < self.size:
                return []
            self.t0 = max(float(rec.get("start") or now) for rec in fates.values())
            if now - self.t0 < self.plain_after:
                return []
            self.decided = True
        assert self.t0 is not None
        due = [(t, r, why) for t, r, why in self.pending if self.t0 + t <= now]
        if not due:
            return []
        self.pending = [p for p in self.pending if p not in due]
        fates = rankfate.read_fates(self.where)
        sent = []
        for t, r, why in due:
            late = now - (self.t0 + t)
            reason = why + (f" (sent by the launcher {late:.2f} s late: the program was seen to run without "
                            "planaria's runtime only then)" if late > 0.5 else " (sent by the launcher)")
            rec = fates.get(r)
            if rec is not None and rec.get("host") != os.uname().nodename:
                self.missed.append((r, f"{why} not sent: the rank runs on {rec.get('host')}, and the launcher "
                                       "can signal only its own machine's processes"))
            elif rec is not None and rankfate.kill_command(rec):
                sent.append((r, reason))
        return sent
