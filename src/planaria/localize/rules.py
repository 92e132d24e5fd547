"""The rule base of a responsible rank: dedup, merge and correlate error records into incidents.

A responsible rank (see :mod:`planaria.localize.topology`) feeds every error record
it receives to :meth:`RuleBase.submit` and every probe result to
:meth:`RuleBase.probe_result`; :meth:`RuleBase.incidents` says what went wrong.
The module is pure (no MPI, no clock): every time is passed in, so the same inputs
always give the same answers.

Flow ([Gao 2024], section 2.2)
-----------------------------
1. A rank detects an error, pings the suspect, and sends an :class:`ErrorRecord` to
   the suspect's responsible rank.
2. ``submit(record)`` checks the probe log for a recent probe of the suspect and
   returns a :class:`Decision`:

   ``duplicate``
       the probe this record needs (or a stronger one) is in progress or finished
       less than ``dedup_window`` seconds ago: wait for its result
       (``decision.wait_for``) or use it (``decision.result``).
   ``merged``
       the record joined an existing incident (a merge rule fired, or it is a
       consequence of a failure already known); ``decision.probe`` is an
       escalation (a vote once many ranks time out on one rank) or None.
   ``new``
       a new incident; ``decision.probe`` is the probe to run, or None when
       nothing needs probing (the MPI library already said the peer failed, an
       I/O error...).

   Which probe: ``ping`` for a point-to-point timeout; ``status`` when the
   reporter's own ping got a reply (``evidence["ping"] is True``) or after a
   ping succeeded; ``vote`` when a ping got no reply, or when a merge rule with
   ``probe = "vote"`` fires (many ranks time out on one rank).
3. The caller runs the probe (a :class:`Probe`: kind, target, voters, query) and
   calls ``probe_result(target, kind, outcome)``, which turns the outcome into
   records (``ping-timeout``, ``network``, ``no-send``, ``peer-computing``,
   ``io-error``) and returns the follow-up probes to run (status after a ping
   reply, vote after a ping timeout, ping of the rank the target waits for).
4. ``incidents()`` gives the root incidents; ``Incident.root_cause()`` is the report.

Probe outcomes (what ``probe_result`` expects)
----------------------------------------------
``ping``:   ``{"ok": bool, "rtt": float}`` (rtt optional).
``status``: the ``reply_status`` payload (one short message), keys all optional:
            ``{"ok": False}`` = no reply; ``"op"``: what the target is blocked in, in
            the per-rank state record schema (``name, kind, comm, peer, tag, since,
            site``) or None when it is not inside MPI; ``"where"``: where it computes;
            ``"idle"``: seconds since it last entered MPI; ``"sent"``: True when it
            posted the send the probe's ``query`` asks about; ``"ioerrors"``: recent
            I/O errors; ``"host"``; ``"step"``.
``vote``:   ``{"votes": {voter: bool reachable}}`` or ``{"reachable": int, "unreachable": int}``.

Rules
-----
A rule is a small object with a ``name`` and a ``doc``.  There are two kinds.

Merge rules (:class:`MergeRule`) put several records into one incident.  A merge
rule maps each record to a *key* (``None``: the rule ignores the record); records
with the same key form clusters in time (consecutive records at most ``window``
seconds apart); ``decide(cluster, ctx)`` returns a :class:`Verdict` when the rule
*fires* on that cluster, and then all its records belong to one incident.
``decide`` must be monotone (if it fires on some records it fires on any superset):
then the incidents do not depend on the order the records arrived in.  A cluster is
tested on every insertion until it fires; a rule whose clusters can grow large
without firing should also override ``fires(cluster, added, ctx)`` with an
incremental test (it may keep what it needs in ``cluster.state``).

Correlation rules (:class:`CorrelationRule`) make a whole incident the consequence
of another: ``explains(root, other, ctx)``.  The consequence's records become
evidence of the root.  A rule with ``order = "rank"`` (the default) only lets an
incident explain one that ranks below it (higher priority, then earlier, then lower
ranks); ``"priority"`` needs a strictly higher priority; ``"none"`` (waits-for)
allows any direction, a cycle being cut at its highest-ranked incident.  An incident
is attached to the highest-ranked incident that some rule says explains it; the
first such rule in rule-base order is the one reported.

Default rules (``RuleBase.default()``), in order:

merge ``dedup``
    the same report (src, dst, type, comm, tag, op) within ``dedup_window``.
merge ``many-to-one`` (paper: many nodes time out on the same node)
    timeouts / ping failures / slow messages / failure reports about one rank from
    at least ``min_sources`` ranks within ``window``.  Escalates to a vote probe.
merge ``collective-hang`` (paper: many syncs hang on the same node)
    collective timeouts naming the same rank (or, with no suspect, on the same
    communicator) from at least ``min_sources`` ranks.  Escalates to a vote probe.
merge ``deadlock`` (paper: many messages deadlock on one resource)
    message timeouts (src waits for dst) and ``no-send`` findings (dst waits for
    ``waiting_on``) on one communicator and tag whose wait edges form a cycle.
merge ``io-fault`` (paper: repeated I/O errors on a node in a short time)
    at least ``io_count`` I/O errors on one host within ``io_window`` seconds.
merge ``external`` (paper: errors submitted by other software)
    an ``external`` record joins the other records about the same rank within
    ``external_window``.
merge ``host-down`` (node hardware fault)
    every rank of a host (two or more ranks) failed within ``hw_window``; needs
    ``hosts``.
correlate ``network-causes-hang`` (paper: network error -> message/sync hang)
    a network incident explains hangs involving the same ranks, and collective
    hangs without a suspect.
correlate ``hardware-causes-timeout`` (paper: node hardware fault -> timeouts elsewhere)
    a failed rank or host explains timeouts on its ranks and ranks found waiting for them.
correlate ``hardware-causes-sync-hang`` (paper: hardware fault -> sync hang)
    a failed rank or host explains collective hangs on its ranks or without a suspect.
correlate ``io-causes-timeout`` (paper: I/O error -> message timeout)
    an I/O incident explains hangs on the ranks, or the host, with the I/O errors.
correlate ``waits-for``
    a rank blocked waiting for a rank that has an incident is a consequence of it.
correlate ``same-rank``
    a stronger finding about a rank explains weaker reports about it (a
    ``fallback`` rule: rules added later are consulted before it).

Adding rules
------------
In Python: subclass :class:`MergeRule` or :class:`CorrelationRule` (or instantiate
:class:`FieldMergeRule` / :class:`KindCorrelationRule`) and call
``rule_base.add_rule(rule)``.  From a file: ``RuleBase.from_toml(path)`` (the default
rules plus the file's) or ``rule_base.load_toml(path)``.  The file format::

    # Extra rules for a planaria rule base.
    [[merge]]
    name = "node-io"                 # required, unique: letters, digits, - _ .
    doc = "disk trouble"             # optional
    type = "io-error"                # or types = ["io-error", "external"]; "*" = any type
    same = "host"                    # or a list; fields that must be equal: src, dst,
                                     # subject, host, comm, tag, op, site, type, evidence.KEY
    min_count = 3                    # records within `window` seconds (default 2)
    min_sources = 1                  # distinct reporting ranks (default 1)
    window = 10.0                    # seconds (default 10)
    verdict = "node I/O fault on {host}"
    priority = 60                    # default 50; built-in kinds use 10..90
    kind = "node-io"                 # default: the name
    blame = "src"                    # ranks blamed: subject (default), src, dst, none
    probe = "vote"                   # optional probe when it fires: ping, status, vote

    [[correlate]]
    name = "node-io-hangs"
    root = ["node-io"]               # kinds or merge-rule names of the root incident
    consequence = ["timeout", "collective-hang"]   # kinds it explains (omit: any)
    link = ["rank", "host"]          # rank: consequence ranks within the root's;
                                     # host: on the root's host; waits: waiting for a
                                     # root rank; involved: a root rank is blamed by,
                                     # waited for by, or waiting in the consequence
    unknown = false                  # also explain incidents with no suspect rank
    window = 30.0
    order = "rank"                   # rank | priority | none

Verdict placeholders: ``{host} {dst} {src} {subject} {comm} {tag} {op} {site} {type}``
(the common value, or the distinct values joined), ``{count}`` (records),
``{sources}`` / ``{ranks}`` ("rank 3" / "ranks 3-5, 9": reporters / blamed ranks),
``{span} {first} {last}`` (seconds; format specs allowed: ``{span:.1f}``),
``{key}``, ``{rule}``.  A bad file raises a one-line ValueError naming the file and
the problem.

Reports
-------
``Incident.root_cause()`` is a JSON-able dict: ``kind``, ``verdict`` (e.g. "rank 12
failed (reported by rank 3)", "rank 12 not sending: computing at x.py:9 in solve",
"host n3: repeated I/O errors (3 on ranks 4-5 within 8.0 s)", "network: rank 5
answers its group but not ranks 0-1"), ``ranks`` (blamed), ``host``, ``status``,
``first``/``last`` (times over all records, consequences included), ``count``
(records), ``correlated`` (records of consequences), ``reporters``, ``rules`` (merge
and correlation rules that fired, in rule-base order) and ``evidence`` (record
dicts, consequences with status ``merged``, at most ``max_evidence``;
``evidence_total`` says how many there were).  ``status`` is ``confirmed`` when the
verdict rests on the MPI library, a probe or a local error; ``probing`` while a
probe of a blamed rank runs; ``refuted`` when a status probe found the suspect
healthy; ``detected`` otherwise.  Records are kept until ``prune(before)``.

Incident kinds and priorities: host-down 90, network 80, rank-failed 70, io-fault
60, io-error 55, injected 52 (a hang the fault plan made), deadlock 50, external 45, not-sending 40 (42 when computing),
collective-hang 28-32, timeout 20-25, unreachable 22, other types 15, slow 10-12.

Order (in)dependence: the incidents (partition, kinds, verdicts, ranks, evidence,
rules) are a function of the set of records held, whatever order they were
submitted in, as long as every merge rule is monotone.  Decisions are online and
depend on the order (the first report of a fault is ``new``, the next ones are not),
and so do the probes started, hence ``Incident.status`` ("probing").
"""
from __future__ import annotations

import bisect
import math
import re
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planaria.graphs import cyclic_components

