"""Offline analysis of a state file ([Gao 2024] §2.3): names the ranks and call sites a hung job waits on.

A chain of pure steps, each taking the previous steps' frozen results and returning a new one:

1. ``prepare``: merge and sort the states by rank, classify every rank (collective wait, point-to-point
   wait, not in MPI, finished), and the count check: ranks without state are dead or unreachable,
   grouped by host;
2. ``match_collectives``: per (communicator, collective #seq), the ranks inside and the members that
   have not arrived;
3. ``wait_graph``: a wait-for graph over ranks (Recv/Send from/to peer p: waits on p; ANY_SOURCE:
   unknown) and collectives (waits on every member not yet arrived), each rank's chain followed to
   its end, wait cycles among ranks and among collectives;
4. ``root_causes``: ranks others (transitively) wait on that wait on nobody (no state, computing,
   blocked outside MPI), cycles (deadlock), collectives every member has entered that do not complete
   (suspect the network), ranks that disagree on the next collective;
5. ``render``: the verdict, who waits where, unmatched receives, the evidence; nobody waiting: no hang.

Scale: the steps work on numpy columns (planaria.diagnose.state.RankTable), never on per-rank Python
objects: chains are resolved by pointer jumping (log2 n vector passes), collective groups by one sorted
lookup of every (communicator, rank) counter; Python loops run only over groups, root causes and cycles.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from planaria.diagnose.causes import Causes, root_causes
from planaria.diagnose.collectives import Collectives, match_collectives
from planaria.diagnose.findings import Report, RootCause, frame_site, ran_past, ranges
from planaria.diagnose.prepare import Prepared, prepare
from planaria.diagnose.waitdraw import wait_graph_data
from planaria.diagnose.waitgraph import WaitGraph, wait_graph
from planaria.diagnose.waiting import unmatched_receives, waiting_summary

__all__ = ["VERDICTS", "Report", "RootCause", "diagnose", "frame_site", "ran_past", "ranges", "render"]

#: ``not-started``: no rank of the job reached planaria, so nothing of the program can be the cause
VERDICTS = ("deadlock", "dead-ranks", "hang", "no-hang", "not-started")


def diagnose(state: dict[str, Any]) -> Report:
    """Analyse a state (as read by read_state, or in memory with row-form records) and name the root causes."""
    t0 = time.perf_counter()
    prepared = prepare(state)
    coll = match_collectives(prepared)
    graph = wait_graph(prepared, coll)
    report = render(prepared, coll, graph, root_causes(prepared, coll, graph))
    return dataclasses.replace(report, seconds=time.perf_counter() - t0)


def render(p: Prepared, coll: Collectives, graph: WaitGraph, found: Causes) -> Report:
    """The report: verdict, root causes, who waits where, unmatched receives and every evidence line
    in the order the steps found them."""
    causes = list(found.causes)
    unmatched, n_unmatched, unmatched_evidence = unmatched_receives(p)
    verdict = ("deadlock" if any(x.kind == "deadlock" for x in causes) else
               "dead-ranks" if p.census.missing.size else
               "hang" if graph.waiting_ranks.size else
               "not-started" if p.size == 0 else "no-hang")
    idle = ([f"no rank is waiting in MPI ({p.n} answered, all computing)"] if verdict == "no-hang" else
            ["no rank has registered with the job: the MPI launcher has started none, or none has "
             "reached planaria (the launcher's own output, in the job's output.log, says why)"]
            if verdict == "not-started" else [])
    waiting, waiting_evidence = waiting_summary(p, coll)
    evidence = [*p.evidence, *p.census.evidence, *coll.evidence, *found.evidence, *unmatched_evidence, *idle,
                *waiting_evidence]
    roots = sorted({r for x in causes for r in x.ranks})
    return Report(verdict=verdict, job=p.state.get("job"), size=p.size, answered=p.n,
                  missing=p.census.missing.tolist(), root_causes=causes, waiting=waiting,
                  evidence=evidence, computing=int(p.computing.sum()), unmatched=unmatched,
                  n_unmatched=n_unmatched, wait_graph=wait_graph_data(p, coll, graph, roots))
