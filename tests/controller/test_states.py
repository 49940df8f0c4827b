"""The partition and replica state tables: Kafka's legal moves, nothing else."""

from __future__ import annotations

import pytest

from riverlog.controller.states import (
    PARTITION_MOVES,
    REPLICA_MOVES,
    IllegalTransition,
    PartitionState,
    ReplicaState,
    partition_states,
    replica_states,
)

P, R = PartitionState, ReplicaState


def test_a_partition_lives_new_online_offline_and_is_deleted_from_offline() -> None:
    table = partition_states()
    tp = ("t", 0)
    assert table.state(tp) is P.NON_EXISTENT
    for target in (P.NEW, P.ONLINE, P.OFFLINE, P.ONLINE, P.OFFLINE, P.NON_EXISTENT):
        table.move(tp, target)
    assert tp not in table
    with pytest.raises(IllegalTransition, match="NonExistentPartition to OnlinePartition"):
        table.move(tp, P.ONLINE)
    assert table.state(tp) is P.NON_EXISTENT


def test_replica_deletion_goes_through_its_states_in_order() -> None:
    table = replica_states()
    replica = ("t", 0, 3)
    table.move(replica, R.NEW)
    table.move(replica, R.ONLINE)
    with pytest.raises(IllegalTransition):
        table.move(replica, R.DELETION_STARTED)  # must go offline first
    assert table.state(replica) is R.ONLINE
    for target in (R.OFFLINE, R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT):
        table.move(replica, target)
    assert replica not in table


def test_the_tables_match_kafkas() -> None:
    legal = {(a, b) for b, sources in PARTITION_MOVES.items() for a in sources}
    assert legal == {
        (P.NON_EXISTENT, P.NEW),
        (P.NEW, P.ONLINE), (P.ONLINE, P.ONLINE), (P.OFFLINE, P.ONLINE),
        (P.NEW, P.OFFLINE), (P.ONLINE, P.OFFLINE), (P.OFFLINE, P.OFFLINE),
        (P.OFFLINE, P.NON_EXISTENT),
    }  # fmt: skip
    assert len({(a, b) for b, sources in REPLICA_MOVES.items() for a in sources}) == 14
