"""Leader elections as pure functions: Kafka's four algorithms, and the never-outside-the-ISR
rule checked over generated inputs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from riverlog.controller.partition_leader_election import (
    Elected,
    controlled_shutdown_election,
    next_state,
    offline_election,
    offline_state,
    preferred_election,
    reassignment_election,
)
from riverlog.metadata.layout import PartitionState


def test_offline_election_prefers_assignment_order_within_the_live_isr() -> None:
    assert offline_election([1, 2, 3], [3, 2], {1, 2, 3}) == Elected(2, [3, 2])
    assert offline_election([1, 2, 3], [1, 3], {3}) == Elected(3, [3])
    assert offline_election([1, 2, 3], [1], {2, 3}) is None
    assert offline_election([1, 2, 3], [1], {2, 3}, unclean_allowed=True) == Elected(
        2, [2], unclean=True
    )
    assert offline_election([1, 2], [1], set(), unclean_allowed=True) is None


def test_reassignment_preferred_and_controlled_shutdown() -> None:
    assert reassignment_election([4, 5, 6], [1, 5, 6], {1, 4, 5, 6}) == Elected(5, [1, 5, 6])
    assert preferred_election([2, 1], [1, 2], {1, 2}) == Elected(2, [1, 2])
    assert preferred_election([2, 1], [1], {1, 2}) is None  # not in the ISR: stay put
    assert preferred_election([2, 1], [1, 2], {1}) is None
    assert controlled_shutdown_election([1, 2, 3], [1, 2, 3], {1}) == Elected(2, [2, 3])
    assert controlled_shutdown_election([1, 2], [1], {1}) is None


def test_states_bump_the_leader_epoch_and_stamp_the_controller_epoch() -> None:
    current = PartitionState(1, 4, [1, 2], 7)
    assert next_state(current, Elected(2, [2]), 8) == PartitionState(2, 5, [2], 8)
    assert next_state(None, Elected(1, [1, 2]), 1) == PartitionState(1, 0, [1, 2], 1)
    assert offline_state(current, 8) == PartitionState(-1, 5, [2], 8)


replicas = st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True)


@given(replicas, st.data())
def test_a_clean_election_never_picks_a_leader_outside_the_live_isr(
    assignment: list[int], data: st.DataObject
) -> None:
    isr = data.draw(st.lists(st.sampled_from(assignment), unique=True))
    live = set(data.draw(st.lists(st.integers(0, 6), unique=True)))
    for elected in (
        offline_election(assignment, isr, live),
        reassignment_election(assignment, isr, live),
        preferred_election(assignment, isr, live),
    ):
        if elected is not None:
            assert elected.leader in isr and elected.leader in live
            assert elected.leader in elected.isr
            assert set(elected.isr) <= set(isr) & live
    shutdown = controlled_shutdown_election(assignment, isr, live)
    if shutdown is not None:
        assert shutdown.leader in isr and shutdown.leader not in live