from .records import (
    COLL_TIMEOUT,
    CONFIRMED,
    DETECTED,
    EXTERNAL,
    IO_ERROR,
    MERGED,
    MSG_TIMEOUT,
    NETWORK,
    NO_SEND,
    PEER_COMPUTING,
    PING_TIMEOUT,
    PROBING,
    PROC_FAILED,
    REFUTED,
    SLOW_MESSAGE,
    UNMATCHED,
    ErrorRecord,
)
from .topology import Topology

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "PING", "STATUS", "VOTE", "PROBE_KINDS", "PRIORITY",
    "Verdict", "Probe", "Decision", "Incident", "Cluster",
    "Rule", "MergeRule", "CorrelationRule", "FieldMergeRule", "KindCorrelationRule",
    "DedupRule", "ManyToOneRule", "CollectiveHangRule", "DeadlockRule", "ExternalRule", "HostDownRule",
    "RuleBase", "load_rules", "fmt_ranks",
]

PING = "ping"
STATUS = "status"
VOTE = "vote"
PROBE_KINDS = (PING, STATUS, VOTE)
_COVERS = {PING: (PING, STATUS, VOTE), STATUS: (STATUS,), VOTE: (VOTE,)}

PRIORITY: dict[str, int] = {
    "host-down": 90, "network": 80, "rank-failed": 70, "io-fault": 60, "io-error": 55, "injected": 52,
    "tag-mismatch": 85, "source-mismatch": 85, "deadlock": 50, "external": 45, "not-sending": 40, "collective-hang": 30,
    "timeout": 20, "unreachable": 22, "other": 15, "slow": 10, "duplicate": 0,
}
"""Base priority of each incident kind (the strongest verdict of an incident names it)."""

HANG_TYPES = frozenset({MSG_TIMEOUT, PING_TIMEOUT, COLL_TIMEOUT})
_CONFIRMED_KINDS = frozenset({"host-down", "rank-failed", "network", "not-sending", "injected", "io-fault", "io-error",
                              "tag-mismatch", "source-mismatch"})
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+\Z")


def fmt_ranks(ranks: Iterable[int], limit: int = 8) -> str:
    """``"rank 3"`` / ``"ranks 3-5, 9"``: sorted, consecutive runs compressed, at most ``limit`` runs."""
    rs = sorted(set(ranks))
    if not rs:
        return "no rank"
    runs: list[list[int]] = []
    for r in rs:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    more = len(parts) - limit
    text = ", ".join(parts[:limit]) + (f", … (+{more} more)" if more > 0 else "")
    return ("rank " if len(rs) == 1 else "ranks ") + text


# --------------------------------------------------------------------------- result types


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a rule (or a record type) concludes: text, kind, priority, blamed ranks, host."""

    text: str
    kind: str
    priority: int
    ranks: tuple[int, ...] = ()
    host: str | None = None


@dataclass(frozen=True, slots=True)
class Probe:
    """A probe to run: ``kind`` (ping/status/vote) of ``target``; a vote asks ``voters`` to ping
    it; a status probe carries ``query`` (the message the reporter waits for: src, comm, tag, op)."""

    kind: str
    target: int
    voters: tuple[int, ...] = ()
    query: dict | None = field(default=None, hash=False)
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``RuleBase.submit`` decided for one record (see the module docstring)."""

    action: str                      # "duplicate" | "merged" | "new"
    subject: str                     # "rank 12", "collective on world"
    probe: Probe | None = None       # probe to run now (already logged as in progress)
    wait_for: str | None = None      # duplicate: kind of the probe in progress to wait for
    result: dict | None = field(default=None, hash=False)  # duplicate: outcome of the recent probe
    rules: tuple[str, ...] = ()      # merge rules that put the record with others
    reason: str = ""


@dataclass(eq=False)
class Incident:
    """A group of records with one verdict; ``consequences`` are incidents it explains."""

    kind: str
    verdict: str
    priority: int
    ranks: tuple[int, ...]
    host: str | None
    records: tuple[ErrorRecord, ...]
    rules: tuple[str, ...]
    first: float
    last: float
    waiting_on: tuple[int, ...] = ()
    involved: frozenset[int] = frozenset()  # blamed ranks, ranks they wait for, ranks hung on them
    hosts: frozenset[str] = frozenset()
    status: str = DETECTED
    consequences: list[tuple[str, Incident]] = field(default_factory=list)
    max_evidence: int = 16

    @property
    def types(self) -> frozenset[str]:
        """Error types of the incident's own records."""
        return frozenset(r.type for r in self.records)

    @property
    def reporters(self) -> tuple[int, ...]:
        """Ranks that reported the incident's own records."""
        return tuple(sorted({r.src for r in self.records}))

    def all_records(self) -> list[ErrorRecord]:
        """Own records, then the records of every consequence (recursively), each in time order."""
        out = list(self.records)
        for _, inc in self.consequences:
            out.extend(inc.all_records())
        return out

    @property
    def count(self) -> int:
        """Records merged into this incident, consequences included."""
        return len(self.records) + sum(inc.count for _, inc in self.consequences)

    def root_cause(self, max_evidence: int | None = None) -> dict[str, Any]:
        """The report: kind, verdict, ranks, host, status, first/last time, counts, rules fired and
        evidence (record dicts, consequences marked ``merged``, at most ``max_evidence``)."""
        cap = self.max_evidence if max_evidence is None else max_evidence
        own = [r.to_dict() for r in self.records]
        cons = [r.with_status(MERGED).to_dict() for _, inc in self.consequences for r in inc.all_records()]
        evidence = own + cons
        times = [r.time for r in self.all_records()]
        rules = list(self.rules)
        return {
            "kind": self.kind, "verdict": self.verdict, "ranks": list(self.ranks), "host": self.host,
            "status": self.status, "first": min(times), "last": max(times), "count": self.count,
            "correlated": self.count - len(self.records), "reporters": list(self.reporters),
            "rules": rules, "evidence": evidence[:cap], "evidence_total": len(evidence),
        }


# --------------------------------------------------------------------------- rule interfaces


class Rule(ABC):  # noqa: B024 -- no abstract method of its own: ABC gives the rule kinds below ABCMeta
    """A named rule with a one-line ``doc``."""

    name: str = ""
    doc: str = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class MergeRule(Rule):
    """Puts the records of one key and time cluster into one incident when ``decide`` fires."""

    window: float = 10.0
    probe: str | None = None  # probe to run on the record's dst when the rule fires (e.g. "vote")

    @abstractmethod
    def key(self, rec: ErrorRecord, ctx: RuleBase) -> Hashable | None:
        """Grouping key of ``rec``, or None when the rule ignores it."""

    @abstractmethod
    def decide(self, window: Sequence[ErrorRecord], ctx: RuleBase) -> Verdict | None:
        """A verdict when the rule fires on this cluster (records in time order), else None.
        Must be monotone: firing on some records implies firing on any superset."""

    def fires(self, cluster: Cluster, added: ErrorRecord | None, ctx: RuleBase) -> bool:
        """Whether a cluster that had not fired fires now that ``added`` joined it (None: two
        clusters were joined).  Called on every insertion, so rules whose clusters can grow large
        without firing override it with an incremental test kept in ``cluster.state``; it must
        agree with ``decide``."""
        return self.decide(cluster.records(), ctx) is not None


class CorrelationRule(Rule):
    """Makes ``other`` a consequence of ``root`` when ``explains`` says so."""

    window: float = 30.0
    order: str = "rank"  # "rank": root must rank above other; "priority": strictly higher priority; "none"
    fallback: bool = False  # catch-all rule: rules added later are still consulted before it

    @abstractmethod
    def explains(self, root: Incident, other: Incident, ctx: RuleBase) -> bool:
        """True when ``other`` is a consequence of ``root``."""


def near(a: Incident, b: Incident, window: float) -> bool:
    """True when the time spans of the two incidents are at most ``window`` seconds apart."""
    return b.first <= a.last + window and b.last >= a.first - window


def _who(srcs: Iterable[int]) -> str:
    return fmt_ranks(srcs)


def _join(values: Iterable[Any], default: str = "?") -> str:
    vals = sorted({str(v) for v in values if v is not None})
    return ", ".join(vals) if vals else default


def _sources_reach(cluster: Cluster, added: ErrorRecord | None, need: int) -> bool:
    """Incremental test: the cluster has records from at least ``need`` distinct ranks."""
    srcs = cluster.state.get("srcs")
    if srcs is None or added is None:
        srcs = cluster.state["srcs"] = {r.src for r in cluster.records()}
    else:
        srcs.add(added.src)
    return len(srcs) >= need


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- built-in merge rules


class DedupRule(MergeRule):
    """The same report (src, dst, type, comm, tag, op) repeated within the dedup window."""

    def __init__(self, window: float = 30.0, name: str = "dedup") -> None:
        self.name, self.window = name, _positive(window, "dedup window")
        self.doc = "the same report repeated within the dedup window is one incident"

    def key(self, rec: ErrorRecord, ctx: RuleBase) -> Hashable | None:
        if rec.dst is None:
            return None
        return (rec.src, rec.dst, rec.type, rec.comm, rec.tag, rec.op)

    def fires(self, cluster: Cluster, added: ErrorRecord | None, ctx: RuleBase) -> bool:
        return cluster.size >= 2

    def decide(self, window: Sequence[ErrorRecord], ctx: RuleBase) -> Verdict | None:
        if len(window) < 2:
            return None
        return Verdict(f"{len(window)} identical reports", "duplicate", PRIORITY["duplicate"])


class _ManySourcesRule(MergeRule):
    """A merge rule whose incident needs records from ``min_sources`` ranks within ``window``,
    confirmed by a vote probe (``NAME`` and ``DOC``: the subclass's default name and its description)."""

    NAME = ""
    DOC = ""

    def __init__(self, window: float = 10.0, min_sources: int = 2, name: str | None = None) -> None:
        self.name, self.window, self.min_sources = name or self.NAME, _positive(window, "window"), int(min_sources)
        self.probe = VOTE
        self.doc = self.DOC

    def fires(self, cluster: Cluster, added: ErrorRecord | None, ctx: RuleBase) -> bool:
        return _sources_reach(cluster, added, self.min_sources)

    def _sources(self, window: Sequence[ErrorRecord]) -> set[int] | None:
        """The ranks that reported the records of ``window``; None when they are fewer than ``min_sources``."""
        srcs = {r.src for r in window}
        return srcs if len(srcs) >= self.min_sources else None


