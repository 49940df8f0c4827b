"""The controller's requests to brokers, built from its context: what each field carries
(leaders, epochs, ISR, the state znode's version, endpoints of the leaders a follower needs,
offline replicas, topics being deleted, StopReplica's delete marker)."""

from __future__ import annotations

import uuid

from riverlog.controller import requests
from riverlog.controller.context import ControllerContext, TopicInfo
from riverlog.metadata.layout import BrokerRegistration, Endpoint, PartitionState
from riverlog.model import LEADER_DURING_DELETE

T = "events"
TOPIC_ID = uuid.uuid4()


def context() -> ControllerContext:
    """Brokers 1 and 2 alive, 3 gone; partition 0 led by 1 (ISR 1, 2), partition 1 led by 2
    (ISR 2), written twice (znode version 2)."""
    ctx = ControllerContext(epoch=7)
    ctx.live = {
        b: BrokerRegistration(b, (Endpoint("PLAINTEXT", "127.0.0.1", 9090 + b),), rack=f"r{b}")
        for b in (1, 2)
    }
    ctx.topics[T] = TopicInfo(TOPIC_ID, {0: [1, 2, 3], 1: [2, 3, 1]})
    ctx.written((T, 0), PartitionState(1, 4, [1, 2], 6))
    ctx.written((T, 1), PartitionState(2, 2, [2, 3], 6))
    ctx.written((T, 1), PartitionState(2, 3, [2], 7))
    return ctx


def test_leader_and_isr_carries_each_partitions_state_and_its_leaders_endpoints() -> None:
    ctx = context()
    request = requests.leader_and_isr(ctx, 1, [(T, 1), (T, 0)], is_new=True)
    assert (request.controller_id, request.controller_epoch) == (1, 7)
    [topic] = request.topic_states
    assert (topic.topic_name, topic.topic_id) == (T, TOPIC_ID)
    states = {p.partition_index: p for p in topic.partition_states}
    first, second = states[0], states[1]
    assert (first.leader, first.leader_epoch, first.isr, first.replicas) == (
        1,
        4,
        [1, 2],
        [1, 2, 3],
    )
    assert (second.leader, second.leader_epoch, second.isr) == (2, 3, [2])
    assert (first.partition_epoch, second.partition_epoch) == (
        ctx.version((T, 0)),
        ctx.version((T, 1)),
    )
    assert second.partition_epoch == first.partition_epoch + 1  # written once more
    assert all(p.is_new for p in topic.partition_states)
    assert [(b.broker_id, b.port) for b in request.live_leaders] == [(1, 9091), (2, 9092)]


def test_leader_and_isr_skips_partitions_without_a_state_and_dead_leaders_endpoints() -> None:
    ctx = context()
    del ctx.live[2]
    request = requests.leader_and_isr(ctx, 1, [(T, 0), (T, 1), (T, 5)])
    assert sorted(p.partition_index for p in request.topic_states[0].partition_states) == [0, 1]
    assert [b.broker_id for b in request.live_leaders] == [1]


def test_update_metadata_lists_live_brokers_offline_replicas_and_deleted_partitions() -> None:
    ctx = context()
    request = requests.update_metadata(ctx, 1, [(T, 0)], deleted=[("gone", 0)])
    assert [(b.id, b.rack, b.endpoints[0].port) for b in request.live_brokers] == [
        (1, "r1", 9091),
        (2, "r2", 9092),
    ]
    states = {t.topic_name: t for t in request.topic_states}
    [events] = states[T].partition_states
    assert (events.leader, events.isr, events.offline_replicas) == (1, [1, 2], [3])
    assert states[T].topic_id == TOPIC_ID
    [gone] = states["gone"].partition_states
    assert (gone.leader, gone.controller_epoch) == (LEADER_DURING_DELETE, 7)


def test_stop_replica_marks_deletions_and_keeps_epochs_otherwise() -> None:
    ctx = context()
    keep = requests.stop_replica(ctx, 1, [(T, 0)], delete=False)
    assert keep.topic_states[0].partition_states[0].leader_epoch == 4
    assert not keep.topic_states[0].partition_states[0].delete_partition
    delete = requests.stop_replica(ctx, 1, [(T, 0), (T, 1)], delete=True)
    assert [
        (p.leader_epoch, p.delete_partition) for p in delete.topic_states[0].partition_states
    ] == [(LEADER_DURING_DELETE, True)] * 2
    assert delete.controller_epoch == 7
