"""Replica assignment: balanced leaders, distinct replicas, Kafka's worked layout."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverlog.controller.assignment import (
    AssignmentError,
    assign,
    assign_replicas,
    assign_replicas_rack_aware,
    rack_alternated,
)


def test_kafka_layout_five_brokers_ten_partitions() -> None:
    # The example from Kafka's AdminUtils documentation (start index 0, shift 0).
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3)
    assert got[0] == [0, 1, 2]
    assert got[4] == [4, 0, 1]
    assert got[5] == [0, 2, 3]  # the shift grows once the ids wrap around
    assert got[9] == [4, 1, 2]


@given(
    st.integers(1, 8).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(1, 40),
            st.integers(1, n),
            st.integers(0, 50),
            st.integers(0, 50),
        )
    )
)
def test_replicas_distinct_and_leaders_balanced(args: tuple[int, int, int, int, int]) -> None:
    n, partitions, rf, start, shift = args
    brokers = list(range(100, 100 + n))
    got = assign_replicas(brokers, partitions, rf, start_index=start, initial_shift=shift)
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf == len(set(replicas))
        assert set(replicas) <= set(brokers)
    leaders = Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1


def test_bad_requests() -> None:
    with pytest.raises(AssignmentError, match="larger than available brokers"):
        assign_replicas([1, 2], 3, 3)
    with pytest.raises(AssignmentError):
        assign_replicas([1], 0, 1)


def test_kafka_rack_aware_example() -> None:
    # The example in Kafka's AdminUtils documentation.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert assign_replicas_rack_aware(racks, 6, 3) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
    }


def test_the_shift_counts_from_the_first_partition_assigned() -> None:
    whole = assign_replicas([0, 1, 2], 7, 2, start_index=1, initial_shift=2)
    first = assign_replicas([0, 1, 2], 4, 2, start_index=1, initial_shift=2)
    assert {p: whole[p] for p in range(4)} == first
    later = assign_replicas([0, 1, 2], 3, 2, start_index=1, initial_shift=2, first_partition=4)
    # Kafka grows the shift at each multiple of n passed *during this call*: partition 4
    # added later keeps the initial shift, while in one run it had grown at partition 3.
    assert (whole[4], later[4]) == ([2, 1], [2, 0])


@given(
    st.dictionaries(st.integers(0, 11), st.sampled_from("abcd"), min_size=1, max_size=12),
    st.integers(1, 24),
    st.data(),
)
def test_rack_aware_spreads_over_racks(
    racks: dict[int, str], partitions: int, data: st.DataObject
) -> None:
    rf = data.draw(st.integers(1, len(racks)))
    got = assign_replicas_rack_aware(racks, partitions, rf)
    rack_count = len(set(racks.values()))
    for replicas in got.values():
        assert len(replicas) == rf == len(set(replicas))
        assert len({racks[b] for b in replicas}) == min(rf, rack_count)
    leaders = Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1


def test_assign_chooses_by_racks_and_refuses_a_mix() -> None:
    assert assign({1: None, 2: None}, 2, 2) == assign_replicas([1, 2], 2, 2)
    assert assign({1: "a", 2: "b"}, 2, 2) == assign_replicas_rack_aware({1: "a", 2: "b"}, 2, 2)
    with pytest.raises(AssignmentError, match="Not all brokers have rack information"):
        assign({1: "a", 2: None}, 1, 1)
