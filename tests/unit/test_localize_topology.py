"""Unit tests of responsible ranks and vote groups (planaria.localize.topology)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planaria.localize.topology import (
    Topology,
    group_of,
    host_groups,
    responsible,
    responsibles,
    voters,
)


def test_host_groups_ordered_by_lowest_rank() -> None:
    assert host_groups(["b", "a", "b", "c", "a"]) == [[0, 2], [1, 4], [3]]


def test_responsible_is_lowest_rank_of_next_host_cyclic() -> None:
    hosts = ["n0", "n0", "n1", "n1", "n2"]
    assert [responsible(r, hosts) for r in range(5)] == [2, 2, 4, 4, 0]
    assert responsibles(hosts) == [2, 2, 4, 4, 0]


def test_interleaved_hosts() -> None:
    hosts = ["x", "y", "x", "y"]  # round-robin placement
    assert responsibles(hosts) == [1, 0, 1, 0]
    assert group_of(2, hosts) == [0, 2]


def test_single_host_uses_virtual_groups() -> None:
    hosts = ["h"] * 10
    t = Topology(hosts, group=4)
    assert t.groups == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9))
    assert [t.responsible(r) for r in (0, 3, 4, 7, 8, 9)] == [4, 4, 8, 8, 0, 0]
    assert group_of(5, hosts, 4) == [4, 5, 6, 7]


def test_single_host_smaller_than_group_still_has_two_groups() -> None:
    assert Topology(["h"] * 3, group=4).groups == ((0, 1), (2,))
    assert responsibles(["h"] * 3) == [2, 2, 0]
    assert responsibles(["h"] * 2) == [1, 0]


def test_one_rank_job_is_responsible_for_itself() -> None:
    assert responsible(0, ["only"]) == 0
    assert group_of(0, ["only"]) == [0]
    assert voters(0, ["only"]) == []


def test_voters_are_group_mates_or_next_hosts() -> None:
    hosts = ["a", "a", "a", "b", "c", "c"]
    assert voters(1, hosts) == [0, 2]
    assert voters(3, hosts) == [4, 5]            # alone on b: ranks of the next host
    assert voters(3, hosts, limit=3) == [4, 5, 0]  # not enough: keep going cyclically
    assert Topology(hosts).responsible_for(3) == [0, 1, 2]


@pytest.mark.parametrize("call", [
    lambda: responsible(5, ["a", "b"]),
    lambda: responsible(-1, ["a", "b"]),
    lambda: responsible(0, []),
    lambda: responsible(0, ["a"], group=0),
    lambda: group_of(2, ["a", "a"]),
])
def test_bad_input_is_value_error(call) -> None:
    with pytest.raises(ValueError):
        call()


hosts_lists = st.lists(st.sampled_from(["n0", "n1", "n2", "n3", "n4"]), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(hosts=hosts_lists, group=st.integers(1, 6))
def test_properties(hosts: list[str], group: int) -> None:
    n = len(hosts)
    resp = responsibles(hosts, group)
    # every rank has exactly one responsible rank, the same on every call
    assert len(resp) == n and all(0 <= x < n for x in resp)
    assert resp == responsibles(list(hosts), group)
    assert [responsible(r, hosts, group) for r in range(n)] == resp
    groups = Topology(hosts, group).groups
    assert sorted(r for g in groups for r in g) == list(range(n))  # groups partition the ranks
    heads = {g[0] for g in groups}
    for r in range(n):
        members = group_of(r, hosts, group)
        assert r in members
        assert resp[r] in heads  # a responsible rank is the lowest rank of its group
        if len(set(hosts)) > 1:
            assert hosts[resp[r]] != hosts[r]  # a node failure never takes its own responsible rank
        if n > 1:
            assert resp[r] != r and resp[r] not in members
        else:
            assert resp[r] == r
