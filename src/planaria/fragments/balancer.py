"""Centralized dynamic load balancer ([Vlasenko 2022] §6): the load model and the balancing plan (pure).

The balancer rank hears "ready" (CF id, code-block group, input size) and "done" (CF id,
group, duration) from the workers. A CF's weight is the mean duration of the finished CFs of its
group (the balancer groups CFs by code block, over all processes), else the mean of every CF
finished on its process (else the mean over all processes, else 1.0 before anything finished). After each message: if fewer than
JOBS_LEFT_THRESHOLD CFs are outstanding, stop; find the least (H1) and most (H2) loaded
workers; if (H2 - H1) / H2 < JOBS_DIFFERENCE_RATIO, stop; else move ready CFs from the most
loaded to the least loaded in decreasing weight (equal weights: higher ``priority`` first, then the
newest), each counted as WEIGHT - SIZE/SPEED - LATENCY
(skipped when that is not positive), never pushing the receiver above the mean load; repeat.
``receiver_cap="donor"`` (an extension, not the paper's) moves a CF whenever the receiver, with
it and the transfer, stays below the donor's load before the move (the CF ends sooner there; it
can never move back), and as long as the receiver holds at most one CF beyond its free slots
(one waits, ready to start, while the others run): with few outstanding CFs the mean is below
one CF's weight and the paper's rule forbids every move, leaving idle workers idle; and a CF
queued deeper behind a long-running one waits there while other workers go idle.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planaria.fragments import settings
from planaria.util.env import (
    PLANARIA_BALANCER_CAP,
    PLANARIA_JOBS_DIFFERENCE_RATIO,
    PLANARIA_JOBS_LEFT_THRESHOLD,
)


@dataclass
class BalancerConfig:
    """Tunables: JOBS_LEFT_THRESHOLD, JOBS_DIFFERENCE_RATIO (0..1)."""

    jobs_left_threshold: int = 2
    jobs_difference_ratio: float = 0.2
    receiver_cap: str = "mean"      # "mean": §6 (receiver stays <= the mean load); "donor": below the donor's load, one CF queued

    def __post_init__(self) -> None:
        if self.receiver_cap not in ("mean", "donor"):
            raise ValueError("receiver_cap must be 'mean' (the paper's rule) or 'donor'")
        if self.jobs_left_threshold < 0:
            raise ValueError("JOBS_LEFT_THRESHOLD must be >= 0")
        if not 0.0 <= self.jobs_difference_ratio <= 1.0:
            raise ValueError("JOBS_DIFFERENCE_RATIO must be in [0, 1]")

    @classmethod
    def from_env(cls) -> BalancerConfig:
        """Read PLANARIA_JOBS_LEFT_THRESHOLD / PLANARIA_JOBS_DIFFERENCE_RATIO (set by the CLI)."""
        d = cls()
        return cls(settings.number(PLANARIA_JOBS_LEFT_THRESHOLD, int, d.jobs_left_threshold, minimum=0),
                   settings.number(PLANARIA_JOBS_DIFFERENCE_RATIO, float, d.jobs_difference_ratio, minimum=0.0),
                   settings.choice(PLANARIA_BALANCER_CAP, ("mean", "donor"), d.receiver_cap))


@dataclass
class _Job:
    group: str
    size: int
    seq: int
    prio: float = 0.0
    movable: bool = True


@dataclass
class LoadModel:
    """The balancer's view: outstanding CFs per worker, finished durations per worker and group, link costs."""

    workers: int
    config: BalancerConfig = field(default_factory=BalancerConfig)
    latency: list[float] | None = None       # seconds, balancer <-> worker
    bandwidth: list[float] | None = None     # bytes/s, balancer <-> worker
    slots: int = 1                           # CFs a worker runs at once (its pool threads)

    def __post_init__(self) -> None:
        self.jobs: list[dict[str, _Job]] = [{} for _ in range(self.workers)]
        self.done_group: list[dict[str, list[float]]] = [{} for _ in range(self.workers)]   # [sum, count]
        self.done_all: list[list[float]] = [[0.0, 0] for _ in range(self.workers)]
        self.where: dict[str, int] = {}
        self._seq = 0
        self.moves = 0
        self._wmemo: dict[tuple[int, str], float] = {}     # weights until the next "done" (a plan asks often)

    # -- messages --------------------------------------------------------------------------
    def ready(self, worker: int, cf: str, group: str, size: int = 0, prio: float = 0.0) -> None:
        prev = self.where.get(cf)
        if prev is not None and prev != worker:     # a moved CF is ready where it arrived: one place only
            self.jobs[prev].pop(cf, None)
        self._seq += 1
        self.jobs[worker][cf] = _Job(group, int(size), self._seq, float(prio))
        self.where[cf] = worker

    def done(self, worker: int, cf: str, group: str, duration: float) -> None:
        self._wmemo.clear()
        w = self.where.pop(cf, worker)
        self.jobs[w].pop(cf, None)
        self.jobs[worker].pop(cf, None)             # where it ran, whatever the model believed
        g = self.done_group[worker].setdefault(group, [0.0, 0])
        g[0] += duration
        g[1] += 1
        self.done_all[worker][0] += duration
        self.done_all[worker][1] += 1

    def unmovable(self, worker: int, cfs: list[str]) -> None:
        """A move found these CFs already started on ``worker``: they stay there for good."""
        for cf in cfs:
            prev = self.where.get(cf)
            if prev is None:
                continue
            job = self.jobs[prev].pop(cf, None)
            if job is not None:
                job.movable = False
                self.jobs[worker][cf] = job
                self.where[cf] = worker

    # -- weights -----------------------------------------------------------------------------
    def weight(self, worker: int, group: str) -> float:
        """Mean duration of the group's finished CFs, else of every CF finished on ``worker``, else overall, else 1.0."""
        key = (worker, group)
        w = self._wmemo.get(key)
        if w is None:
            w = self._wmemo[key] = self._weight(worker, group)
        return w

    def _weight(self, worker: int, group: str) -> float:
        gs = sum(d[group][0] for d in self.done_group if group in d)
        gc = sum(d[group][1] for d in self.done_group if group in d)
        if gc:
            return gs / gc
        s, c = self.done_all[worker]
        if c:
            return s / c
        tot = sum(d[0] for d in self.done_all)
        cnt = sum(d[1] for d in self.done_all)
        return tot / cnt if cnt else 1.0

    def load(self, worker: int) -> float:
        return sum(self.weight(worker, j.group) for j in self.jobs[worker].values())

    def outstanding(self) -> int:
        return sum(len(j) for j in self.jobs)

    def transfer(self, src: int, dst: int, size: int) -> float:
        """SIZE/SPEED + LATENCY between two workers, from the measured balancer links (the slower of the two)."""
        lat = max(self.latency[src], self.latency[dst]) if self.latency else 0.0
        bw = min(self.bandwidth[src], self.bandwidth[dst]) if self.bandwidth else float("inf")
        return (size / bw if bw > 0 else 0.0) + lat

    # -- the plan ------------------------------------------------------------------------------
    def plan(self) -> list[tuple[int, int, list[str]]]:
        """Balancing moves (src, dst, CF ids) per the §6 algorithm; the model is updated as if they happened."""
        moves: list[tuple[int, int, list[str]]] = []
        if self.workers < 2 or self.outstanding() < self.config.jobs_left_threshold:
            return moves
        tried: set[tuple[int, int]] = set()
        while True:
            loads = [self.load(w) for w in range(self.workers)]
            order = sorted(range(self.workers), key=lambda w: loads[w])
            p1, p2 = order[0], order[-1]
            h1, h2 = loads[p1], loads[p2]
            if h2 <= 0 or (h2 - h1) / h2 < self.config.jobs_difference_ratio or (p2, p1) in tried:
                return moves
            tried.add((p2, p1))
            mean = sum(loads) / self.workers
            cands = [(self.weight(p2, j.group), j.seq, cf, j) for cf, j in self.jobs[p2].items() if j.movable]
            cands.sort(key=lambda t: (-t[0], -t[3].prio, -t[1]))
            recv_load, donor_load = h1, h2
            sent: list[str] = []
            for w, _seq, cf, j in cands:
                cost = self.transfer(p2, p1, j.size)
                new_w = w - cost
                if new_w <= 0:
                    continue
                w_recv = self.weight(p1, j.group)      # the receiver's own estimate of this CF
                if self.config.receiver_cap == "mean":
                    if recv_load + w_recv + cost > mean + 1e-12:
                        continue
                elif recv_load + w_recv + cost >= donor_load - 1e-12:
                    continue        # the receiver would not end before the donor would have: no gain
                elif len(self.jobs[p1]) + len(sent) > self.slots:
                    break           # the receiver already has a CF waiting for a free slot
                recv_load += w_recv + cost
                donor_load -= w
                sent.append(cf)
            if not sent:
                continue
            for cf in sent:
                job = self.jobs[p2].pop(cf)
                self.jobs[p1][cf] = job
                self.where[cf] = p1
            self.moves += len(sent)
            moves.append((p2, p1, sent))

    def alternates(self, src: int, planned: list[str], limit: int = 4) -> list[str]:
        """Other movable CFs of ``src``, in the plan's order: the donor ships these instead of planned
        CFs it has started meanwhile (the balancer hears of a start only when the CF is done)."""
        groups = {j.group for cf, j in self.jobs[src].items() if cf in planned}
        groups |= {self.jobs[w][cf].group for cf in planned for w in [self.where.get(cf)]
                   if w is not None and cf in self.jobs[w]}
        # same groups as the planned CFs: the same weight, so the plan's receiver rule still holds
        cands = [(self.weight(src, j.group), j.prio, j.seq, cf) for cf, j in self.jobs[src].items()
                 if j.movable and cf not in planned and j.group in groups]
        cands.sort(key=lambda t: (-t[0], -t[1], -t[2]))
        return [cf for *_, cf in cands[:limit]]

    def shipped(self, src: int, dst: int, planned: list[str], moved: list[str], stuck: list[str]) -> None:
        """A donor's answer to a move: ``moved`` went to ``dst`` (alternates included), ``stuck`` had
        started on ``src``; planned CFs it did not need to ship stay on ``src``. (``moves`` keeps
        counting the planned moves.)"""
        self.unmovable(src, stuck)
        for cf in moved:
            prev = self.where.get(cf)
            if prev is not None and prev != dst:
                self.jobs[dst][cf] = self.jobs[prev].pop(cf)
                self.where[cf] = dst
        for cf in planned:
            prev = self.where.get(cf)
            if cf not in moved and cf not in stuck and prev is not None and prev != src:
                self.jobs[src][cf] = self.jobs[prev].pop(cf)
                self.where[cf] = src

    def snapshot(self) -> dict[str, Any]:
        return {"loads": [round(self.load(w), 6) for w in range(self.workers)],
                "outstanding": self.outstanding(), "moves": self.moves}