class ManyToOneRule(_ManySourcesRule):
    """Several ranks time out on (or report the failure of) the same rank."""

    TYPES = frozenset({MSG_TIMEOUT, PING_TIMEOUT, SLOW_MESSAGE, PROC_FAILED})
    NAME = "many-to-one"
    DOC = "many ranks time out on the same rank: one incident naming that rank, confirmed by a vote"

    def key(self, rec: ErrorRecord, ctx: RuleBase) -> Hashable | None:
        return rec.dst if rec.type in self.TYPES and rec.dst is not None else None

    def decide(self, window: Sequence[ErrorRecord], ctx: RuleBase) -> Verdict | None:
        srcs = self._sources(window)
        if srcs is None:
            return None
        d = window[0].dst
        if d is None:                   # not keyed: every record of the window names its dst
            return None
        if all(r.type == SLOW_MESSAGE for r in window):
            return Verdict(f"rank {d} slow: {_who(srcs)} see its messages far above threshold",
                           "slow", PRIORITY["slow"] + 2, (d,), window[0].host)
        return Verdict(f"rank {d} unresponsive: {_who(srcs)} time out on it",
                       "timeout", PRIORITY["timeout"] + 5, (d,), window[0].host)


class CollectiveHangRule(_ManySourcesRule):
    """Several ranks hang in collectives on the same rank (or, with no suspect, the same communicator)."""

    NAME = "collective-hang"
    DOC = "many collectives hang on the same rank: one incident naming that rank"

    def key(self, rec: ErrorRecord, ctx: RuleBase) -> Hashable | None:
        if rec.type != COLL_TIMEOUT:
            return None
        return ("rank", rec.dst) if rec.dst is not None else ("comm", rec.comm)

    def decide(self, window: Sequence[ErrorRecord], ctx: RuleBase) -> Verdict | None:
        srcs = self._sources(window)
        if srcs is None:
            return None
        ops, comms = _join((r.op for r in window), "a collective"), _join(r.comm for r in window)
        d = window[0].dst
        if d is None:
            return Verdict(f"{ops} on {comms} hangs: {_who(srcs)} waiting, suspect unknown",
                           "collective-hang", PRIORITY["collective-hang"] - 2)
        return Verdict(f"rank {d} holds up collectives: {_who(srcs)} hang in {ops} on {comms}",
                       "collective-hang", PRIORITY["collective-hang"] + 2, (d,), window[0].host)


def _key_parts(key: Hashable | None) -> tuple[Any, ...]:
    """The parts of a rule's grouping key (a tuple), or none."""
    return tuple(key) if isinstance(key, tuple) else ()


def _wait_edge(rec: ErrorRecord) -> tuple[int, int] | None:
    """(waiter, waited-for) of a record: src waits for dst (timeout), dst waits for waiting_on (no-send)."""
    if rec.type == MSG_TIMEOUT and rec.dst is not None:
        return (rec.src, rec.dst)
    w = rec.evidence.get("waiting_on")
    if rec.type == NO_SEND and rec.dst is not None and isinstance(w, int) and not isinstance(w, bool):
        return (rec.dst, w)
    return None


def _cycle_nodes(edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Strongly connected components with a cycle (size > 1 or a self loop), each sorted."""
    adj: dict[int, list[int]] = defaultdict(list)
    for a, b in set(edges):
        adj[a].append(b)
    return cyclic_components(adj)


def _one_cycle(nodes: list[int], edges: set[tuple[int, int]]) -> list[int]:
    """A cycle through the smallest node of a strongly connected component, following smallest successors."""
    members = set(nodes)
    succ: dict[int, int] = {}
    for a, b in edges:
        if a in members and b in members and (a not in succ or b < succ[a]):
            succ[a] = b
    path, seen = [nodes[0]], {nodes[0]: 0}
    while True:
        nxt = succ[path[-1]]
        if nxt in seen:
            return path[seen[nxt]:] + [nxt]
        seen[nxt] = len(path)
        path.append(nxt)


class DeadlockRule(MergeRule):
    """Message waits on one communicator and tag that form a cycle (a deadlock on that resource)."""

    def __init__(self, window: float = 10.0, name: str = "deadlock") -> None:
        self.name, self.window = name, _positive(window, "window")
        self.doc = "many messages deadlocked on one resource (a wait cycle on one communicator and tag)"

    def key(self, rec: ErrorRecord, ctx: RuleBase) -> Hashable | None:
        return (rec.comm, rec.tag) if _wait_edge(rec) is not None else None

    def fires(self, cluster: Cluster, added: ErrorRecord | None, ctx: RuleBase) -> bool:
        adj = cluster.state.get("adj")
        if adj is None or added is None:
            edges = {e for e in map(_wait_edge, cluster.records()) if e is not None}
            adj = cluster.state["adj"] = defaultdict(set)
            for a, b in edges:
                adj[a].add(b)
            return bool(_cycle_nodes(edges))
        edge = _wait_edge(added)
        if edge is None:                # not keyed: every record of the cluster is a wait edge
            return False
        u, v = edge
        if v in adj[u]:
            return False
        adj[u].add(v)
        seen, todo = {v}, [v]  # a new cycle goes through the new edge: does v reach u?
        while todo:
            x = todo.pop()
            if x == u:
                return True
            for y in adj.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        return False

    def decide(self, window: Sequence[ErrorRecord], ctx: RuleBase) -> Verdict | None:
        edges = {e for e in map(_wait_edge, window) if e is not None}
        sccs = _cycle_nodes(edges)
        if not sccs:
            return None
        ranks = tuple(sorted({r for comp in sccs for r in comp}))
        cycle = " → ".join(map(str, _one_cycle(sccs[0], edges)))
        comm = window[0].comm or "?"
        tag = "any" if window[0].tag is None else window[0].tag
        return Verdict(f"deadlock on {comm} tag {tag}: ranks {cycle} wait for each other",
                       "deadlock", PRIORITY["deadlock"], ranks)


class ExternalRule(MergeRule):
    """An error submitted by other software joins the other records about the same rank."""

    def __init__(self, window: float = 60.0, name: str = "external") -> None:
        self.name, self.window = name, _positive(window, "window")
        self.doc = "errors submitted by other software are merged with the incidents on the same rank"

    def key(self, rec: ErrorRecord, ctx: RuleBase) -> Hashable | None:
        return rec.subject

    def fires(self, cluster: Cluster, added: ErrorRecord | None, ctx: RuleBase) -> bool:
        st = cluster.state
        if added is None or not st:
            kinds = {r.type == EXTERNAL for r in cluster.records()}
            st["ext"], st["other"] = True in kinds, False in kinds
        elif added.type == EXTERNAL:
            st["ext"] = True
        else:
            st["other"] = True
        return st["ext"] and st["other"]

    def decide(self, window: Sequence[ErrorRecord], ctx: RuleBase) -> Verdict | None:
        ext = [r for r in window if r.type == EXTERNAL]
        if not ext or len(ext) == len(window):
            return None
        return _external_verdict(ext, window[0].subject, len(window) - len(ext))


def _external_verdict(ext: Sequence[ErrorRecord], subject: int, related: int = 0) -> Verdict:
    first = ext[0]
    message = first.evidence.get("message") or first.evidence.get("what") or "error reported"
    source = first.evidence.get("source")
    text = f"rank {subject}: {message}" + (f" (reported by {source})" if source else "")
    if related:
        text += f", with {related} related report{'s' if related > 1 else ''}"
    return Verdict(text, "external", PRIORITY["external"], (subject,), first.host)


def _is_failure(rec: ErrorRecord) -> bool:
    """A record that names a failed rank (a failure error without a rank, e.g. a revoked
    communicator, is about no rank: its reporter has not failed)."""
    return rec.dst is not None and (rec.type == PROC_FAILED or (rec.type == PING_TIMEOUT and rec.status == CONFIRMED))


class HostDownRule(MergeRule):
    """Every rank of one host failed within the window: a node hardware fault."""

    def __init__(self, window: float = 60.0, name: str = "host-down") -> None:
        self.name, self.window = name, _positive(window, "window")
        self.doc = "all ranks of a host failed or are unreachable: the node is down"

    def key(self, rec: ErrorRecord, ctx: RuleBase) -> Hashable | None:
        if not _is_failure(rec):
            return None
        return ctx.host_of(rec.subject) or rec.host

    def decide(self, window: Sequence[ErrorRecord], ctx: RuleBase) -> Verdict | None:
        host = ctx.host_of(window[0].subject) or window[0].host
        members = ctx.host_ranks(host) if host is not None else ()
        failed = {r.subject for r in window}
        if len(members) < 2 or not set(members) <= failed:
            return None
        return Verdict(f"host {host} down: all its {fmt_ranks(members)} failed",
                       "host-down", PRIORITY["host-down"], tuple(members), host)


# --------------------------------------------------------------------------- field rules (TOML)

_FIELDS = ("src", "dst", "subject", "host", "comm", "tag", "op", "site", "type")
_BLAME = ("subject", "src", "dst", "none")


def _field_value(rec: ErrorRecord, name: str) -> Any:
    if name.startswith("evidence."):
        value = rec.evidence.get(name[len("evidence."):])
        if isinstance(value, (list, dict)):
            return repr(value)
        return value
    return getattr(rec, name)


class _Fields(dict):
    def __missing__(self, key: str) -> Any:
        raise KeyError(key)


def _max_in_window(times: Sequence[float], window: float) -> int:
    """Largest number of the sorted ``times`` that fit in an interval of length ``window``."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


class FieldMergeRule(MergeRule):
    """A merge rule declared by fields: records of ``types`` with equal ``same`` fields, at least
    ``min_count`` within ``window`` seconds from at least ``min_sources`` ranks."""

    def __init__(self, name: str, *, types: Iterable[str] | str = ("*",), same: Iterable[str] | str = ("subject",),
                 min_count: int = 2, min_sources: int = 1, window: float = 10.0,
                 verdict: str = "{rule}: {count} records on {key}", priority: int = 50,
                 kind: str | None = None, blame: str = "subject", probe: str | None = None,
                 doc: str = "") -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"rule name must be letters, digits, '-', '_' or '.', got {name!r}")
        self.name = name
        self.doc = doc or f"merge {', '.join(types if not isinstance(types, str) else [types])} records"
        types = [types] if isinstance(types, str) else list(types)
        if not types or not all(isinstance(t, str) and t for t in types):
            raise ValueError(f"type(s) must be non-empty strings, got {types!r}")
        self.types = None if "*" in types else frozenset(types)
        same = [same] if isinstance(same, str) else list(same)
        for f in same:
            if not isinstance(f, str) or not (f in _FIELDS or (f.startswith("evidence.") and len(f) > 9)):
                raise ValueError(f"same: unknown field {f!r} (use {', '.join(_FIELDS)} or evidence.KEY)")
        if not same:
            raise ValueError("same: at least one field is needed")
        self.same = tuple(same)
        for what, value in (("min_count", min_count), ("min_sources", min_sources), ("priority", priority)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{what} must be an integer, got {value!r}")
        if min_count < 1 or min_sources < 1:
            raise ValueError("min_count and min_sources must be >= 1")
        self.min_count, self.min_sources, self.priority = min_count, min_sources, priority
        self.window = _positive(window, "window")
        if blame not in _BLAME:
            raise ValueError(f"blame must be one of {', '.join(_BLAME)}, got {blame!r}")
        self.blame = blame
        if probe is not None and probe not in PROBE_KINDS:
            raise ValueError(f"probe must be one of {', '.join(PROBE_KINDS)}, got {probe!r}")
        self.probe = probe
        self.kind = kind if kind is not None else name
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"kind must be a non-empty string, got {kind!r}")
        if not isinstance(verdict, str) or not verdict:
            raise ValueError("verdict must be a non-empty string")
        self.verdict = verdict
        sample = _Fields({f: "x" for f in _FIELDS}, count=1, sources="rank 1", ranks="rank 1", span=0.0,
                         first=0.0, last=0.0, key="x", rule=name)
        try:
            verdict.format_map(sample)
        except KeyError as exc:
            raise ValueError(f"verdict: unknown placeholder {{{exc.args[0]}}}") from None
        except (ValueError, IndexError, AttributeError) as exc:
            raise ValueError(f"verdict: bad format ({exc})") from None

    def key(self, rec: ErrorRecord, ctx: RuleBase) -> Hashable | None:
        if self.types is not None and rec.type not in self.types:
            return None
        values = tuple(_field_value(rec, f) for f in self.same)
        return None if any(v is None for v in values) else values

    def _blamed(self, window: Sequence[ErrorRecord]) -> tuple[int, ...]:
        if self.blame == "none":
            return ()
        if self.blame == "src":
            return tuple(sorted({r.src for r in window}))
        if self.blame == "dst":
            return tuple(sorted({r.dst for r in window if r.dst is not None}))
        return tuple(sorted({r.subject for r in window}))

    def fires(self, cluster: Cluster, added: ErrorRecord | None, ctx: RuleBase) -> bool:
        st = cluster.state
        sources_ok = _sources_reach(cluster, added, self.min_sources)
        if added is None or "times" not in st:
            st["times"] = sorted(r.time for r in cluster.records())
            st["count_ok"] = _max_in_window(st["times"], self.window) >= self.min_count
        else:
            times = st["times"]
            bisect.insort(times, added.time)
            if not st["count_ok"]:  # only intervals around the new time can reach the count now
                lo = bisect.bisect_left(times, added.time - self.window)
                hi = bisect.bisect_right(times, added.time + self.window)
                st["count_ok"] = _max_in_window(times[lo:hi], self.window) >= self.min_count
        return sources_ok and st["count_ok"]

    def decide(self, window: Sequence[ErrorRecord], ctx: RuleBase) -> Verdict | None:
        srcs = {r.src for r in window}
        if len(srcs) < self.min_sources:
            return None
        if _max_in_window(sorted(r.time for r in window), self.window) < self.min_count:
            return None
        blamed = self._blamed(window)
        values = _Fields({f: _join(getattr(r, f) for r in window) for f in _FIELDS})
        values.update(count=len(window), sources=_who(srcs), ranks=fmt_ranks(blamed),
                      span=window[-1].time - window[0].time, first=window[0].time, last=window[-1].time,
                      key=", ".join(map(str, _key_parts(self.key(window[0], ctx)))), rule=self.name)
        hosts = {r.host for r in window if r.host is not None}
        return Verdict(self.verdict.format_map(values), self.kind, self.priority, blamed,
                       hosts.pop() if len(hosts) == 1 else None)


