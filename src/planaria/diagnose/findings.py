"""What a diagnosis finds and how it reads: root causes, the report, and the phrases they are written in.

Shared by the offline analysis (``offline``), the stacks-only analysis (``stacksonly``) and the
source-line reading (``p2pline``): rank ranges, call sites, the innermost frame a user can act on.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TEXT_RANKS = 160   # characters of a rank-range string shown in the text report
TEXT_LINES = 12    # lines per list shown in the text report


# --------------------------------------------------------------------------- small helpers
def ranges(ranks: Any) -> str:
    """Sorted unique ranks as a range string: [0, 1, 2, 3, 5] -> "0-3,5"."""
    a = np.asarray(ranks, dtype=np.int64).ravel()
    if a.size > 1 and not np.all(a[1:] > a[:-1]):
        a = np.unique(a)
    if not a.size:
        return ""
    br = np.flatnonzero(np.diff(a) != 1)
    starts = np.concatenate(([a[0]], a[br + 1])).tolist()
    ends = np.concatenate((a[br], [a[-1]])).tolist()
    return ",".join(str(s) if s == e else f"{s}-{e}" for s, e in zip(starts, ends, strict=True))


def clip(text: str, n: int = TEXT_RANKS) -> str:
    return text if len(text) <= n else text[:n].rsplit(",", 1)[0] + ",..."


def short_site(site: str | None) -> str:
    """"path/to/solver.py:88 in f" -> "solver.py:88 in f"."""
    if not site:
        return "an unknown site"
    head, sep, tail = site.partition(" in ")
    return os.path.basename(head) + sep + tail


def rank_phrase(ranks: np.ndarray, one: str = "rank", many: str = "ranks") -> str:
    return f"{one} {int(ranks[0])}" if ranks.size == 1 else f"{many} {clip(ranges(ranks))}"


# planaria's own machinery (the frames a program's call passes through), the standard library,
# installed third-party packages: none is where a user can act on a hang
_MACHINERY = re.compile(r"/planaria/(?:comm|runtime|inject|localize|diagnose|launch|events)/")
_LIBRARY = re.compile(r"/lib/python\d+(?:\.\d+)?/|/(?:site|dist)-packages/")


def _frame_rank(path: str) -> int:
    """0: the user's own file; 1: planaria's application-level code (demo, ABFT, fragments, recovery);
    2: planaria's machinery, the standard library or a third-party package."""
    p = path.replace("\\", "/")
    if p.startswith("<") or _MACHINERY.search(p) or p.endswith((".pyx", ".pxi")):   # Cython: mpi4py's own
        return 2
    if "/planaria/" in p:
        return 1
    if _LIBRARY.search(p) or p.split("/")[-1] in ("threading.py", "socket.py", "selectors.py", "queue.py"):
        return 2
    return 0


SITE_RE = re.compile(r"^(.*):(\d+)(?: in (.*))?$")   # "path/x.py:12 in f" -> path, line, function


def ran_past(site: str | None, other: str | None) -> bool:
    """``site`` is a later line of the same function of the same file as ``other``: a rank at ``site``
    has run past the call at ``other`` (straight-line code; a loop's next iteration is not seen)."""
    a, b = SITE_RE.match(site or ""), SITE_RE.match(other or "")
    return bool(a and b and (a[1], a[3]) == (b[1], b[3]) and int(a[2]) > int(b[2]))


def frame_site(stack: list[Any]) -> str | None:
    """Site of the innermost frame a user can act on: in the user's own files, else in planaria's
    application-level code, else the innermost frame. A rank spinning in numpy's ``_sum`` is named
    at the program's line that called it, a rank hung in ``threading.wait`` at the line that waits."""
    if not stack:
        return None
    ranks = [_frame_rank(str(f[0])) for f in stack]
    best = min(ranks)
    f = stack[max(i for i, r in enumerate(ranks) if r == best)]
    return f"{f[0]}:{f[1]} in {f[2]}"


