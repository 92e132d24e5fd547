"""Timed kills of ``--inject`` sent by the launcher, for a program without planaria's runtime.

In a rank that uses the runtime, its injector applies the plan. A plain mpi4py program has no
injector, so its plan does nothing. With ``planaria run --launcher-kills``, the launcher sends the
faults that need nothing inside the process: kills at a time (``kill:rank=R,time=T``) and random
kills (``kill:mtbf=...``). It signals the pids the rank recorder gave
(``planaria.launch.rankfate``). Time counts from the moment every rank's recorder had started,
the plain program's counterpart of "every rank has called ``planaria.world()``". The launcher
cannot tell a plain program from one whose ranks have not reached ``planaria.world()`` yet, so
the user asks for this. The faults that act inside a rank (an iteration or a phase, hang, delay,
drop, bitflip, ioerror) need the runtime; they are named as not applied.
"""
from __future__ import annotations

import os
from pathlib import Path

from planaria.launch import rankfate


class PlainKills:
    """The launcher's share of an injection plan: its timed kills, by the ranks' recorded pids."""

    def __init__(self, spec: str, size: int, where: Path) -> None:
        from planaria.inject.plan import Kill, Plan, RandomKill  # the plan was validated at launch

        plan = Plan.parse(spec)
        self.size, self.where = size, where
        self.pending = sorted((t, r, why) for t, _it, r, why in plan.kill_schedule(size) if t is not None)
        self.unsupported = [f.to_spec() for f in plan.faults
                            if not isinstance(f, RandomKill)
                            and not (isinstance(f, Kill) and f.time is not None and f.phase is None)]
        self.t0: float | None = None
        self.missed: list[tuple[int, str]] = []  # (rank, why) of kills that could not be sent

    def check(self, now: float) -> list[tuple[int, str]]:
        """Send the kills that are due; return ``(rank, reason)`` for each one sent."""
        if not self.pending:
            return []
        if self.t0 is None:
            fates = rankfate.read_fates(self.where)
            if len(fates) < self.size:
                return []
            self.t0 = max(float(rec.get("start") or now) for rec in fates.values())
        due = [(t, r, why) for t, r, why in self.pending if self.t0 + t <= now]
        if not due:
            return []
        self.pending = [p for p in self.pending if p not in due]
        fates = rankfate.read_fates(self.where)
        sent = []
        for _t, r, why in due:
            rec = fates.get(r)
            if rec is not None and rec.get("host") != os.uname().nodename:
                self.missed.append((r, f"{why} not sent: the rank runs on {rec.get('host')}, and the launcher "
                                       "can signal only its own machine's processes"))
            elif rec is not None and rankfate.kill_command(rec):
                sent.append((r, f"{why} (sent by the launcher)"))
        return sent