_LINKS = ("rank", "host", "waits", "involved")
_ORDERS = ("rank", "priority", "none")


class KindCorrelationRule(CorrelationRule):
    """Root incidents of kinds (or merge rules) ``roots`` explain incidents of kinds ``consequences``
    linked to them (``link``: rank, host, waits, involved) within ``window`` seconds."""

    def __init__(self, name: str, *, roots: Iterable[str] | None = None, consequences: Iterable[str] | None = None,
                 link: Iterable[str] | str = ("rank",), unknown: bool = False, window: float = 30.0,
                 order: str = "rank", fallback: bool = False, doc: str = "") -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"rule name must be letters, digits, '-', '_' or '.', got {name!r}")
        self.name, self.doc = name, doc or f"correlate {name}"
        self.roots = None if roots is None else frozenset(_str_list(roots, "root"))
        self.consequences = None if consequences is None else frozenset(_str_list(consequences, "consequence"))
        links = _str_list([link] if isinstance(link, str) else link, "link")
        bad = [x for x in links if x not in _LINKS]
        if bad:
            raise ValueError(f"link: unknown {bad[0]!r} (use {', '.join(_LINKS)})")
        self.link = tuple(links)
        if not isinstance(unknown, bool):
            raise ValueError(f"unknown must be true or false, got {unknown!r}")
        self.unknown = unknown
        self.window = _positive(window, "window")
        if order not in _ORDERS:
            raise ValueError(f"order must be one of {', '.join(_ORDERS)}, got {order!r}")
        self.order = order
        self.fallback = bool(fallback)

    def explains(self, root: Incident, other: Incident, ctx: RuleBase) -> bool:
        if self.roots is not None and root.kind not in self.roots and not self.roots.intersection(root.rules):
            return False
        if self.consequences is not None and other.kind not in self.consequences:
            return False
        if not near(root, other, self.window):
            return False
        if not other.ranks:
            return self.unknown
        for link in self.link:
            if link == "rank" and root.ranks and set(other.ranks) <= set(root.ranks):
                return True
            if link == "host" and root.host is not None and all(
                    (ctx.host_of(r) or other.host) == root.host for r in other.ranks):
                return True
            if link == "waits" and set(other.waiting_on) & set(root.ranks):
                return True
            if link == "involved" and other.involved.intersection(root.ranks):
                return True
        return False


def _str_list(values: Any, what: str) -> list[str]:
    if isinstance(values, str) or not isinstance(values, (list, tuple, set, frozenset)):
        values = [values]
    out = list(values)
    if not out or not all(isinstance(v, str) and v for v in out):
        raise ValueError(f"{what} must be a non-empty string or list of strings, got {values!r}")
    return out


_HANG_KINDS = ("timeout", "unreachable", "collective-hang", "slow")


def default_rules(*, window: float = 10.0, dedup_window: float = 30.0, min_sources: int = 2,
                  io_count: int = 3, io_window: float = 10.0, hw_window: float = 60.0,
                  corr_window: float = 30.0, external_window: float = 60.0) -> list[Rule]:
    """The paper's rules (see the module docstring), with their windows and thresholds."""
    return [
        DedupRule(dedup_window),
        ManyToOneRule(window, min_sources),
        CollectiveHangRule(window, min_sources),
        DeadlockRule(window),
        FieldMergeRule("io-fault", types=IO_ERROR, same="host", min_count=io_count, window=io_window,
                       verdict="host {host}: repeated I/O errors ({count} on {ranks} within {span:.1f} s)",
                       priority=PRIORITY["io-fault"], kind="io-fault", blame="src",
                       doc="repeated I/O errors on one host within a short time: a node I/O fault"),
        ExternalRule(external_window),
        HostDownRule(hw_window),
        KindCorrelationRule("network-causes-hang", roots=["network"], consequences=_HANG_KINDS,
                            link="involved", unknown=True, window=corr_window,
                            doc="a network fault explains message and collective hangs involving its ranks"),
        KindCorrelationRule("hardware-causes-timeout", roots=["host-down", "rank-failed"],
                            consequences=("timeout", "unreachable", "slow", "not-sending"),
                            link=("rank", "waits"), window=hw_window,
                            doc="a failed node or rank explains timeouts on it and on ranks waiting for it"),
        KindCorrelationRule("hardware-causes-sync-hang", roots=["host-down", "rank-failed"],
                            consequences=["collective-hang"], link="rank", unknown=True, window=hw_window,
                            doc="a failed node or rank explains collective hangs"),
        KindCorrelationRule("io-causes-timeout", roots=["io-fault", "io-error"],
                            consequences=_HANG_KINDS + ("not-sending",), link=("rank", "host"),
                            window=corr_window, doc="I/O errors explain message timeouts on the same rank or host"),
        KindCorrelationRule("waits-for", consequences=("not-sending", "timeout", "unreachable", "collective-hang"),
                            link="waits", window=corr_window, order="none",
                            doc="a rank blocked waiting for a rank with an incident is its consequence"),
        KindCorrelationRule("same-rank", link="rank", window=corr_window, order="priority", fallback=True,
                            doc="a stronger finding about a rank explains weaker reports about it"),
    ]


# --------------------------------------------------------------------------- record-type verdicts


def _type_verdicts(records: Sequence[ErrorRecord]) -> list[Verdict]:
    """The verdict each group of same-type records about one rank supports on its own."""
    groups: dict[tuple[Any, ...], list[ErrorRecord]] = defaultdict(list)
    for r in records:
        # a timed-out collective or a failure error that names no rank is about no rank (not its reporter)
        about = r.dst if r.dst is not None else (None if r.type in (COLL_TIMEOUT, PROC_FAILED) else r.src)
        groups[(r.type, -1 if about is None else about, (r.comm or "") if about is None else "")].append(r)
    out = []
    for (typ, about, _), rs in sorted(groups.items()):
        verdict = _TYPE_VERDICT.get(typ, _other_verdict)
        if typ == PEER_COMPUTING and rs[-1].evidence.get("injected"):
            verdict = _injected_verdict
        out.append(verdict(typ, about, rs))
    return out


