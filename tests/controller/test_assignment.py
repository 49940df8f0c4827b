"""Replica assignment: balanced leaders, distinct replicas, Kafka's worked layout."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverlog.controller.assignment import AssignmentError, assign_replicas


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
