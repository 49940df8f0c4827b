"""Elections on demand and the leader rebalance as pure decisions: design doc 000's worked
example (8 brokers, a topic of 8 partitions with 3 replicas, brokers 1, 2 and 4 stopped and
brought back), Kafka's per-partition error codes, the imbalance threshold, and the rule that a
preferred election never picks a replica outside the ISR."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from riverlog.controller.assignment import assign_replicas
from riverlog.controller.context import ControllerContext, TopicInfo, on_brokers_failed
from riverlog.controller.leader_balance import (
    PREFERRED,
    UNCLEAN,
    Outcome,
    decide,
    outcomes,
    plan,
    rebalance_candidates,
)
from riverlog.metadata.layout import BrokerRegistration, Endpoint, PartitionState
from riverlog.protocol import error_codes

T = "topic1"


def registration(broker_id: int) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),))


def context(assignment: dict[int, list[int]], live: set[int]) -> ControllerContext:
    """A topic led by its preferred replicas, every replica in the ISR."""
    ctx = ControllerContext(epoch=1)
    ctx.live = {b: registration(b) for b in sorted(live)}
    ctx.topics[T] = TopicInfo(uuid.uuid4(), assignment)
    for p, replicas in assignment.items():
        ctx.written((T, p), PartitionState(replicas[0], 0, list(replicas), 1))
    return ctx


def apply(ctx: ControllerContext, states: dict[tuple[str, int], PartitionState]) -> None:
    for tp, state in states.items():
        ctx.written(tp, state)


def rejoin(ctx: ControllerContext, broker_id: int) -> None:
    """The broker comes back and catches up: its leaders add it to their ISRs."""
    ctx.live[broker_id] = registration(broker_id)
    for tp in ctx.partitions_on(broker_id):
        state = ctx.state(tp)
        assert state is not None
        if broker_id not in state.isr:
            ctx.written(
                tp,
                PartitionState(
                    state.leader,
                    state.leader_epoch,
                    [*state.isr, broker_id],
                    state.controller_epoch,
                ),
            )


def leaders(ctx: ControllerContext) -> list[int]:
    return [ctx.state(tp).leader for tp in ctx.partitions()]  # type: ignore[union-attr]


def elect(
    ctx: ControllerContext, partitions: list[tuple[str, int]] | None, election_type: int = PREFERRED
) -> dict[tuple[str, int], Outcome]:
    """What the controller does for ElectLeaders: plan, decide, write, read back."""
    electable, answered = plan(ctx, partitions, election_type)
    apply(ctx, decide(ctx, electable, election_type))
    return {**answered, **outcomes(ctx, electable, election_type)}


def per_broker(ctx: ControllerContext) -> dict[int, int]:
    counts = dict.fromkeys(sorted(ctx.live), 0)
    for leader in leaders(ctx):
        counts[leader] += 1
    return counts


def test_design_doc_000_worked_example() -> None:
    # Kafka's assignment of 8 partitions x 3 replicas over brokers 1..8 (start 0, shift 1):
    # preferred replicas 1..8, one per broker.
    assignment = assign_replicas(list(range(1, 9)), 8, 3, start_index=0, initial_shift=1)
    assert [r[0] for r in assignment.values()] == list(range(1, 9))
    ctx = context(assignment, set(range(1, 9)))
    assert leaders(ctx) == [1, 2, 3, 4, 5, 6, 7, 8]

    for b in (1, 2, 4):  # brokers 1, 2 and 4 stop
        del ctx.live[b]
    apply(ctx, on_brokers_failed(ctx, {1, 2, 4}, lambda _t: False))
    assert leaders(ctx) == [3, 5, 3, 6, 5, 6, 7, 8]

    rejoin(ctx, 1)  # broker 1 is back and in the ISRs, but leads nothing
    assert max(per_broker(ctx).values()) == 2 and per_broker(ctx)[1] == 0

    results = elect(ctx, None)  # the tool, over all partitions
    assert leaders(ctx) == [1, 5, 3, 6, 5, 6, 7, 8]
    assert results[(T, 0)] == Outcome(error_codes.NONE, None, 1)
    for p in (1, 3):  # their preferred replicas (2 and 4) are still down
        assert results[(T, p)].error is error_codes.PREFERRED_LEADER_NOT_AVAILABLE
    assert {p for (_, p), o in results.items() if o.error is error_codes.ELECTION_NOT_NEEDED} == {
        2,
        4,
        5,
        6,
        7,
    }
    assert min(per_broker(ctx).values()) == 1 and max(per_broker(ctx).values()) == 2

    rejoin(ctx, 2)  # brokers 2 and 4 come back: nothing changes by itself
    rejoin(ctx, 4)
    assert leaders(ctx) == [1, 5, 3, 6, 5, 6, 7, 8]

    results = elect(ctx, None)  # the tool again: every broker leads one partition
    assert leaders(ctx) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert {p for (_, p), o in results.items() if o.error is error_codes.NONE} == {1, 3}
    assert set(per_broker(ctx).values()) == {1}


def test_a_preferred_replica_out_of_the_isr_is_not_elected() -> None:
    ctx = context({0: [1, 2, 3]}, {1, 2, 3})
    ctx.written((T, 0), PartitionState(2, 3, [2, 3], 1))  # 1 is alive but fell behind
    assert elect(ctx, [(T, 0)]) == {
        (T, 0): Outcome(
            error_codes.PREFERRED_LEADER_NOT_AVAILABLE,
            "Failed to elect leader for partition topic1-0 under strategy "
            "PreferredReplicaPartitionLeaderElectionStrategy",
        )
    }
    assert leaders(ctx) == [2]
    assert rebalance_candidates(ctx, 0) == []
    ctx.shutting_down.add(1)  # in the ISR but shutting down: not electable either
    ctx.written((T, 0), PartitionState(2, 4, [2, 3, 1], 1))
    assert elect(ctx, [(T, 0)])[(T, 0)].error is error_codes.PREFERRED_LEADER_NOT_AVAILABLE
    ctx.shutting_down.clear()
    assert elect(ctx, [(T, 0)]) == {(T, 0): Outcome(error_codes.NONE, None, 1)}
    assert ctx.state((T, 0)) == PartitionState(1, 5, [2, 3, 1], 1)  # epoch bumped, ISR kept


def test_unknown_deleting_and_unclean_answers() -> None:
    ctx = context({0: [1, 2], 1: [2, 1]}, {1, 2})
    results = elect(ctx, [(T, 0), (T, 7), ("nope", 0)], UNCLEAN)
    assert results[(T, 0)].error is error_codes.ELECTION_NOT_NEEDED  # a live leader
    assert results[(T, 7)].error is error_codes.UNKNOWN_TOPIC_OR_PARTITION
    assert results[("nope", 0)].error is error_codes.UNKNOWN_TOPIC_OR_PARTITION

    # Partition 1 lost its leader with only that broker in the ISR: an unclean election
    # takes the live replica, which alone forms the new ISR.
    ctx.written((T, 1), PartitionState(-1, 2, [2], 1))
    del ctx.live[2]
    assert elect(ctx, [(T, 1)], PREFERRED)[(T, 1)].error is (
        error_codes.PREFERRED_LEADER_NOT_AVAILABLE
    )
    assert elect(ctx, [(T, 1)], UNCLEAN) == {(T, 1): Outcome(error_codes.NONE, None, 1)}
    assert ctx.state((T, 1)) == PartitionState(1, 3, [1], 1)

    del ctx.live[1]
    ctx.written((T, 1), PartitionState(-1, 4, [1], 1))
    assert elect(ctx, [(T, 1)], UNCLEAN)[(T, 1)].error is error_codes.ELIGIBLE_LEADERS_NOT_AVAILABLE

    ctx.deleting.add(T)
    assert elect(ctx, [(T, 0)])[(T, 0)].error is error_codes.INVALID_TOPIC_EXCEPTION
    assert {o.error for o in elect(ctx, None).values()} == {error_codes.INVALID_TOPIC_EXCEPTION}
    assert rebalance_candidates(ctx, 0) == []


def test_rebalance_only_above_the_per_broker_threshold() -> None:
    # Broker 1 is the preferred replica of 4 partitions, broker 2 of 1.
    ctx = context({0: [1, 2], 1: [1, 2], 2: [1, 2], 3: [1, 2], 4: [2, 1]}, {1, 2})
    ctx.written((T, 0), PartitionState(2, 1, [2, 1], 1))
    assert rebalance_candidates(ctx, 25) == []  # 1 of 4 = 25 %: not above
    assert rebalance_candidates(ctx, 10) == [(T, 0)]
    ctx.written((T, 4), PartitionState(1, 1, [1, 2], 1))
    assert rebalance_candidates(ctx, 25) == [(T, 4)]  # broker 2: 1 of 1
    ctx.written((T, 4), PartitionState(1, 2, [1], 1))  # ... but out of the ISR
    assert rebalance_candidates(ctx, 25) == []
    ctx.written((T, 4), PartitionState(1, 3, [1, 2], 1))
    ctx.topics[T].adding[4] = [3]  # ... or being reassigned: the move picks its leader
    assert rebalance_candidates(ctx, 25) == []


replicas = st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True)


@given(st.lists(replicas, min_size=1, max_size=6), st.data())
def test_preferred_elections_and_rebalances_stay_within_the_live_isr(
    assignment: list[list[int]], data: st.DataObject
) -> None:
    ctx = ControllerContext(epoch=1)
    ctx.topics[T] = TopicInfo(uuid.uuid4(), dict(enumerate(assignment)))
    live = set(data.draw(st.lists(st.integers(1, 6), unique=True)))
    ctx.live = {b: registration(b) for b in live}
    for p, rs in enumerate(assignment):
        isr = data.draw(st.lists(st.sampled_from(rs), min_size=1, unique=True))
        ctx.written((T, p), PartitionState(data.draw(st.sampled_from([-1, *rs])), 0, isr, 1))
    before = {tp: ctx.state(tp) for tp in ctx.partitions()}
    candidates = rebalance_candidates(ctx, data.draw(st.integers(0, 100)))
    states = decide(ctx, ctx.partitions(), PREFERRED)
    assert set(candidates) <= set(states)
    for tp, state in states.items():
        old = before[tp]
        assert old is not None
        assert state.leader == ctx.replicas(tp)[0] != old.leader
        assert state.leader in old.isr and state.leader in live
        assert state.leader_epoch == old.leader_epoch + 1