def _srcs(rs: Sequence[ErrorRecord]) -> list[int]:
    return sorted({r.src for r in rs})


def _failed_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    if about == -1:
        return Verdict(f"a process failure seen on {_join(r.comm for r in rs)} by {_who(_srcs(rs))}, "
                       "failed rank not known (a revoked communicator, or a failure not yet acknowledged)",
                       "rank-failed", PRIORITY["rank-failed"] - 2)
    return Verdict(f"rank {about} failed (reported by {_who(_srcs(rs))})", "rank-failed",
                   PRIORITY["rank-failed"], (about,), rs[0].host)


def _ping_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    conf = [r for r in rs if r.status == CONFIRMED]
    if conf:
        votes = conf[-1].evidence.get("votes") or {}
        tally = (f" ({votes.get('unreachable', '?')} of "
                 f"{votes.get('unreachable', 0) + votes.get('reachable', 0)} voters cannot reach it)"
                 if isinstance(votes, dict) and votes else "")
        return Verdict(f"rank {about} failed: unreachable from its group{tally}", "rank-failed",
                       PRIORITY["rank-failed"], (about,), rs[0].host)
    return Verdict(f"rank {about} does not answer pings from {_who(_srcs(rs))}", "unreachable",
                   PRIORITY["unreachable"], (about,), rs[0].host)


def _msg_timeout_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    first, n = rs[0], len(rs)
    where = f" in {first.op}" if first.op else ""
    where += f" at {first.site}" if first.site else ""
    return Verdict(f"rank {about}: {n} message timeout{'s' if n > 1 else ''}, "
                   f"{_who(_srcs(rs))} waiting{where}", "timeout", PRIORITY["timeout"], (about,), first.host)


def _coll_timeout_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    ops, comms = _join((r.op for r in rs), "a collective"), _join(r.comm for r in rs)
    if about == -1:
        return Verdict(f"{ops} on {comms} hangs: {_who(_srcs(rs))} waiting, suspect unknown",
                       "collective-hang", PRIORITY["collective-hang"] - 2)
    return Verdict(f"rank {about} holds up {ops} on {comms} ({_who(_srcs(rs))} waiting)",
                   "collective-hang", PRIORITY["collective-hang"], (about,), rs[0].host)


def _slow_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    return Verdict(f"rank {about}: slow messages reported by {_who(_srcs(rs))}", "slow",
                   PRIORITY["slow"], (about,), rs[0].host)


def _no_send_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    last = rs[-1]
    ev = last.evidence
    what = f"blocked in {last.op or ev.get('op') or 'an MPI call'}"
    w = ev.get("waiting_on")
    if isinstance(w, int) and not isinstance(w, bool):
        what += f" waiting for rank {w}"
    elif last.comm:
        what += f" on {last.comm}"
    if last.site:
        what += f" at {last.site}"
    return Verdict(f"rank {about} not sending: {what}", "not-sending", PRIORITY["not-sending"], (about,), rs[0].host)


def _injected_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    return Verdict(f"rank {about} hangs as the fault plan asked ({rs[-1].evidence['injected']}; "
                   f"planaria --inject), not by a fault of the program", "injected",
                   PRIORITY["injected"], (about,), rs[0].host)


def _computing_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    last = rs[-1]
    idle = last.evidence.get("idle")
    text = f"rank {about} not sending: computing at {last.site or 'an unknown place'}"
    if isinstance(idle, (int, float)) and not isinstance(idle, bool):
        text += f" (outside MPI for {idle:.0f} s)"
    return Verdict(text, "not-sending", PRIORITY["not-sending"] + 2, (about,), rs[0].host)


def _io_error_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    n, host = len(rs), rs[0].host
    return Verdict(f"rank {about}: {n} I/O error{'s' if n > 1 else ''} on host {host or '?'}",
                   "io-error", PRIORITY["io-error"], (about,), host)


def _external_type_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    return _external_verdict(rs, about)


def _unmatched_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    last, host = rs[-1], rs[0].host
    ev = last.evidence
    want = "any tag" if ev.get("want") is None else f"tag {ev.get('want')}"
    where = f" at {last.site}" if last.site else ""
    # blamed: the sender of the unmatched message and the rank whose receive does not match
    # it (a rank the receive names but that sent nothing has no part in it)
    pair = tuple(sorted({r for r in (ev.get("source"), ev.get("waiting")) if isinstance(r, int)})) or (about,)
    w = ev.get("waiting")
    if ev.get("wildcard_site") and isinstance(w, int):
        return Verdict(f"receive from any source took the wrong message: rank {w}'s ANY_SOURCE receive "
                       f"at {ev['wildcard_site']} took rank {about}'s message (tag {ev.get('tag')}), so "
                       f"its receive from rank {about}{where} waits while rank {ev.get('source')}'s is "
                       f"left unmatched", "source-mismatch", PRIORITY["source-mismatch"],
                       tuple(sorted({w, about})), host)     # one incident with the wait for it
    if ev.get("source") == about:
        return Verdict(f"unmatched tag: rank {about} sent tag {ev.get('tag')}, rank {ev.get('waiting')} "
                       f"waits for {want} from rank {about}{where}", "tag-mismatch",
                       PRIORITY["tag-mismatch"], pair, host)
    return Verdict(f"unmatched source: rank {ev.get('source')} sent to rank {ev.get('waiting')} "
                   f"(tag {ev.get('tag')}), rank {ev.get('waiting')} waits for a message from rank "
                   f"{about}{where}", "source-mismatch", PRIORITY["source-mismatch"], pair, host)


def _network_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    ev = rs[-1].evidence
    if isinstance(ev.get("sent_to"), int):
        text = f"network: rank {about} sent the message rank {ev['sent_to']} waits for, it never arrived"
    else:
        lost = ev.get("unreachable_from") or _srcs(rs)
        text = f"network: rank {about} answers its group but not {_who(lost)}"
    return Verdict(text, "network", PRIORITY["network"], (about,), rs[0].host)


def _other_verdict(typ: str, about: int, rs: Sequence[ErrorRecord]) -> Verdict:
    n = len(rs)
    return Verdict(f"rank {about}: {typ} ({n} report{'s' if n > 1 else ''})", typ,
                   PRIORITY["other"], (about,) if about != -1 else (), rs[0].host)


#: record type -> the verdict its records about one rank support (other types: ``_other_verdict``)
_TYPE_VERDICT: dict[str, Callable[[str, int, Sequence[ErrorRecord]], Verdict]] = {
    PROC_FAILED: _failed_verdict, PING_TIMEOUT: _ping_verdict, MSG_TIMEOUT: _msg_timeout_verdict,
    COLL_TIMEOUT: _coll_timeout_verdict, SLOW_MESSAGE: _slow_verdict, NO_SEND: _no_send_verdict,
    PEER_COMPUTING: _computing_verdict, IO_ERROR: _io_error_verdict, EXTERNAL: _external_type_verdict,
    UNMATCHED: _unmatched_verdict, NETWORK: _network_verdict,
}


# --------------------------------------------------------------------------- the rule base


class Cluster:
    """Records of one merge rule and key whose consecutive times are at most the rule's window apart.

    ``state`` is a dict the rule may use in :meth:`MergeRule.fires` to test cheaply; it
    is emptied when two clusters are joined (``fires`` is then called with ``added=None``).
    """

    __slots__ = ("start", "end", "ids", "fired", "state", "_recs", "_sorted")

    def __init__(self, recs: list[ErrorRecord], rid: int, t: float) -> None:
        self.start = self.end = t
        self.ids = [rid]
        self.fired = False
        self.state: dict = {}
        self._recs = recs
        self._sorted: list[ErrorRecord] | None = None

    @property
    def size(self) -> int:
        """Number of records in the cluster."""
        return len(self.ids)

    def records(self) -> list[ErrorRecord]:
        """The cluster's records in time order (cached until the cluster changes)."""
        if self._sorted is None:
            self._sorted = sorted((self._recs[i] for i in self.ids), key=ErrorRecord.sort_key)
        return self._sorted


@dataclass
class _ProbeEntry:
    kind: str
    started: float
    finished: float | None = None
    outcome: dict | None = None
    finding: bool = False


