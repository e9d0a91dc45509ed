"""The placement function and the assignment record: balance, exactly-once placement, minimal movement, format."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.cluster.balancing import moved_containers, rebalance
from segstore_shared.cluster.layout import (
    AssignmentFormatError,
    ContainerAssignment,
    ContainerCountMismatchError,
    HostInfo,
    host_id,
    parse_host_id,
)

pytestmark = pytest.mark.unit


def check_invariants(assignment: ContainerAssignment, live: list[str]) -> None:
    placed = sorted(cid for ids in assignment.hosts.values() for cid in ids)
    assert placed == list(range(assignment.container_count)), "every container on exactly one host"
    assert set(assignment.hosts) == set(live)
    sizes = [len(ids) for ids in assignment.hosts.values()]
    assert max(sizes) - min(sizes) <= 1, f"unbalanced: {assignment.hosts}"


def least_moves(current: ContainerAssignment, live: list[str], container_count: int) -> int:
    """Fewest containers that must leave a live host: each may keep `base`, and `extra` of them one more."""
    base, extra = divmod(container_count, len(live))
    held = {host: len(current.hosts.get(host, ())) for host in live}
    may_keep = sum(min(n, base) for n in held.values()) + min(extra, sum(1 for n in held.values() if n > base))
    return sum(held.values()) - may_keep


def test_rebalance_with_no_assignment_places_everything_evenly() -> None:
    result = rebalance(None, ["b:1", "a:1", "c:1"], 8)
    check_invariants(result, ["a:1", "b:1", "c:1"])
    assert sorted(len(ids) for ids in result.hosts.values()) == [2, 3, 3]


def test_rebalance_with_host_gone_moves_only_its_containers() -> None:
    current = ContainerAssignment.of(4, {"a:1": [0, 1], "b:1": [2, 3]})
    result = rebalance(current, ["a:1"], 4)
    assert result.hosts == {"a:1": (0, 1, 2, 3)}
    assert moved_containers(current, result) == {2: ("b:1", "a:1"), 3: ("b:1", "a:1")}


def test_rebalance_with_new_host_takes_only_from_overloaded_hosts() -> None:
    current = ContainerAssignment.of(6, {"a:1": [0, 1, 2], "b:1": [3, 4, 5]})
    result = rebalance(current, ["a:1", "b:1", "c:1"], 6)
    check_invariants(result, ["a:1", "b:1", "c:1"])
    moves = moved_containers(current, result)
    assert len(moves) == 2 and all(new == "c:1" for _old, new in moves.values())
    assert {old for old, _new in moves.values()} == {"a:1", "b:1"}, "one from each over-loaded host"


def test_rebalance_with_balanced_hosts_changes_nothing() -> None:
    current = ContainerAssignment.of(5, {"a:1": [0, 4], "b:1": [1, 3], "c:1": [2]})
    assert rebalance(current, ["a:1", "b:1", "c:1"], 5) == current


def test_rebalance_with_every_host_gone_assigns_nothing() -> None:
    current = ContainerAssignment.of(4, {"a:1": [0, 1], "b:1": [2, 3]})
    result = rebalance(current, [], 4)
    assert result.hosts == {} and result.owner_of(0) is None
    back = rebalance(result, ["b:1"], 4)
    assert back.hosts == {"b:1": (0, 1, 2, 3)}


def test_rebalance_with_more_hosts_than_containers_leaves_some_empty() -> None:
    result = rebalance(None, ["a:1", "b:1", "c:1"], 2)
    check_invariants(result, ["a:1", "b:1", "c:1"])
    assert sorted(len(ids) for ids in result.hosts.values()) == [0, 1, 1]


def test_rebalance_with_other_container_count_is_refused() -> None:
    with pytest.raises(ValueError, match="4 containers"):
        rebalance(ContainerAssignment.of(4, {"a:1": [0, 1, 2, 3]}), ["a:1"], 8)


hosts = st.sampled_from([f"h{i}:{9000 + i}" for i in range(6)])


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 24), steps=st.lists(st.sets(hosts), min_size=1, max_size=8))
def test_rebalance_with_any_membership_history_keeps_invariants_and_moves_least(
    count: int, steps: list[set[str]]
) -> None:
    current: ContainerAssignment | None = None
    for live_set in steps:
        live = sorted(live_set)
        result = rebalance(current, live, count)
        if not live:
            assert result.hosts == {}
        else:
            check_invariants(result, live)
            if current is not None:
                left_live_hosts = [
                    cid for cid, (old, _new) in moved_containers(current, result).items() if old in live_set
                ]
                assert len(left_live_hosts) == least_moves(current, live, count)
                assert rebalance(result, live, count) == result, "stable once balanced"
        current = result


def test_assignment_encode_with_brief_format() -> None:
    assignment = ContainerAssignment.of(4, {"b:2": [3, 1], "a:1": [0, 2]})
    assert json.loads(assignment.encode()) == {
        "version": 1,
        "container_count": 4,
        "assignment": {"a:1": [0, 2], "b:2": [1, 3]},
    }
    assert ContainerAssignment.decode(assignment.encode()) == assignment


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"version": 2, "container_count": 4, "assignment": {}}',
        b'{"version": 1, "assignment": {}}',
        b'{"version": 1, "container_count": 2, "assignment": {"a:1": [0], "b:1": [0]}}',
        b'{"version": 1, "container_count": 2, "assignment": {"a:1": [5]}}',
        b'{"version": 1, "container_count": 2, "assignment": ["a:1"]}',
    ],
)
def test_assignment_decode_with_bad_data(data: bytes) -> None:
    with pytest.raises(AssignmentFormatError):
        ContainerAssignment.decode(data)


def test_check_container_count_with_other_count() -> None:
    assignment = ContainerAssignment.of(4, {})
    assignment.check_container_count(4)
    with pytest.raises(ContainerCountMismatchError, match="configured with 8 containers but the cluster") as info:
        assignment.check_container_count(8)
    assert (info.value.configured, info.value.cluster) == (8, 4)


def test_host_ids_and_info_round_trip() -> None:
    assert host_id("10.0.0.1", 12345) == "10.0.0.1:12345"
    assert parse_host_id("node-1.example:12345") == ("node-1.example", 12345)
    for bad in ("nohost", ":12", "h:x"):
        with pytest.raises(ValueError):
            parse_host_id(bad)
    with pytest.raises(ValueError):
        host_id("h", 0)
    info = HostInfo("h", 1, 42, 1.5, "t")
    assert HostInfo.decode(info.encode()) == info
    with pytest.raises(AssignmentFormatError):
        HostInfo.decode(b"{}")
