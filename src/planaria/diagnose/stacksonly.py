"""Diagnosis of a program without planaria's runtime, from its ranks' sampled stacks alone.

A plain mpi4py program has no agent to report the MPI call it is in, its peer or its
communicator. The launcher still knows every rank's pid (``planaria.launch.rankfate``), so the
diagnosis reads each local rank's stacks from outside with ``py-spy --native``
(``planaria.diagnose.pyspy``): the Python frames, plus the MPI function the rank is in when
there is one (a frame ``("<MPI>", 0, "MPI_Barrier")``). As in STAT, ranks that are not in an MPI
call while others wait in one are the root causes. When every rank waits in MPI, the peer and tag
of a point-to-point wait are read from its source line (``planaria.diagnose.p2pline``): wait
cycles, sends to self and tag or source mismatches are named; communicators are not known, and
the report says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planaria.diagnose.findings import Report, RootCause, frame_site, ran_past, short_site
from planaria.diagnose import p2pline
from planaria.diagnose.pyspy import MPI_FILE, PLAIN_STATUS

#: MPI collectives a rank can block in (the names py-spy's native frames give)
COLLECTIVES = frozenset("MPI_" + n for n in (
    "Barrier", "Bcast", "Reduce", "Allreduce", "Gather", "Gatherv", "Allgather", "Allgatherv", "Scatter",
    "Scatterv", "Alltoall", "Alltoallv", "Alltoallw", "Scan", "Exscan", "Reduce_scatter", "Reduce_scatter_block"))

_FROM_LINES = "(from native stacks and source lines)"
_ADVICE = ("no rank uses planaria's runtime: the MPI call each rank is in comes from its native stack "
           "(py-spy --native); communicators are not known, peers and tags only where the call's source "
           "line gives them (with pl.world() the diagnosis follows waits to their peers)")


def applies(state: dict[str, Any]) -> bool:
    """True when the ranks that answered are all ranks of a program without the runtime (or finished)."""
    recs = list(state.get("ranks") or [])
    plain = [r for r in recs if r.get("status") == PLAIN_STATUS]
    others = [r for r in recs if r.get("status") not in (PLAIN_STATUS, "finished")]
    return bool(plain) and not others


def _main_stack(rec: dict[str, Any], stacks: list[Any]) -> list[Any] | None:
    """The stack of the thread that runs the program's ``<module>`` (else the first thread's)."""
    best = None
    for th in rec.get("threads") or []:
        sid = th.get("stack")
        if not isinstance(sid, int) or not 0 <= sid < len(stacks):
            continue
        st = [list(f) for f in stacks[sid]]
        if best is None:
            best = st
        if any(str(f[2]) == "<module>" for f in st):
            return st
    return best


def _ranges(ranks: list[int]) -> str:
    from planaria.diagnose.hangfilter import rank_ranges
    return rank_ranges(ranks)


def odd_collective(waiting: dict[tuple[str, str], list[int]], waiters: int) -> RootCause | None:
    """Every rank is in a collective but not all in the same call at the same line: the ranks of the
    (call, site) class strictly smaller than every other are the odd ones out (at the call they
    skipped, when they are at a later line of the same function). None on a tie or a single class.
    Without the runtime the communicators and roots are not known: the reason says so."""
    if len(waiting) < 2 or not all(call in COLLECTIVES for call, _ in waiting):
        return None
    classes = sorted(waiting.items(), key=lambda kv: (len(kv[1]), kv[1]))
    (call, site), ranks = classes[0]
    if len(classes[1][1]) == len(ranks):
        return None
    (mcall, msite), major = classes[-1]
    rs, ms = _ranges(ranks), _ranges(major)
    one = len(ranks) == 1
    note = "(from native stacks: communicators and roots are not known)"
    if ran_past(site, msite):
        return RootCause("collective-mismatch", ranks, f"rank(s) {rs} skipped {mcall} at {short_site(msite)}, which "
                         f"rank(s) {ms} wait in: {'it is' if one else 'they are'} already in {call} at "
                         f"{short_site(site)} {note}", op=mcall, site=msite, waiters=waiters)
    return RootCause("collective-mismatch", ranks, f"rank(s) {rs} called {call} at {short_site(site)} where rank(s) {ms} "
                     f"called {mcall} at {short_site(msite)} {note}", op=call, site=site, waiters=waiters)


@dataclass(frozen=True)
class _Placed:
    """Where each rank that was read is: in an MPI call, outside MPI, stopped, finished, or failed."""

    waiting: dict[tuple[str, str], list[int]]     # (MPI call, site) -> ranks in it
    where: dict[int, tuple[str, str]]             # rank -> (MPI call, site) it waits in
    outside: dict[str, list[int]]                 # site -> ranks not in an MPI call
    stopped: dict[str, list[int]]                 # site -> ranks whose process is stopped
    hosts: dict[int, str | None]
    finished: list[int]
    missing: list[int]                            # sorted: no state, or its program ended in a traceback


def _place(recs: list[dict[str, Any]], stacks: list[Any], missing: list[int], crashed: dict[str, Any]) -> _Placed:
    """Each record's rank placed by its main thread's stack (the MPI call is the innermost frame)."""
    placed = _Placed({}, {}, {}, {}, {}, [], list(missing))
    for rec in recs:
        r = int(rec["rank"])
        placed.hosts[r] = rec.get("host")
        if rec.get("status") == "finished" and rec.get("finalizing") and str(r) in crashed:
            placed.missing.append(r)    # its program ended in a traceback; the process waits at exit
            continue
        if rec.get("status") == "finished":
            placed.finished.append(r)
            continue
        st = _main_stack(rec, stacks) or []
        site = frame_site([f for f in st if f[0] != MPI_FILE]) or "?"
        if rec.get("stopped"):
            placed.stopped.setdefault(site, []).append(r)
            continue
        if st and st[-1][0] == MPI_FILE:
            placed.waiting.setdefault((str(st[-1][2]), site), []).append(r)
            placed.where[r] = (str(st[-1][2]), site)
        else:
            placed.outside.setdefault(site, []).append(r)
    placed.missing.sort()
    return placed


def diagnose(state: dict[str, Any]) -> Report:
    """Verdict and root causes of a plain program's hang from where its ranks' stacks are."""
    stacks = list(state.get("stacks") or [])
    recs = sorted(state.get("ranks") or [], key=lambda r: int(r["rank"]))
    missing = sorted(int(r) for r in state.get("missing") or [])
    size = int(state.get("size") or 0) or (max([int(r["rank"]) for r in recs] + missing, default=-1) + 1)
    crashed = (state.get("known") or {}).get("crash_sites") or {}
    pl = _place(recs, stacks, missing, crashed)
    n_wait = sum(len(v) for v in pl.waiting.values())
    causes, missing = _absent_causes(pl, crashed, n_wait)
    for site, ranks in sorted(pl.outside.items(), key=lambda kv: (len(kv[1]), kv[1])) if n_wait else ():
        causes.append(RootCause("computing", ranks, "not in an MPI call (computing, or blocked outside MPI)",
                                site=site, host=pl.hosts.get(ranks[0]), waiters=n_wait))
    alone = not (missing or pl.outside or pl.finished or pl.stopped)      # every rank that exists waits in MPI
    odd = odd_collective(pl.waiting, n_wait) if alone else None
    if odd is not None:
        causes.append(odd)
    read = p2pline.causes(pl.where, size) if alone else []      # causes read from the source lines
    if pl.finished and not (missing or pl.outside or pl.stopped):
        read = p2pline.finished(pl.finished, pl.where, size)
    for c in read:
        causes.append(RootCause(c["kind"], c["ranks"], c["reason"] + " " + _FROM_LINES, op=c["op"], site=c["site"],
                                host=pl.hosts.get(c["ranks"][0]), waiters=n_wait))
    calls = sorted(pl.waiting.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    wait_rows = [{"comm": None, "kind": None, "op": call, "seq": None, "waiting": len(ranks),
                  "ranks": _ranges(ranks), "site": site,
                  "text": f"{len(ranks)} rank(s) {_ranges(ranks)} in {call} at {short_site(site)}"}
                 for (call, site), ranks in calls]
    if n_wait:
        example = "; ".join(f"rank(s) {_ranges(ranks)} in {call} at {short_site(site)}" for (call, site), ranks in calls[:3])
        for rc in causes:
            rc.example = f"waiting in MPI: {example}"
    evidence = _evidence(pl, missing, n_wait, len(recs), odd is not None, bool(read))
    verdict = ("deadlock" if any(c.kind == "deadlock" for c in causes) else "hang" if n_wait
               else "dead-ranks" if missing else "no-hang")
    return Report(verdict=verdict, job=state.get("job"), size=size, answered=len(recs), missing=missing,
                  root_causes=causes, waiting=wait_rows, evidence=evidence,
                  computing=sum(len(v) for v in pl.outside.values()))


def _absent_causes(pl: _Placed, crashed: dict[str, Any], n_wait: int) -> tuple[list[RootCause], list[int]]:
    """Causes of the stopped ranks, the ranks whose traceback said where they failed and the ranks
    without state; and the ranks still without state (the failed ones are named on their own)."""
    causes: list[RootCause] = []
    for site, ranks in sorted(pl.stopped.items(), key=lambda kv: kv[1]):
        causes.append(RootCause("no-state", ranks, "stopped (SIGSTOP or a debugger): alive but not running",
                                site=site, host=pl.hosts.get(ranks[0]), waiters=n_wait))
    for r in [r for r in pl.missing if str(r) in crashed]:      # its own traceback said where it failed
        c = crashed[str(r)]
        causes.append(RootCause("no-state", [r], f"failed: {c.get('error')} (its Python traceback); its process "
                                "no longer answers", site=c.get("site"), waiters=n_wait))
    missing = [r for r in pl.missing if str(r) not in crashed]
    if missing:
        causes.append(RootCause("no-state", missing, "have no state: their stacks were not read (py-spy "
                                "failed, the process ended, it runs on another host, or more ranks than "
                                "one diagnosis reads)", waiters=n_wait))
    return causes, missing


def _evidence(pl: _Placed, missing: list[int], n_wait: int, n_read: int, odd: bool, read: bool) -> list[str]:
    """What the verdict rests on: how the causes were found, and the ranks outside MPI or ended."""
    evidence = [_ADVICE]
    if odd:
        evidence.append("every rank is in an MPI collective, not all in the same call at the same line: the "
                        "smallest group of ranks is the odd one out")
    elif read:
        evidence.append("the peers and tags of the point-to-point calls were read from each rank's source line "
                        "(and the file's sends that its peers have run past), taking the communicator to be "
                        "MPI.COMM_WORLD")
    elif n_wait and not pl.outside and not missing:
        evidence.append("every rank that answered is in an MPI call: a deadlock or a message that never "
                        "came; without the runtime the peers they wait on are not known")
    if not n_wait:
        evidence.append(f"no rank is in an MPI call ({n_read - len(pl.finished)} read, none in MPI)")
    if pl.finished:
        evidence.append(f"rank(s) {_ranges(pl.finished)} had already ended")
    return evidence