class RuleBase:
    """The ordered rules of one responsible rank, the records it holds and its probe log.

    ``hosts[r]`` is the host of world rank ``r`` (needed by host-level rules and for
    the voters of a vote probe); ``rank`` is the rank running the rule base (the
    ``src`` of records made from probe results).  Not thread-safe: call it from one
    thread (or under a lock).
    """

    def __init__(self, rules: Iterable[Rule] = (), *, hosts: Sequence[str] | None = None, rank: int = 0,
                 group: int = 4, dedup_window: float = 30.0, probe_timeout: float = 30.0,
                 cause_window: float = 60.0, computing_after: float = 5.0, max_evidence: int = 16) -> None:
        self.rank = int(rank)
        self.hosts: tuple[str, ...] | None = tuple(hosts) if hosts is not None else None
        self.topology = Topology(self.hosts, group) if self.hosts else None
        by_host: dict[str, list[int]] = defaultdict(list)
        for r, h in enumerate(self.hosts or ()):
            by_host[h].append(r)
        self._host_ranks: dict[str, tuple[int, ...]] = {h: tuple(rs) for h, rs in by_host.items()}
        self.dedup_window = _positive(dedup_window, "dedup_window")
        self.probe_timeout = _positive(probe_timeout, "probe_timeout")
        self.cause_window = _positive(cause_window, "cause_window")
        self.computing_after = float(computing_after)
        self.max_evidence = int(max_evidence)
        self._merge: list[MergeRule] = []
        self._corr: list[CorrelationRule] = []
        self.clock = -math.inf
        self._probes: dict[int, list[_ProbeEntry]] = defaultdict(list)
        self._reset()
        for rule in rules:
            self.add_rule(rule)

    @classmethod
    def default(cls, *, hosts: Sequence[str] | None = None, rank: int = 0, group: int = 4,
                window: float = 10.0, dedup_window: float = 30.0, min_sources: int = 2, io_count: int = 3,
                io_window: float = 10.0, hw_window: float = 60.0, corr_window: float = 30.0,
                external_window: float = 60.0, **kwargs: Any) -> RuleBase:
        """A rule base with the paper's rules (module docstring) and these windows/thresholds."""
        rules = default_rules(window=window, dedup_window=dedup_window, min_sources=min_sources,
                              io_count=io_count, io_window=io_window, hw_window=hw_window,
                              corr_window=corr_window, external_window=external_window)
        return cls(rules, hosts=hosts, rank=rank, group=group, dedup_window=dedup_window, **kwargs)

    @classmethod
    def from_toml(cls, path: str | Path, **kwargs: Any) -> RuleBase:
        """The default rule base plus the rules of a TOML file (format in the module docstring)."""
        rb = cls.default(**kwargs)
        rb.load_toml(path)
        return rb

    # ----------------------------------------------------------------- rules

    @property
    def rules(self) -> tuple[Rule, ...]:
        """Merge rules, then correlation rules, in the order they are consulted (the order they were
        added, except that catch-all ``fallback`` correlation rules such as same-rank stay last)."""
        return (*self._merge, *self._corr)

    def add_rule(self, rule: Rule) -> None:
        """Append a merge or correlation rule; records already held are re-examined."""
        if not isinstance(rule, (MergeRule, CorrelationRule)):
            raise TypeError(f"a rule must be a MergeRule or a CorrelationRule, got {type(rule).__name__}")
        if not isinstance(rule.name, str) or not rule.name:
            raise ValueError(f"rule {rule!r} has no name")
        if any(r.name == rule.name for r in self.rules):
            raise ValueError(f"a rule named {rule.name!r} is already in the rule base")
        if isinstance(rule, MergeRule):
            _positive(rule.window, f"rule {rule.name}: window")
            self._merge.append(rule)
            self._rebuild()
        else:
            if rule.order not in _ORDERS:
                raise ValueError(f"rule {rule.name}: order must be one of {', '.join(_ORDERS)}")
            at = len(self._corr)
            if not rule.fallback:
                at = next((k for k, r in enumerate(self._corr) if r.fallback), at)
            self._corr.insert(at, rule)
            self._version += 1

    def load_toml(self, path: str | Path) -> list[Rule]:
        """Add the rules of a TOML file; returns them.  ValueError (one line) on a bad file."""
        rules = load_rules(path)
        taken = {r.name for r in self.rules}
        for rule in rules:
            if rule.name in taken:
                raise ValueError(f"{path}: rule {rule.name!r} is already in the rule base")
        for rule in rules:
            self.add_rule(rule)
        return rules

    # ----------------------------------------------------------------- context for rules

    def host_of(self, rank: int | None) -> str | None:
        """Host of a world rank, when the rule base knows the hosts."""
        if rank is None or self.hosts is None or not 0 <= rank < len(self.hosts):
            return None
        return self.hosts[rank]

    def host_ranks(self, host: str) -> tuple[int, ...]:
        """World ranks on ``host`` (empty when unknown)."""
        return self._host_ranks.get(host, ())

    def voters(self, target: int) -> tuple[int, ...]:
        """Ranks a vote probe of ``target`` asks to ping it (its group mates)."""
        if self.topology is None or not 0 <= target < self.topology.size:
            return ()
        return tuple(self.topology.voters(target, limit=max(len(self.topology.group_of(target)) - 1, 4)))

    # ----------------------------------------------------------------- store

    def _reset(self) -> None:
        self._recs: list[ErrorRecord] = []
        self._parent: list[int] = []
        self._clusters: dict[tuple[int, Hashable], list[Cluster]] = {}
        self._failed: dict[int, list[float]] = defaultdict(list)
        self._netfail: dict[int, list[float]] = defaultdict(list)
        self._ioerr: dict[int, list[float]] = defaultdict(list)
        self._queries: dict[int, dict] = {}
        # (dst, src) -> the query of src's wait for dst: several ranks may wait for the same dst (a
        # stencil's two neighbours), and a status reply names the src it answered ("for")
        self._asked: dict[tuple[int, int], dict] = {}
        self._lost_pings: dict[int, list[tuple[float, int]]] = defaultdict(list)
        self._version = getattr(self, "_version", 0) + 1  # never reused: it keys the incidents cache
        self._cache: tuple[tuple[int, float], list[Incident]] | None = None

    def _rebuild(self) -> None:
        records = sorted(self._recs, key=ErrorRecord.sort_key)
        self._reset()
        for rec in records:
            self._add(rec)

    def records(self) -> list[ErrorRecord]:
        """Records held, in time order."""
        return sorted(self._recs, key=ErrorRecord.sort_key)

    def prune(self, before: float) -> int:
        """Forget records (and probe log entries) older than ``before``; returns how many records went."""
        kept = [r for r in self._recs if r.time >= before]
        gone = len(self._recs) - len(kept)
        for dst in list(self._probes):
            self._probes[dst] = [e for e in self._probes[dst] if (e.finished or e.started) >= before]
            if not self._probes[dst]:
                del self._probes[dst]
        self._recs = kept
        self._rebuild()
        return gone

    def _find(self, i: int) -> int:
        parent = self._parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def _union(self, a: int, b: int) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)

    def _tick(self, *times: float | None) -> float:
        for t in times:
            if t is not None:
                self.clock = max(self.clock, float(t))
        return self.clock

    def _add(self, rec: ErrorRecord) -> list[tuple[MergeRule, bool, int]]:
        """Store a record, cluster it under every merge rule; returns (rule, fired, cluster size)."""
        if rec.host is None:
            host = self.host_of(rec.subject)
            if host is not None:
                rec = replace(rec, host=host)
        rid = len(self._recs)
        self._recs.append(rec)
        self._parent.append(rid)
        self._version += 1
        if _is_failure(rec):
            self._failed[rec.subject].append(rec.time)
        elif rec.type == NETWORK and rec.dst is not None:
            self._netfail[rec.dst].append(rec.time)
        elif rec.type == IO_ERROR:
            self._ioerr[rec.subject].append(rec.time)
        if rec.dst is not None and rec.status != CONFIRMED and (
                rec.type == PING_TIMEOUT or (rec.type == MSG_TIMEOUT and rec.evidence.get("ping") is False)):
            self._lost_pings[rec.dst].append((rec.time, rec.src))
        if rec.type in (MSG_TIMEOUT, COLL_TIMEOUT) and rec.dst is not None:
            # what a status probe of dst asks: "did you post the send rec.src waits for?"
            self._queries[rec.dst] = {k: v for k, v in (("src", rec.src), ("comm", rec.comm),
                                                         ("tag", rec.tag), ("op", rec.op),
                                                         ("unmatched", rec.evidence.get("unmatched")),
                                                         ("recvd", rec.evidence.get("received")),
                                                         ("site", rec.site)) if v is not None}
            if rec.src is not None:
                self._asked[(rec.dst, rec.src)] = self._queries[rec.dst]
        joined = []
        for ri, rule in enumerate(self._merge):
            key = rule.key(rec, self)
            if key is None:
                continue
            cluster = self._cluster_insert(ri, rule, key, rid, rec.time)
            joined.append((rule, cluster.fired, len(cluster.ids)))
        return joined

    def _cluster_insert(self, ri: int, rule: MergeRule, key: Hashable, rid: int, t: float) -> Cluster:
        cl = self._clusters.setdefault((ri, key), [])
        w = rule.window
        i = bisect.bisect_right(cl, t, key=lambda c: c.start) - 1
        join = [j for j in (i, i + 1) if 0 <= j < len(cl) and cl[j].start - w <= t <= cl[j].end + w]
        added: ErrorRecord | None = self._recs[rid]
        if not join:
            c = Cluster(self._recs, rid, t)
            cl.insert(i + 1, c)
        else:
            c = cl[join[0]]
            if len(join) == 2:  # the record bridges two clusters
                d = cl.pop(join[1])
                if c.fired and d.fired:
                    self._union(c.ids[0], d.ids[0])
                elif c.fired or d.fired:
                    head = c.ids[0] if c.fired else d.ids[0]
                    for x in (d.ids if c.fired else c.ids):
                        self._union(head, x)
                c.ids.extend(d.ids)
                c.start, c.end, c.fired = min(c.start, d.start), max(c.end, d.end), c.fired or d.fired
                c.state, added = {}, None
            c.ids.append(rid)
            c._sorted = None
            c.start, c.end = min(c.start, t), max(c.end, t)
        if c.fired:
            self._union(c.ids[0], rid)
        elif rule.fires(c, added, self):
            c.fired = True
            c.state = {}
            for x in c.ids:
                self._union(c.ids[0], x)
        return c

    # ----------------------------------------------------------------- probe log

    def _covered(self, dst: int, kind: str, now: float) -> _ProbeEntry | None:
        """The most recent probe of dst that answers a ``kind`` probe: in progress, or finished recently."""
        best = None
        for e in self._probes.get(dst, ()):
            if e.kind not in _COVERS[kind]:
                continue
            live = (e.finished is None and now - e.started <= self.probe_timeout) or (
                e.finished is not None and now - e.finished <= self.dedup_window)
            if live and (best is None or (e.finished or e.started) >= (best.finished or best.started)):
                best = e
        return best

    def _start(self, kind: str, target: int, now: float, reason: str) -> Probe:
        self._probes[target].append(_ProbeEntry(kind, now))
        self._version += 1
        voters = self.voters(target) if kind == VOTE else ()
        query = self._queries.get(target) if kind == STATUS else None
        return Probe(kind, target, voters, dict(query) if query else None, reason)

    def probe_log(self, dst: int) -> list[dict[str, Any]]:
        """The probes of ``dst`` this rule base knows of: kind, started, finished, outcome."""
        return [{"kind": e.kind, "started": e.started, "finished": e.finished,
                 "outcome": dict(e.outcome) if e.outcome is not None else None}
                for e in self._probes.get(dst, ())]

    def _last_ping_ok(self, dst: int, now: float) -> bool:
        return any(e.kind == PING and e.finished is not None and now - e.finished <= self.dedup_window
                   and (e.outcome or {}).get("ok") for e in self._probes.get(dst, ()))

    # ----------------------------------------------------------------- online interface

    def submit(self, rec: ErrorRecord, now: float | None = None) -> Decision:
        """Take one error record; decide duplicate / merged / new and which probe to run now."""
        if not isinstance(rec, ErrorRecord):
            raise TypeError(f"submit() takes an ErrorRecord, got {type(rec).__name__}")
        now = self._tick(rec.time, now)
        cause = self._known_cause(rec)
        joined = self._add(rec)
        rules = tuple(rule.name for rule, fired, size in joined if fired and size > 1)
        subject = (f"rank {rec.subject}" if rec.dst is not None or rec.type != COLL_TIMEOUT
                   else f"collective on {rec.comm or '?'}")
        if cause is not None:
            return Decision("merged", subject, rules=rules, reason=cause)
        want = _needed_probe(rec)
        reason = f"{rec.type} reported by rank {rec.src}"
        if rec.dst is not None and rec.type in HANG_TYPES and want in (None, PING):
            for rule, fired, _size in joined:
                if fired and rule.probe is not None:
                    want, reason = rule.probe, f"rule {rule.name} fired on rank {rec.dst}"
                    break
            if want == VOTE and self._last_ping_ok(rec.dst, now):
                want, reason = STATUS, f"rank {rec.dst} answers pings; asking its state"
        if want is not None and rec.dst is not None:
            entry = self._covered(rec.dst, want, now)
            if entry is not None:
                done = entry.finished
                return Decision("duplicate", subject, wait_for=entry.kind if done is None else None,
                                result=None if done is None else dict(entry.outcome or {}), rules=rules,
                                reason=(f"a {entry.kind} probe of rank {rec.dst} is in progress" if done is None
                                        else f"rank {rec.dst} was probed ({entry.kind}) {now - done:.1f} s ago"))
        probe = self._start(want, rec.dst, now, reason) if want is not None and rec.dst is not None else None
        if rules:
            return Decision("merged", subject, probe=probe, rules=rules,
                            reason=f"merged by {', '.join(rules)}" + (f"; {probe.kind} probe" if probe else ""))
        return Decision("new", subject, probe=probe,
                        reason=reason if probe else f"{rec.type}: nothing to probe")

    def _known_cause(self, rec: ErrorRecord) -> str | None:
        """Why a hang report needs no probe: a failure, network fault or I/O error already known near it."""
        if rec.type not in HANG_TYPES and rec.type != SLOW_MESSAGE or rec.status == CONFIRMED:
            return None
        w = self.cause_window

        def near_in(times: list[float] | None) -> bool:
            return times is not None and any(abs(t - rec.time) <= w for t in times)

        d = rec.dst
        if d is None:
            if rec.type == COLL_TIMEOUT:
                for r in sorted(self._failed):
                    if near_in(self._failed[r]):
                        return f"consequence of the failure of rank {r}"
            return None
        if near_in(self._failed.get(d)):
            return f"consequence of the failure of rank {d}"
        if near_in(self._netfail.get(d)):
            return f"consequence of the network fault at rank {d}"
        if near_in(self._ioerr.get(d)):
            return f"consequence of the I/O errors on rank {d}"
        return None

    def probe_result(self, dst: int, kind: str, outcome: dict, now: float | None = None) -> list[Probe]:
        """Record the outcome of a probe of ``dst`` (formats in the module docstring); returns the
        follow-up probes to run (already logged as in progress)."""
        if kind not in PROBE_KINDS:
            raise ValueError(f"probe kind must be one of {', '.join(PROBE_KINDS)}, got {kind!r}")
        if isinstance(dst, bool) or not isinstance(dst, int) or dst < 0:
            raise ValueError(f"probe target must be a rank, got {dst!r}")
        if not isinstance(outcome, dict):
            raise ValueError(f"probe outcome must be a dict, got {type(outcome).__name__}")
        now = self._tick(now)
        if now == -math.inf:
            raise ValueError("probe_result needs `now` before any record was submitted")
        entry = next((e for e in reversed(self._probes.get(dst, ())) if e.kind == kind and e.finished is None), None)
        if entry is None:
            entry = _ProbeEntry(kind, now)
            self._probes[dst].append(entry)
        entry.finished, entry.outcome = now, dict(outcome)
        self._version += 1
        follow: list[tuple[str, int, str]] = []
        base: dict[str, Any] = dict(src=self.rank, dst=dst, time=now, host=outcome.get("host") or self.host_of(dst))
        lost = kind == PING and not outcome.get("ok") or kind == STATUS and outcome.get("ok") is False
        if lost:
            entry.finding = True
            self._add(ErrorRecord(type=PING_TIMEOUT, status=PROBING, evidence={"probe": kind}, **base))
            follow.append((VOTE, dst, f"rank {dst} does not answer the {kind} probe"))
        elif kind == PING:
            follow.append((STATUS, dst, f"rank {dst} answers pings; asking its state"))
        elif kind == STATUS:
            found = self._status_records(dst, outcome, base)
            entry.finding = bool(found)
            for rec in found:
                self._add(rec)
                w = rec.evidence.get("waiting_on") if rec.type == NO_SEND else None
                if isinstance(w, int) and w != dst and w != self.rank:
                    self._queries.setdefault(w, {"src": dst, **{k: v for k, v in (
                        ("comm", rec.comm), ("tag", rec.tag)) if v is not None}})
                    follow.append((PING, w, f"rank {dst} waits for rank {w}"))
        else:
            reachable, unreachable = _tally(outcome)
            votes = {"reachable": reachable, "unreachable": unreachable}
            if unreachable > 0 and unreachable >= reachable:
                entry.finding = True
                self._add(ErrorRecord(type=PING_TIMEOUT, status=CONFIRMED, evidence={"votes": votes}, **base))
            elif reachable > 0:
                lost_from = sorted({s for t, s in self._lost_pings.get(dst, ()) if abs(t - now) <= self.cause_window})
                if lost_from:
                    entry.finding = True
                    self._add(ErrorRecord(type=NETWORK, status=CONFIRMED,
                                          evidence={"votes": votes, "unreachable_from": lost_from}, **base))
                else:
                    follow.append((STATUS, dst, f"rank {dst} answers its group; asking its state"))
        probes = []
        for k, target, reason in follow:
            if self._covered(target, k, now) is None:
                probes.append(self._start(k, target, now, reason))
        return probes

    def _sent_lost(self, rank: Any, t: float) -> bool:
        """Whether a message ``rank`` sent was found lost (a ``network`` record) near time ``t``."""
        return isinstance(rank, int) and any(abs(x - t) <= self.cause_window for x in self._netfail.get(rank, ()))

    def _status_records(self, dst: int, out: dict, base: dict) -> list[ErrorRecord]:
        """Records a status reply supports (none when the target looks healthy)."""
        asked = out.get("for")
        q = (self._asked.get((dst, asked)) if isinstance(asked, int) else None) or self._queries.get(dst) or {}
        recs = []
        op = out.get("op")
        other = q.get("unmatched")
        recvd, sent_count = q.get("recvd"), out.get("sent_count")
        if (isinstance(other, dict) and other.get("source") == dst and isinstance(recvd, int)
                and isinstance(sent_count, int) and sent_count > recvd + 1):
            other = None     # the peer sent more than the message left over: one before it was lost
        elif (isinstance(other, dict) and other.get("source") != dst and not other.get("wildcard") and (
                out.get("sent") is True
                or (isinstance(op, dict) and op.get("kind") == "p2p" and isinstance(op.get("peer"), int)
                    and (op.get("peer") != q.get("src") or self._sent_lost(q.get("src"), base["time"]))))):
            # another rank's message waits here, maybe early, for a later receive; what explains the
            # wait is the peer: it sent a message that is not here (none of its messages waits here:
            # the waiter probes for them first), so it was lost; or it waits itself, for another rank
            # (followed below) or for this one, whose own message to it was lost
            other = None
        if isinstance(other, dict) and isinstance(other.get("tag"), int) and (
                out.get("sent") is True or other.get("source") != dst):
            # the waiting rank holds a message its receive does not match: the program's mismatch, not
            # a lost message (sent) nor simply a peer that does not send (another rank's message)
            ev = {"probe": "status", "waiting": q.get("src"), "source": other.get("source"), "tag": other.get("tag"),
                  "want": q.get("tag")}
            wild = other.get("wildcard")
            if isinstance(wild, dict) and isinstance(wild.get("site"), str):
                ev["wildcard_site"] = wild["site"]      # an ANY_SOURCE receive took this rank's message
            site = q.get("site")
            recs.append(ErrorRecord(type=UNMATCHED, status=CONFIRMED, evidence=_clean(ev), comm=q.get("comm"),
                                    tag=q.get("tag"), site=site if isinstance(site, str) else None, **base))
        elif out.get("sent") is True:
            ev = {"probe": "status", "sent_to": q.get("src"), "unreachable_from": [q["src"]] if "src" in q else []}
            recs.append(ErrorRecord(type=NETWORK, status=CONFIRMED, evidence=_clean(ev),
                                    comm=q.get("comm"), tag=q.get("tag"), **base))
        elif out.get("injected"):            # the fault plan hangs it: say so, whatever it looks like
            recs.append(ErrorRecord(type=PEER_COMPUTING, status=CONFIRMED,
                                    evidence=_clean({"injected": str(out["injected"]), "step": out.get("step")}),
                                    site=_str_or_none(out.get("where")), **base))
        elif op is None:
            idle = out.get("idle")
            if idle is None or idle >= self.computing_after:
                site = out.get("where")
                recs.append(ErrorRecord(type=PEER_COMPUTING, status=CONFIRMED,
                                        evidence=_clean({"idle": idle, "step": out.get("step")}),
                                        site=site if isinstance(site, str) else None, **base))
        elif isinstance(op, dict):
            peer = op.get("peer")
            ev = {"op": op.get("name"), "kind": op.get("kind"), "peer": peer, "since": op.get("since"),
                  "seq": op.get("seq")}
            if op.get("kind") == "p2p" and isinstance(peer, int) and peer != dst:
                ev["waiting_on"] = peer
            recs.append(ErrorRecord(type=NO_SEND, status=CONFIRMED, evidence=_clean(ev),
                                    comm=_str_or_none(op.get("comm")), tag=op.get("tag"),
                                    op=_str_or_none(op.get("name")), site=_str_or_none(op.get("site")), **base))
        n = out.get("ioerrors")
        if isinstance(n, int) and n > 0:
            recs.append(ErrorRecord(src=dst, dst=None, time=base["time"], type=IO_ERROR, status=CONFIRMED,
                                    evidence={"count": n, "probe": "status"}, host=base["host"]))
        return recs

    # ----------------------------------------------------------------- incidents

    def incidents(self, now: float | None = None) -> list[Incident]:
        """Root incidents (consequences folded in), in time order.  A pure function of the records
        held, except ``status``, which also depends on the probes in progress at ``now``."""
        clock = self._tick(now)
        if self._cache is not None and self._cache[0] == (self._version, clock):
            return list(self._cache[1])
        comps: dict[int, list[int]] = defaultdict(list)
        for rid in range(len(self._recs)):
            comps[self._find(rid)].append(rid)
        fired: dict[int, list[tuple[int, MergeRule, list[ErrorRecord]]]] = defaultdict(list)
        for (ri, _), clusters in self._clusters.items():
            for c in clusters:
                if c.fired:
                    fired[self._find(c.ids[0])].append((ri, self._merge[ri], c.records()))
        incs = [self._incident(ids, fired.get(root, []), clock) for root, ids in comps.items()]
        roots = self._correlate(incs)
        roots.sort(key=lambda i: (min(r.time for r in i.all_records()), _order_key(i)))
        self._cache = ((self._version, clock), roots)
        return list(roots)

    def _incident(self, ids: list[int], fired: list[tuple[int, MergeRule, list[ErrorRecord]]],
                  clock: float) -> Incident:
        recs = sorted((self._recs[i] for i in ids), key=ErrorRecord.sort_key)
        verdicts = [(1, v) for v in _type_verdicts(recs)]
        names = []
        for _ri, rule, window in sorted(fired, key=lambda f: (f[0], f[2][0].sort_key())):
            if rule.name not in names:
                names.append(rule.name)
            v = rule.decide(window, self)
            if v is not None:
                verdicts.append((0, v))
        best = min(verdicts, key=lambda sv: (-sv[1].priority, sv[0], sv[1].text, sv[1].ranks))[1]
        waiting = sorted({r.evidence["waiting_on"] for r in recs if r.type == NO_SEND
                          and isinstance(r.evidence.get("waiting_on"), int)})
        involved = set(best.ranks) | set(waiting)
        involved.update(r.src for r in recs if r.type in HANG_TYPES or r.type == SLOW_MESSAGE)
        hosts = {r.host for r in recs if r.host is not None}
        hosts.update(h for h in map(self.host_of, best.ranks) if h is not None)
        host = best.host
        if host is None and best.ranks:
            hs = {self.host_of(r) or next((x.host for x in recs if x.subject == r and x.host), None)
                  for r in best.ranks}
            host = hs.pop() if len(hs) == 1 else None
        inc = Incident(kind=best.kind, verdict=best.text, priority=best.priority, ranks=tuple(best.ranks),
                       host=host, records=tuple(recs), rules=tuple(names), first=recs[0].time,
                       last=recs[-1].time, waiting_on=tuple(waiting), involved=frozenset(involved),
                       hosts=frozenset(hosts), max_evidence=self.max_evidence)
        inc.status = self._status_of(inc, clock)
        return inc

    def _status_of(self, inc: Incident, clock: float) -> str:
        if inc.kind in _CONFIRMED_KINDS:
            return CONFIRMED
        entries = [e for r in inc.ranks for e in self._probes.get(r, ())]
        if any(e.finished is None and clock - e.started <= self.probe_timeout for e in entries):
            return PROBING
        if any(e.kind == STATUS and e.finished is not None and e.finished >= inc.first and not e.finding
               for e in entries):
            return REFUTED
        return DETECTED

    def _correlate(self, incs: list[Incident]) -> list[Incident]:
        """Attach every incident some correlation rule explains to its root; return the roots."""
        incs.sort(key=_order_key)
        by_rank: dict[int, set[int]] = defaultdict(set)
        by_host: dict[str, set[int]] = defaultdict(set)
        for i, inc in enumerate(incs):
            for r in inc.involved:
                by_rank[r].add(i)
            for h in inc.hosts:
                by_host[h].add(i)
        parent: list[tuple[int, str] | None] = [None] * len(incs)
        everyone = range(len(incs))
        for j, other in enumerate(incs):
            if other.ranks:
                cands: set[int] = set()
                for r in other.involved:
                    cands |= by_rank.get(r, set())
                for h in other.hosts:
                    cands |= by_host.get(h, set())
            else:
                cands = set(everyone)
            for i in sorted(cands):
                if i == j:
                    continue
                root = incs[i]
                rule = next((c for c in self._corr if _order_ok(c.order, i, j, root, other)
                             and c.explains(root, other, self)), None)
                if rule is not None:
                    parent[j] = (i, rule.name)
                    break
        # cut cycles (only "none"-order rules can make them) at their highest-ranked incident
        state = [0] * len(incs)  # 0 new, 1 on path, 2 done
        for s in range(len(incs)):
            path = []
            v: int | None = s
            while v is not None and state[v] == 0:
                state[v] = 1
                path.append(v)
                link = parent[v]
                v = link[0] if link else None
            if v is not None and state[v] == 1:
                cycle = path[path.index(v):]
                parent[min(cycle)] = None
            for x in path:
                state[x] = 2

        def root_of(x: int) -> int:
            while (up := parent[x]) is not None:
                x = up[0]
            return x

        roots = [i for i in range(len(incs)) if parent[i] is None]
        extra: dict[int, list[str]] = defaultdict(list)
        for j in range(len(incs)):
            link = parent[j]
            if link is not None:
                top = root_of(j)
                incs[top].consequences.append((link[1], incs[j]))
                extra[top].append(link[1])
                extra[top].extend(incs[j].rules)
        order = {r.name: k for k, r in enumerate(self.rules)}
        for i in roots:
            names = set(incs[i].rules) | set(extra.get(i, ()))
            incs[i].rules = tuple(sorted(names, key=lambda n: (order.get(n, len(order)), n)))
        return [incs[i] for i in roots]


