"""Algorithm 2 (task recovery) as a pure planner, and the primary/replica masters ([Song 2013]).

Statuses are per *block*. Block b starts on worker b, and after a reassignment the status
of block b refers to whoever holds it. ``plan`` maps the statuses to actions:

* CORRECT (10): nothing.
* TRANSIENT (1), no in-place retry yet: ``recompute`` on the same worker, then ``verify``
  (re-run the comparisons at the block's boundaries, paper step (2): "rewrite V, re-run
  error detection").
* TRANSIENT again after an in-place retry: the paper says "otherwise the node is unusable,
  remove it". The worker is ``exclude``-d and the block ``reassign``-ed.
* UNRECOVERABLE (0): ``exclude`` the worker and ``reassign`` the block, then ``verify``.

The reassignment target is the live, non-excluded worker with the fewest blocks, counting
the assignments made earlier in the same plan; ties go to the lowest rank. Blocks are
handled in block order, so the plan is deterministic. All exclusions in a plan are decided
before any target is chosen, so an excluded worker is never a target. A block due for an
in-place retry whose owner another block's failure excludes is moved as well. If no live
worker is left, ``NoLiveWorkerError`` is raised. Other blocks that an excluded worker holds
and that were verified CORRECT keep their results and their owner in this plan. If such a
block fails later, it is moved, because its owner is excluded.

Masters: both hold F and the block table PNeigh. ``cross_check`` compares them. Algorithm 1
step (3) says that a master silent for longer than TMaxLat is failed and the other one's
data is taken. The paper does not say what happens when both answer but disagree. This
model then takes the element-wise minimum of F (a worker is CORRECT only if both masters
say so), which errs toward recomputation.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from planaria.abft.partition import Block
from planaria.abft.verify import CORRECT, STATUSES, TRANSIENT, UNRECOVERABLE
from planaria.errors import PlanariaError


class NoLiveWorkerError(PlanariaError, RuntimeError):
    """No live, non-excluded worker is left to take a failed block."""


@dataclass(frozen=True)
class Action:
    """``kind`` is recompute | exclude | reassign | verify. ``worker`` is the worker it acts on, ``source`` the previous owner."""

    kind: str
    block: int
    worker: int
    source: int | None = None


@dataclass
class Plan:
    actions: list[Action]
    assignment: dict[int, int]   # block -> worker after the plan
    excluded: set[int]
    attempts: dict[int, int]     # block -> in-place recomputations on its current owner


def _pick(alive: Iterable[int], excluded: set[int], assignment: Mapping[int, int], block: int) -> int:
    cand = sorted(w for w in alive if w not in excluded)
    if not cand:
        raise NoLiveWorkerError(f"block {block}: no live worker left (all excluded or dead)")
    load = {w: 0 for w in cand}
    for w in assignment.values():
        if w in load:
            load[w] += 1
    return min(cand, key=lambda w: (load[w], w))


def plan(
    f: Sequence[int] | Mapping[int, int],
    assignment: Mapping[int, int],
    alive: Iterable[int],
    excluded: Iterable[int] = (),
    attempts: Mapping[int, int] | None = None,
) -> Plan:
    """Algorithm 2: recovery actions for block statuses ``f``. The inputs are not modified."""
    fs = dict(enumerate(f)) if not isinstance(f, Mapping) else dict(f)
    alive = sorted(set(alive))
    assign = dict(assignment)
    excl = set(excluded)
    tries = {b: 0 for b in assign} | dict(attempts or {})
    actions: list[Action] = []
    # phase 1: decide who recomputes in place and which owners are excluded, so that no
    # block is reassigned to a worker that a later block in this plan excludes
    moving: list[int] = []
    in_place: list[int] = []
    for b in sorted(fs):
        s = fs[b]
        if s not in STATUSES:
            raise ValueError(f"block {b}: unknown status {s}")
        if s == CORRECT:
            continue
        owner = assign[b]
        usable = owner in alive and owner not in excl
        if s == TRANSIENT and tries.get(b, 0) == 0 and usable:
            in_place.append(b)
        else:
            moving.append(b)
    newly_excluded: dict[int, int] = {}  # worker -> first block that excluded it
    for b in moving:
        owner = assign[b]
        if owner not in excl:
            excl.add(owner)
            newly_excluded[owner] = b
    # a transient retry on a worker excluded by another block's failure moves as well
    for b in list(in_place):
        if assign[b] in excl:
            in_place.remove(b)
            moving.append(b)
    # phase 2: actions in block order
    moving_set = set(moving)
    for b in sorted(in_place + moving):
        owner = assign[b]
        if b not in moving_set:
            actions.append(Action("recompute", b, owner))
            tries[b] = 1
        else:
            if newly_excluded.get(owner) == b:
                actions.append(Action("exclude", b, owner))
            target = _pick(alive, excl, {k: w for k, w in assign.items() if k != b}, b)
            assign[b] = target
            tries[b] = 0
            actions.append(Action("reassign", b, target, source=owner))
            actions.append(Action("recompute", b, target))
        actions.append(Action("verify", b, assign[b]))
    return Plan(actions, assign, excl, tries)


def mark_verified(p: Plan, f: Mapping[int, int]) -> dict[int, int]:
    """Attempt counts after re-verification: a block found CORRECT is cleared, so a later transient can retry in place."""
    return {b: (0 if f.get(b) == CORRECT else n) for b, n in p.attempts.items()}


# ---------------------------------------------------------------------------- masters

@dataclass(frozen=True)
class MasterState:
    """What one master holds: F (per block) and PNeigh (the block table with owners)."""

    f: tuple[int, ...]
    pneigh: tuple[Block, ...]
    owners: tuple[int, ...] = field(default=())
    last_heard: float = 0.0  # when the other master last heard from this one


def cross_check(primary: MasterState, replica: MasterState) -> bool:
    """Both masters agree on F, PNeigh and the owners."""
    return (primary.f, primary.pneigh, primary.owners) == (replica.f, replica.pneigh, replica.owners)


@dataclass(frozen=True)
class Outcome:
    finisher: str                 # "primary" | "replica"
    f: tuple[int, ...]
    master_status: dict[str, int]  # f_{N+1}, f_{N+2}
    agreed: bool


def finish(primary: MasterState, replica: MasterState, t_now: float, tmaxlat: float) -> Outcome:
    """Algorithm 1 step (3): which master outputs, and with which F.

    A master silent for longer than TMaxLat is marked UNRECOVERABLE and the other one
    finishes with its own F. If both are live and agree, the primary finishes. If they
    disagree, the primary finishes with the element-wise minimum of the two F. If both
    are silent, NoLiveWorkerError is raised.
    """
    p_ok = t_now - primary.last_heard <= tmaxlat
    r_ok = t_now - replica.last_heard <= tmaxlat
    status = {"primary": CORRECT if p_ok else UNRECOVERABLE, "replica": CORRECT if r_ok else UNRECOVERABLE}
    if not p_ok and not r_ok:
        raise NoLiveWorkerError("both masters silent beyond TMaxLat")
    if not r_ok:
        return Outcome("primary", primary.f, status, agreed=False)
    if not p_ok:
        return Outcome("replica", replica.f, status, agreed=False)
    if cross_check(primary, replica):
        return Outcome("primary", primary.f, status, agreed=True)
    if len(primary.f) != len(replica.f):
        raise ValueError("masters disagree on the number of blocks")
    merged = tuple(min(a, b) for a, b in zip(primary.f, replica.f, strict=True))
    return Outcome("primary", merged, status, agreed=False)


__all__ = ["Action", "MasterState", "NoLiveWorkerError", "Outcome", "Plan", "cross_check",
           "finish", "mark_verified", "plan", "TRANSIENT", "UNRECOVERABLE", "CORRECT"]