# --------------------------------------------------------------------------- report
@dataclass
class RootCause:
    """Ranks the hang comes from, why, and where."""

    kind: str                  # no-state | computing | blocked-outside-mpi | finished | any-source | unknown-wait
    #                            | self-wait | deadlock | stuck-transfer | stuck-collective | collective-mismatch
    #                            | injected (a hang planaria's --inject made)
    ranks: list[int]
    reason: str
    op: str | None = None
    comm: str | None = None
    site: str | None = None
    host: str | None = None
    waiters: int = 0           # ranks that wait on these, directly or transitively
    example: str = ""          # one sentence: who waits on it, where
    details: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ranks": ranges(self.ranks), "n_ranks": len(self.ranks),
                "rank_list": list(self.ranks), "reason": self.reason, "op": self.op, "comm": self.comm,
                "site": self.site, "host": self.host, "waiters": self.waiters, "example": self.example,
                "details": list(self.details)}


@dataclass
class Report:
    """Outcome of :func:`diagnose`: a verdict, root causes, who waits where, and the evidence behind it."""

    verdict: str
    job: str | None
    size: int
    answered: int
    missing: list[int]
    root_causes: list[RootCause]
    waiting: list[dict[str, Any]]
    evidence: list[str]
    computing: int = 0
    unmatched: list[dict[str, Any]] = field(default_factory=list)
    n_unmatched: int = 0
    seconds: float = 0.0
    wait_graph: dict[str, Any] | None = None     # as drawn (waitdraw.wait_graph_data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"verdict": self.verdict, "job": self.job, "size": self.size, "answered": self.answered,
                "missing": ranges(self.missing), "n_missing": len(self.missing),
                "computing": self.computing,
                "root_causes": [rc.to_dict() for rc in self.root_causes], "waiting": self.waiting,
                "unmatched": self.unmatched, "n_unmatched": self.n_unmatched, "evidence": list(self.evidence),
                "analysis_seconds": self.seconds,
                **({"wait_graph": self.wait_graph} if self.wait_graph is not None else {})}

    def to_text(self) -> str:
        """Human-readable report: verdict first, then root causes with one example each."""
        out = [f"job {self.job or '?'}: {self.size} ranks, {self.answered} answered, "
               f"{len(self.missing)} without state, {self.computing} not in MPI"]
        head = {"deadlock": "ranks wait on each other in a cycle",
                "dead-ranks": "ranks without state: dead or unreachable",
                "hang": "ranks are blocked in MPI waiting for others",
                "no-hang": "no hang found: no rank is waiting in MPI",
                "not-started": "no rank has started: the MPI launcher started none"}[self.verdict]
        out.append(f"verdict: {self.verdict} ({head})")
        if self.root_causes:
            out.append("")
            out.append("root causes:")
            for i, rc in enumerate(self.root_causes[:TEXT_LINES], 1):
                where = []
                if rc.host:
                    where.append(f"on {rc.host}")
                if rc.site:
                    where.append(f"at {short_site(rc.site)}")
                out.append(f"  {i}. {' '.join([rank_phrase(np.asarray(rc.ranks)), *where])}: {rc.reason}")
                if rc.waiters:
                    out.append(f"     {rc.waiters} rank{'s' if rc.waiters != 1 else ''} wait on "
                               f"{'it' if len(rc.ranks) == 1 else 'them'}")
                if rc.example:
                    out.append(f"     {rc.example}")
                for d in rc.details[:TEXT_LINES]:
                    out.append(f"     {d}")
                if len(rc.details) > TEXT_LINES:
                    out.append(f"     ... {len(rc.details) - TEXT_LINES} more")
            if len(self.root_causes) > TEXT_LINES:
                out.append(f"  ... {len(self.root_causes) - TEXT_LINES} more root causes (see --json)")
        if self.waiting:
            out.append("")
            out.append("waiting:")
            for w in self.waiting[:TEXT_LINES]:
                out.append("  " + w["text"])
            if len(self.waiting) > TEXT_LINES:
                out.append(f"  ... {len(self.waiting) - TEXT_LINES} more (see --json)")
        if self.evidence:
            out.append("")
            out.append("evidence:")
            for e in self.evidence[:3 * TEXT_LINES]:
                out.append("  - " + e)
            if len(self.evidence) > 3 * TEXT_LINES:
                out.append(f"  - ... {len(self.evidence) - 3 * TEXT_LINES} more (see --json)")
        return "\n".join(out)