def _order_key(inc: Incident) -> tuple:
    """Total order of incidents: higher priority, earlier, lower ranks first (records break ties)."""
    return (-inc.priority, inc.first, inc.ranks, inc.kind, inc.verdict, inc.last,
            tuple(r.sort_key() for r in inc.records))


def _order_ok(order: str, i: int, j: int, root: Incident, other: Incident) -> bool:
    if order == "rank":
        return i < j
    if order == "priority":
        return root.priority > other.priority
    return True


def _needed_probe(rec: ErrorRecord) -> str | None:
    """The first probe a record calls for (paper: ping for a one-to-one timeout, status once it answers)."""
    if rec.dst is None or rec.status in (CONFIRMED, REFUTED):
        return None
    if rec.type == MSG_TIMEOUT:
        return STATUS if rec.evidence.get("ping") is True else PING
    if rec.type in (PING_TIMEOUT, COLL_TIMEOUT, EXTERNAL):
        return PING
    return None


def _tally(outcome: dict) -> tuple[int, int]:
    votes = outcome.get("votes")
    if isinstance(votes, dict):
        yes = sum(1 for v in votes.values() if v is True)
        return yes, sum(1 for v in votes.values() if v is False)
    reach, unreach = outcome.get("reachable", 0), outcome.get("unreachable", 0)
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (reach, unreach)):
        raise ValueError(f"vote outcome: reachable/unreachable must be counts, got {outcome!r}")
    return reach, unreach


