"""Termination and hang detection ([Vlasenko 2022] §3): a counter token travels a ring of worker ranks.

A rank passes the token only when it has no work: no CF running and none ready. CFs waiting
for input DFs count as idle, so a program whose remaining CFs all wait for data stops too --
as *hung*. The counter is reset on a rank that had work since the token's last visit and
incremented on an idle one. The token also carries each rank's cumulative counts of work
messages sent and received, so a message still in flight blocks the decision. The holder decides
once the last N visits (one to every rank) found ranks that had no work since their previous
visit and the counts balance: N + 1 consecutive visits, the first of which may be to a rank that
had work. This is Safra's rule (EWD 998: "had work since the last visit" is the black colour,
the per-rank counts are the message counters), which needs one quiet round where waiting for two
(Mattern's four counters) would cost N more token hops at the end of every run. The paper's
ring, whose token carries no message counts, stops after 2 x N visits; ``rule="paper"`` keeps
that threshold (with the counts).
"""
from __future__ import annotations

from dataclasses import dataclass, field

RULES = ("safra", "paper")


@dataclass
class Token:
    """The ring token: idle-visit counter plus per-rank message counts and unfinished CFs."""

    count: int
    sent: list[int]
    recv: list[int]
    unfinished: list[int]
    rounds: int = 0

    @classmethod
    def start(cls, n: int) -> Token:
        return cls(0, [0] * n, [0] * n, [0] * n)


@dataclass
class RingMember:
    """One rank's side of the ring: remembers whether it had work since the token last left it."""

    me: int
    n: int
    active: bool = True          # had work since the last visit (start: yes)
    history: list[int] = field(default_factory=list)
    rule: str = "safra"          # "safra": decide after n + 1 visits; "paper": after 2 x n, as LuNA does

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"termination rule must be one of {', '.join(RULES)}, not {self.rule!r}")

    def touch(self) -> None:
        """Call when the rank had work (a CF became ready or ran, a work message arrived)."""
        self.active = True

    @property
    def decide_after(self) -> int:
        """Consecutive visits (counting one to a rank that had work) after which an idle, balanced ring decides."""
        return self.n + 1 if self.rule == "safra" else 2 * self.n

    def visit(self, tok: Token, sent: int, recv: int, unfinished: int) -> str | None:
        """Update the token on an idle rank; return None (pass it on), "finished" or "hung"."""
        if self.active:
            tok.count = 0
            self.active = False
        tok.count += 1
        tok.sent[self.me], tok.recv[self.me], tok.unfinished[self.me] = sent, recv, unfinished
        if self.me == 0:
            tok.rounds += 1
        if tok.count >= self.decide_after and sum(tok.sent) == sum(tok.recv):
            return "finished" if sum(tok.unfinished) == 0 else "hung"
        return None

    def next(self) -> int:
        return (self.me + 1) % self.n
