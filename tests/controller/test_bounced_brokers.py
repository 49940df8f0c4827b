"""Brokers that restarted unseen, as pure decisions (finding 8 of docs/fault-suite.md): an ISR
member whose live registration (broker epoch: the czxid of `/brokers/ids/N`) is newer than the
last write of the partition's state (its mzxid) came back since that state was written, maybe
with a log a machine crash shortened — it leaves the ISR, and leads no more where another ISR
member can. A registration older than the state, or a state written after the bounce, is left
alone."""

from __future__ import annotations

import uuid

from riverlog.controller.context import ControllerContext, TopicInfo, on_bounced
from riverlog.metadata.layout import BrokerRegistration, Endpoint, PartitionState
from riverlog.model import TopicPartition

T = "topic1"
LED_BY_1: TopicPartition = (T, 0)
FOLLOWED_BY_1: TopicPartition = (T, 1)
STATE_WRITTEN = 1_000
"""The zxid of the last write of both partitions' states."""


def never(_topic: str) -> bool:
    return False


def always(_topic: str) -> bool:
    return True


def registration(broker_id: int, broker_epoch: int) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id, (Endpoint("PLAINTEXT", "h", 9000 + broker_id),), broker_epoch=broker_epoch
    )


def context(epochs: dict[int, int], isr: list[int] | None = None) -> ControllerContext:
    """Partition 0 led by 1, partition 1 led by 2, both with ISR `isr` (default [1, 2, 3]) as
    read from the store (written at `STATE_WRITTEN`); `epochs`: live broker → broker epoch."""
    ctx = ControllerContext(epoch=9)
    ctx.live = {b: registration(b, e) for b, e in epochs.items()}
    ctx.topics[T] = TopicInfo(uuid.uuid4(), {0: [1, 2, 3], 1: [2, 3, 1]})
    members = [1, 2, 3] if isr is None else isr
    ctx.states[LED_BY_1] = (PartitionState(1, 4, list(members), 8), 6)
    ctx.states[FOLLOWED_BY_1] = (PartitionState(2, 4, list(members), 8), 6)
    ctx.written_at = {LED_BY_1: STATE_WRITTEN, FOLLOWED_BY_1: STATE_WRITTEN}
    return ctx


def test_a_bounced_leader_gives_its_partition_to_another_isr_member() -> None:
    ctx = context({1: STATE_WRITTEN + 50, 2: 10, 3: 20})
    assert ctx.bounced(LED_BY_1) == [1]
    decided = on_bounced(ctx, [LED_BY_1], never)
    assert decided == {LED_BY_1: PartitionState(2, 5, [2, 3], 9)}


def test_a_bounced_follower_leaves_the_isr() -> None:
    ctx = context({1: STATE_WRITTEN + 50, 2: 10, 3: 20})
    decided = on_bounced(ctx, ctx.partitions(), never)
    assert decided[FOLLOWED_BY_1] == PartitionState(2, 5, [2, 3], 9)
    assert decided[LED_BY_1].leader == 2


def test_registrations_older_than_the_state_change_nothing() -> None:
    ctx = context({1: STATE_WRITTEN - 1, 2: 10, 3: STATE_WRITTEN - 2})
    assert ctx.bounced(LED_BY_1) == []
    assert on_bounced(ctx, ctx.partitions(), never) == {}


def test_a_state_written_after_the_bounce_changes_nothing() -> None:
    ctx = context({1: STATE_WRITTEN + 50, 2: 10, 3: 20})
    ctx.written_at[LED_BY_1] = STATE_WRITTEN + 60  # read after someone wrote it again
    ctx.written(FOLLOWED_BY_1, PartitionState(2, 5, [2, 3, 1], 9))  # this controller wrote it
    assert on_bounced(ctx, ctx.partitions(), never) == {}


def test_a_state_of_unknown_age_changes_nothing() -> None:
    ctx = context({1: STATE_WRITTEN + 50, 2: 10, 3: 20})
    ctx.written_at.clear()  # a store that does not say when a node was written
    assert on_bounced(ctx, ctx.partitions(), never) == {}


def test_with_no_other_isr_member_alive_the_partition_waits_offline_for_one() -> None:
    ctx = context({1: STATE_WRITTEN + 50}, isr=[1, 2])  # 2 and 3 not registered
    decided = on_bounced(ctx, [LED_BY_1], never)
    assert decided == {LED_BY_1: PartitionState(-1, 5, [2], 9)}
    # unclean election allowed: availability first, the bounced leader keeps leading
    assert on_bounced(ctx, [LED_BY_1], always) == {}


def test_bounced_brokers_that_are_the_whole_isr_keep_it() -> None:
    ctx = context({1: STATE_WRITTEN + 50, 2: STATE_WRITTEN + 51, 3: 20}, isr=[1, 2])
    assert ctx.bounced(LED_BY_1) == [1, 2]
    assert on_bounced(ctx, ctx.partitions(), never) == {}