def _clean(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


# --------------------------------------------------------------------------- TOML loading

_MERGE_KEYS = {"name", "doc", "type", "types", "same", "min_count", "min_sources", "window", "verdict",
               "priority", "kind", "blame", "probe"}
_CORR_KEYS = {"name", "doc", "root", "consequence", "link", "unknown", "window", "order"}


def load_rules(path: str | Path) -> list[Rule]:
    """Rules declared in a TOML file (format in the module docstring).  ValueError naming the file
    and the problem, on one line, when the file is unreadable or wrong."""
    import tomllib                   # here: only a rule file needs the TOML parser
    from pathlib import Path
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ValueError(f"{p}: cannot read rules file: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{p}: invalid TOML: {' '.join(str(exc).split())}") from None
    unknown = sorted(set(data) - {"merge", "correlate"})
    if unknown:
        raise ValueError(f"{p}: unknown section {unknown[0]!r} (expected [[merge]] or [[correlate]])")
    rules: list[Rule] = []
    names: set[str] = set()
    for section, allowed in (("merge", _MERGE_KEYS), ("correlate", _CORR_KEYS)):
        tables = data.get(section, [])
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise ValueError(f"{p}: {section} must be an array of tables ([[{section}]])")
        for n, table in enumerate(tables, 1):
            where = f"{p}: [[{section}]] #{n}" + (f" ({table['name']})" if isinstance(table.get("name"), str) else "")
            bad = sorted(set(table) - allowed)
            if bad:
                raise ValueError(f"{where}: unknown key {bad[0]!r}")
            if "name" not in table:
                raise ValueError(f"{where}: missing key 'name'")
            try:
                rule = _merge_from_table(table) if section == "merge" else _corr_from_table(table)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{where}: {' '.join(str(exc).split())}") from None
            if rule.name in names:
                raise ValueError(f"{where}: duplicate rule name {rule.name!r}")
            names.add(rule.name)
            rules.append(rule)
    return rules


def _merge_from_table(t: dict) -> FieldMergeRule:
    if "type" in t and "types" in t:
        raise ValueError("give either 'type' or 'types', not both")
    if "verdict" not in t:
        raise ValueError("missing key 'verdict'")
    types = t.get("types", t.get("type", "*"))
    kwargs = {k: t[k] for k in ("same", "min_count", "min_sources", "window", "verdict", "priority",
                                "kind", "blame", "probe", "doc") if k in t}
    for k in ("doc", "kind", "verdict", "blame", "probe"):
        if k in kwargs and not isinstance(kwargs[k], str):
            raise ValueError(f"{k} must be a string, got {kwargs[k]!r}")
    return FieldMergeRule(t["name"], types=types, **kwargs)


def _corr_from_table(t: dict) -> KindCorrelationRule:
    if "root" not in t:
        raise ValueError("missing key 'root'")
    kwargs = {k: t[k] for k in ("link", "unknown", "window", "order", "doc") if k in t}
    if "doc" in kwargs and not isinstance(kwargs["doc"], str):
        raise ValueError(f"doc must be a string, got {kwargs['doc']!r}")
    return KindCorrelationRule(t["name"], roots=t["root"], consequences=t.get("consequence"), **kwargs)
