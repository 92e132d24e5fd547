"""Topology-aware responsible ranks: who analyses the errors reported about a rank.

Ranks are grouped by host (``hosts[r]`` is the host of world rank ``r``); groups are
ordered by their lowest rank.  The responsible rank of every rank in group ``g`` is
the lowest rank of group ``g + 1`` (cyclically), so a node failure never takes the
responsible rank of its own ranks down with it.

With a single host, ranks are split into consecutive *virtual groups* of ``group``
ranks and the same rule applies to those groups; when the job has no more than
``group`` ranks the group size becomes ``ceil(n / 2)`` so that there are still two
groups and no rank is responsible for itself.  A one-rank job is responsible for
itself.

The group of a rank (:func:`group_of`) is what a vote probe asks to ping it.
"""
from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Topology", "host_groups", "responsible", "responsibles", "group_of", "voters"]


def host_groups(hosts: Sequence[str]) -> list[list[int]]:
    """Ranks grouped by host, groups ordered by their lowest rank, ranks ascending."""
    if len(hosts) == 0:
        raise ValueError("topology: the job has no ranks (empty hosts list)")
    groups: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        groups.setdefault(host, []).append(rank)
    return list(groups.values())


class Topology:
    """Groups and responsible ranks of one job, computed once (O(n)) and looked up in O(1)."""

    def __init__(self, hosts: Sequence[str], group: int = 4) -> None:
        if isinstance(group, bool) or not isinstance(group, int) or group < 1:
            raise ValueError(f"topology: group must be a positive integer, got {group!r}")
        self.hosts: tuple[str, ...] = tuple(hosts)
        self.size = len(self.hosts)
        by_host = host_groups(self.hosts)
        if len(by_host) > 1 or self.size == 1:
            groups = by_host
        else:
            size = min(group, -(-self.size // 2))
            groups = [list(range(i, min(i + size, self.size))) for i in range(0, self.size, size)]
        self.groups: tuple[tuple[int, ...], ...] = tuple(tuple(g) for g in groups)
        self._index = [0] * self.size
        for gi, members in enumerate(self.groups):
            for r in members:
                self._index[r] = gi
        n = len(self.groups)
        self._resp = [self.groups[(self._index[r] + 1) % n][0] for r in range(self.size)]

    def _check(self, rank: int) -> int:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.size:
            raise ValueError(f"topology: rank {rank!r} is not in 0..{self.size - 1}")
        return rank

    def responsible(self, rank: int) -> int:
        """The rank that analyses errors reported about ``rank``."""
        return self._resp[self._check(rank)]

    def group_of(self, rank: int) -> list[int]:
        """Ranks sharing ``rank``'s host (or virtual group), ``rank`` included."""
        return list(self.groups[self._index[self._check(rank)]])

    def responsible_for(self, rank: int) -> list[int]:
        """Ranks whose responsible rank is ``rank`` (empty unless it is the lowest of its group)."""
        self._check(rank)
        return [r for r in range(self.size) if self._resp[r] == rank]

    def voters(self, target: int, limit: int | None = None) -> list[int]:
        """Ranks a vote probe asks to ping ``target``: its group mates; when it is alone in its
        group, the ranks of the next group (and of the following ones, cyclically, until there are
        ``limit``); at most ``limit`` of them."""
        mates = [r for r in self.group_of(target) if r != target]
        if not mates:
            gi = self._index[target]
            for k in range(1, len(self.groups)):
                mates.extend(r for r in self.groups[(gi + k) % len(self.groups)] if r != target)
                if mates and (limit is None or len(mates) >= limit):
                    break
        return mates if limit is None else mates[:limit]


def responsible(rank: int, hosts: Sequence[str], group: int = 4) -> int:
    """The responsible rank of ``rank``: the lowest rank of the next host (or virtual group)."""
    return Topology(hosts, group).responsible(rank)


def responsibles(hosts: Sequence[str], group: int = 4) -> list[int]:
    """The responsible rank of every rank, in rank order (one O(n) pass)."""
    return list(Topology(hosts, group)._resp)


def group_of(rank: int, hosts: Sequence[str], group: int = 4) -> list[int]:
    """Ranks sharing ``rank``'s host, or its virtual group on a single host (``rank`` included)."""
    return Topology(hosts, group).group_of(rank)


def voters(target: int, hosts: Sequence[str], group: int = 4, limit: int | None = None) -> list[int]:
    """Ranks a vote probe of ``target`` asks to ping it (see :meth:`Topology.voters`)."""
    return Topology(hosts, group).voters(target, limit)
