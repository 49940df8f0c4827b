"""Offline elections as pure decisions: only a partition whose leader is dead gets one. A
leader that is shutting down is alive and keeps a partition nobody else in the ISR can take
(finding 6 of docs/fault-suite.md: a controller that heard brokers join while its own
controlled shutdown was under way took such a partition offline, leader -1, and it stayed
so)."""

from __future__ import annotations

import uuid

from riverlog.controller.context import (
    ControllerContext,
    TopicInfo,
    elect_offline,
    on_brokers_failed,
)
from riverlog.metadata.layout import BrokerRegistration, Endpoint, PartitionState

T = "topic1"


def never(_topic: str) -> bool:
    return False


def context(live: set[int]) -> ControllerContext:
    """Partition 0 led by 2 with the ISR cut to [2]; partition 1 led by 2 with ISR [2, 3]."""
    ctx = ControllerContext(epoch=7)
    ctx.live = {b: BrokerRegistration(b, (Endpoint("PLAINTEXT", "h", 9000 + b),)) for b in live}
    ctx.topics[T] = TopicInfo(uuid.uuid4(), {0: [2, 1, 3], 1: [2, 3, 1]})
    ctx.written((T, 0), PartitionState(2, 4, [2], 7))
    ctx.written((T, 1), PartitionState(2, 4, [2, 3], 7))
    return ctx


def test_a_leader_shutting_down_keeps_a_partition_no_one_else_can_lead() -> None:
    ctx = context({1, 2, 3})
    ctx.shutting_down.add(2)
    assert elect_offline(ctx, ctx.partitions(), never) == {}


def test_a_dead_leader_is_replaced_or_the_partition_goes_offline() -> None:
    ctx = context({1, 2, 3})
    ctx.shutting_down.add(2)
    del ctx.live[2]  # its shutdown is over
    ctx.shutting_down.discard(2)
    decided = on_brokers_failed(ctx, [2], never)
    assert decided[(T, 0)] == PartitionState(-1, 5, [2], 7)  # waits for its last ISR member
    assert decided[(T, 1)] == PartitionState(3, 5, [3], 7)
    for tp, state in decided.items():
        ctx.written(tp, state)
    ctx.live[2] = BrokerRegistration(2, (Endpoint("PLAINTEXT", "h", 9002),))  # it is back
    assert elect_offline(ctx, ctx.partitions(), never) == {(T, 0): PartitionState(2, 6, [2], 7)}
