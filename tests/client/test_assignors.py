"""The consumer-group assignors: the Java client's exact range and roundrobin results (examples
from Kafka's documentation and its RangeAssignorTest/RoundRobinAssignorTest), and
cooperative-sticky's rules — stickiness, withholding what changes owner, convergence."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverlog.client.assignors import (
    ASSIGNORS,
    Assignment,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    assignor_for,
)

TopicPartition = tuple[str, int]
Counts = dict[str, int]


def member(
    mid: str,
    *topics: str,
    instance: str | None = None,
    owned: dict[str, list[int]] | None = None,
    generation: int = -1,
) -> MemberSubscription:
    return MemberSubscription(mid, instance, topics, owned or {}, generation)


def owners(result: Assignment) -> dict[TopicPartition, str]:
    out: dict[TopicPartition, str] = {}
    for m, topics in result.items():
        for t, ps in topics.items():
            assert ps == sorted(ps) and ps, f"{m}: {t} {ps}"
            for p in ps:
                assert (t, p) not in out, f"{t}-{p} assigned to {out[(t, p)]} and {m}"
                out[(t, p)] = m
    return out


def loads(result: Assignment) -> dict[str, int]:
    return {m: sum(map(len, topics.values())) for m, topics in result.items()}


def subscribed_partitions(
    counts: Counts, members: Sequence[MemberSubscription]
) -> set[TopicPartition]:
    topics = {t for m in members for t in m.topics if t in counts}
    return {(t, p) for t in topics for p in range(counts[t])}


def next_round(
    result: Assignment, members: Sequence[MemberSubscription]
) -> list[MemberSubscription]:
    """Every member revokes what it lost, keeps what it got, and joins the next generation."""
    generation = max(m.generation for m in members) + 1
    return [
        MemberSubscription(
            m.member_id, m.group_instance_id, m.topics, result[m.member_id], generation
        )
        for m in members
    ]


# -- range and roundrobin: Kafka's own examples ------------------------------------------------


def test_kafka_documented_example_two_members_two_topics() -> None:
    members = [member("C0", "t0", "t1"), member("C1", "t0", "t1")]
    counts = {"t0": 3, "t1": 3}
    assert RangeAssignor().assign(counts, members) == {
        "C0": {"t0": [0, 1], "t1": [0, 1]},
        "C1": {"t0": [2], "t1": [2]},
    }
    assert RoundRobinAssignor().assign(counts, members) == {
        "C0": {"t0": [0, 2], "t1": [1]},
        "C1": {"t0": [1], "t1": [0, 2]},
    }


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()])
def test_mixed_subscriptions_as_in_javas_tests(
    assignor: RangeAssignor | RoundRobinAssignor,
) -> None:
    # testMultipleConsumersMixedTopics: only consumer2 takes topic2.
    members = [
        member("consumer1", "topic1"),
        member("consumer2", "topic1", "topic2"),
        member("consumer3", "topic1"),
    ]
    assert assignor.assign({"topic1": 3, "topic2": 2}, members) == {
        "consumer1": {"topic1": [0]},
        "consumer2": {"topic1": [1], "topic2": [0, 1]},
        "consumer3": {"topic1": [2]},
    }


def test_roundrobin_skips_members_not_subscribed() -> None:
    members = [member("a", "x"), member("b", "x", "y"), member("c", "y")]
    assert RoundRobinAssignor().assign({"x": 3, "y": 3}, members) == {
        "a": {"x": [0, 2]},
        "b": {"x": [1], "y": [0, 2]},
        "c": {"y": [1]},
    }


def test_static_members_are_ordered_by_instance_id_not_member_id() -> None:
    # testTwoStaticConsumersTwoTopicsSixPartitions: consumer-b has the lower instance id.
    members = [
        member("consumer-a", "topic1", "topic2", instance="instance2"),
        member("consumer-b", "topic1", "topic2", instance="instance1"),
    ]
    counts = {"topic1": 3, "topic2": 3}
    assert RangeAssignor().assign(counts, members) == {
        "consumer-a": {"topic1": [2], "topic2": [2]},
        "consumer-b": {"topic1": [0, 1], "topic2": [0, 1]},
    }
    assert RoundRobinAssignor().assign(counts, members) == {
        "consumer-a": {"topic1": [1], "topic2": [0, 2]},
        "consumer-b": {"topic1": [0, 2], "topic2": [1]},
    }


def test_static_members_come_before_dynamic_ones() -> None:
    members = [member("a", "t"), member("z", "t", instance="i1"), member("m", "t", instance="i0")]
    assert RangeAssignor().assign({"t": 4}, members) == {
        "a": {"t": [3]},
        "z": {"t": [2]},
        "m": {"t": [0, 1]},
    }


def test_member_ids_compare_as_java_strings() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16, which Java sorts before U+FF61.
    members = [member("\uff61", "t"), member("\U0001f600", "t")]
    assert RangeAssignor().assign({"t": 3}, members) == {
        "\uff61": {"t": [2]},
        "\U0001f600": {"t": [0, 1]},
    }


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_unknown_topics_are_skipped_and_every_member_answered(name: str) -> None:
    members = [member("a", "gone"), member("b", "t", "gone"), member("c")]
    result = assignor_for(name).assign({"t": 2, "unsubscribed": 3}, members)
    assert result == {"a": {}, "b": {"t": [0, 1]}, "c": {}}


def test_assignors_by_name() -> None:
    assert [(n, a.name, a.cooperative) for n, a in ASSIGNORS.items()] == [
        ("range", "range", False),
        ("roundrobin", "roundrobin", False),
        ("cooperative-sticky", "cooperative-sticky", True),
    ]
    assert isinstance(assignor_for("cooperative-sticky"), CooperativeStickyAssignor)
    with pytest.raises(ValueError, match=r"'sticky'.*range, roundrobin, cooperative-sticky"):
        assignor_for("sticky")


# -- cooperative-sticky: worked examples -------------------------------------------------------


def test_partitions_that_move_are_withheld_until_their_owner_revokes_them() -> None:
    sticky = CooperativeStickyAssignor()
    first = [member("a", "t", owned={"t": [0, 1, 2, 3]}, generation=1), member("b", "t")]
    assert sticky.assign({"t": 4}, first) == {"a": {"t": [0, 1]}, "b": {}}
    second = [
        member("a", "t", owned={"t": [0, 1]}, generation=2),
        member("b", "t", generation=2),
    ]
    assert sticky.assign({"t": 4}, second) == {"a": {"t": [0, 1]}, "b": {"t": [2, 3]}}


def test_a_disputed_partition_goes_to_the_newest_generation() -> None:
    members = [
        member("a", "t", owned={"t": [0, 1]}, generation=3),
        member("b", "t", owned={"t": [1]}, generation=4),
    ]
    assert CooperativeStickyAssignor().assign({"t": 2}, members) == {
        "a": {"t": [0]},
        "b": {"t": [1]},
    }


def test_claims_of_one_generation_cancel_and_the_partition_waits_a_round() -> None:
    members = [
        member("a", "t", owned={"t": [0]}, generation=4),
        member("b", "t", owned={"t": [0, 1]}, generation=4),
    ]
    # t-0 would go to a, but b still claims it too: nobody gets it until both let go.
    assert CooperativeStickyAssignor().assign({"t": 2}, members) == {"a": {}, "b": {"t": [1]}}


def test_a_holder_that_unsubscribed_still_has_to_revoke_first() -> None:
    sticky = CooperativeStickyAssignor()
    counts = {"x": 1, "y": 1}
    first = [
        member("a", "x", owned={"x": [0], "y": [0], "deleted": [0], "z": [5]}, generation=2),
        member("b", "y", generation=2),
    ]
    assert sticky.assign(counts | {"z": 1}, first) == {"a": {"x": [0]}, "b": {}}
    second = [member("a", "x", owned={"x": [0]}, generation=3), member("b", "y", generation=3)]
    assert sticky.assign(counts, second) == {"a": {"x": [0]}, "b": {"y": [0]}}


def test_unequal_subscriptions_balance_through_a_chain_of_members() -> None:
    # s takes only x, m takes x and y, t only y; loads 3, 2, 1. Neither s -> m nor m -> t
    # evens anything out alone; together they give 2, 2, 2.
    sticky = CooperativeStickyAssignor()
    counts = {"x": 3, "y": 3}
    first = [
        member("s", "x", owned={"x": [0, 1, 2]}, generation=1),
        member("m", "x", "y", owned={"y": [0, 1]}, generation=1),
        member("t", "y", owned={"y": [2]}, generation=1),
    ]
    result = sticky.assign(counts, first)
    assert result == {"s": {"x": [0, 1]}, "m": {"y": [0]}, "t": {"y": [2]}}
    second = sticky.assign(counts, next_round(result, first))
    assert second == {"s": {"x": [0, 1]}, "m": {"x": [2], "y": [0]}, "t": {"y": [1, 2]}}


def test_free_partitions_even_loads_out_before_held_ones_move() -> None:
    # Only a's t2-1 is really held (a and b claim partitions of topics they dropped). Moving
    # free partitions first, then as few held ones as possible, gives an even plan the next
    # round completes without taking back anything this round hands out.
    sticky = CooperativeStickyAssignor()
    counts = {"t0": 2, "t1": 1, "t2": 3}
    first = [
        member("a", "t0", "t2", owned={"t1": [0], "t2": [1]}, generation=1),
        member("b", "t2", owned={"t0": [1]}, generation=1),
        member("c", "t1", "t2", generation=1),
        member("d", "t1", generation=1),
    ]
    result = sticky.assign(counts, first)
    assert result == {"a": {"t0": [0]}, "b": {"t2": [0]}, "c": {"t2": [2]}, "d": {}}
    second = sticky.assign(counts, next_round(result, first))
    assert second == {
        "a": {"t0": [0, 1]},
        "b": {"t2": [0, 1]},
        "c": {"t2": [2]},
        "d": {"t1": [0]},
    }


# -- properties --------------------------------------------------------------------------------

TOPICS = ["t0", "t1", "t2", "t3"]
SUBSCRIBABLE = [*TOPICS, "gone"]  # "gone": subscribed to, unknown to the metadata


@st.composite
def groups(
    draw: st.DrawFn,
    equal: bool = False,
    claims: bool = False,
    max_members: int = 6,
    max_partitions: int = 8,
) -> tuple[Counts, list[MemberSubscription]]:
    counts = draw(
        st.dictionaries(st.sampled_from(TOPICS), st.integers(0, max_partitions), min_size=1)
    )
    ids = draw(st.permutations("abcdefgh"))[: draw(st.integers(1, max_members))]
    shared = draw(st.lists(st.sampled_from(SUBSCRIBABLE), min_size=1, unique=True))
    members = []
    for i, mid in enumerate(ids):
        topics = shared if equal else draw(st.lists(st.sampled_from(SUBSCRIBABLE), unique=True))
        static = draw(st.booleans())
        instance = f"{draw(st.integers(0, 9))}-{i}" if static else None
        owned: dict[str, list[int]] = {}
        if claims:
            owned = draw(
                st.dictionaries(
                    st.sampled_from(SUBSCRIBABLE),
                    st.lists(
                        st.integers(0, max_partitions + 1), min_size=1, max_size=5, unique=True
                    ),
                    max_size=3,
                )
            )
        generation = draw(st.integers(-1, 3)) if claims else -1
        members.append(MemberSubscription(mid, instance, tuple(topics), owned, generation))
    return counts, members


def check_well_formed(
    result: Assignment, counts: Counts, members: Sequence[MemberSubscription]
) -> dict[TopicPartition, str]:
    assert list(result) == [m.member_id for m in members]
    topics_of = {m.member_id: set(m.topics) for m in members}
    got = owners(result)
    for (t, p), m in got.items():
        assert t in topics_of[m] and t in counts and 0 <= p < counts[t]
    return got


def current_holders(
    counts: Counts, members: Sequence[MemberSubscription]
) -> dict[TopicPartition, set[str]]:
    """Per claimed partition, the claimants of the newest generation."""
    claims: dict[TopicPartition, list[MemberSubscription]] = {}
    for m in members:
        for t, ps in m.owned.items():
            claims.update(
                {(t, p): [*claims.get((t, p), []), m] for p in ps if p < counts.get(t, 0)}
            )
    return {
        tp: {m.member_id for m in ms if m.generation == max(c.generation for c in ms)}
        for tp, ms in claims.items()
    }


@settings(max_examples=100, deadline=None)
@given(groups(claims=True), st.sampled_from(sorted(ASSIGNORS)), st.randoms())
def test_any_group_gets_a_well_formed_deterministic_assignment(
    group: tuple[Counts, list[MemberSubscription]], name: str, rnd: random.Random
) -> None:
    counts, members = group
    assignor = assignor_for(name)
    result = assignor.assign(counts, members)
    got = check_well_formed(result, counts, members)
    shuffled = list(members)
    rnd.shuffle(shuffled)
    assert assignor.assign(counts, shuffled) == result
    if not assignor.cooperative:
        assert set(got) == subscribed_partitions(counts, members)


@settings(max_examples=150, deadline=None)
@given(groups(equal=True), st.sampled_from(["roundrobin", "cooperative-sticky"]))
def test_equal_subscriptions_are_balanced(
    group: tuple[Counts, list[MemberSubscription]], name: str
) -> None:
    counts, members = group
    result = assignor_for(name).assign(counts, members)
    assert set(check_well_formed(result, counts, members)) == subscribed_partitions(counts, members)
    assert max(loads(result).values()) - min(loads(result).values()) <= 1


@settings(max_examples=100, deadline=None)
@given(groups(claims=True, max_members=3, max_partitions=2))
def test_cooperative_sticky_is_as_even_as_the_subscriptions_allow(
    group: tuple[Counts, list[MemberSubscription]],
) -> None:
    counts, members = group
    sticky = CooperativeStickyAssignor()
    result = sticky.assign(counts, next_round(sticky.assign(counts, members), members))
    wanted = sorted(subscribed_partitions(counts, members))
    assert set(check_well_formed(result, counts, members)) == set(wanted)
    # Small enough to try every assignment: none has a smaller sum of squared loads.
    takers = [[m.member_id for m in members if t in m.topics] for t, _ in wanted]
    best = min(
        sum(n * n for n in map(choice.count, {m.member_id for m in members}))
        for choice in itertools.product(*takers)
    )
    assert sum(n * n for n in loads(result).values()) == best


@settings(max_examples=80, deadline=None)
@given(groups(claims=True))
def test_cooperative_sticky_never_hands_over_what_another_member_still_holds(
    group: tuple[Counts, list[MemberSubscription]],
) -> None:
    counts, members = group
    holders = current_holders(counts, members)
    result = CooperativeStickyAssignor().assign(counts, members)
    for tp, m in check_well_formed(result, counts, members).items():
        assert holders.get(tp, {m}) == {m}, f"{tp} given to {m} while {holders[tp]} hold it"


@settings(max_examples=100, deadline=None)
@given(st.one_of(groups(claims=True), groups(equal=True, claims=True)))
def test_cooperative_sticky_settles_in_two_rounds(
    group: tuple[Counts, list[MemberSubscription]],
) -> None:
    counts, members = group
    sticky = CooperativeStickyAssignor()
    first = sticky.assign(counts, members)
    second_members = next_round(first, members)
    second = sticky.assign(counts, second_members)
    got = check_well_formed(second, counts, members)
    assert set(got) == subscribed_partitions(counts, members)
    assert all(got[tp] == m for tp, m in owners(first).items())  # nothing moves twice
    assert sticky.assign(counts, next_round(second, second_members)) == second  # settled
    if len({frozenset(m.topics) for m in members}) == 1:
        assert max(loads(second).values()) - min(loads(second).values()) <= 1


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.integers(1, 6), st.integers(1, 4), st.integers(0, 3))
def test_cooperative_sticky_moves_only_what_a_join_requires(
    partitions: int, before: int, joining: int, seed: int
) -> None:
    sticky = CooperativeStickyAssignor()
    counts = {"t0": partitions, "t1": partitions // 2 + seed}
    old = [member(f"m{i}", "t0", "t1", generation=1) for i in range(before)]
    settled = sticky.assign(counts, old)
    members = next_round(settled, old) + [member(f"new{j}", "t0", "t1") for j in range(joining)]
    first = sticky.assign(counts, members)
    had, kept = loads(settled), loads(first)
    total, n = sum(counts.values()), before + joining
    floor, ceiling = total // n, -(-total // n)
    # Nobody takes over a partition in this round, and old members keep what balance allows:
    # the floor of the fair share each, the ceiling for as many as may have it.
    assert all(kept[f"new{j}"] == 0 for j in range(joining))
    assert all(min(had[m], floor) <= kept[m] <= min(had[m], ceiling) for m in had)
    at_ceiling = sum(1 for m in had if had[m] >= ceiling > floor)
    assert sum(kept.values()) == sum(min(h, floor) for h in had.values()) + min(
        at_ceiling, total % n
    )
    assert all(set(first[m].get(t, [])) <= set(settled[m].get(t, [])) for m in had for t in counts)
    second = sticky.assign(counts, next_round(first, members))
    assert set(owners(second)) == subscribed_partitions(counts, members)
    assert max(loads(second).values()) - min(loads(second).values()) <= 1


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.integers(2, 7), st.data())
def test_cooperative_sticky_hands_out_a_leavers_partitions_at_once(
    partitions: int, before: int, data: st.DataObject
) -> None:
    sticky = CooperativeStickyAssignor()
    counts = {"t": partitions}
    old = [member(f"m{i}", "t", generation=1) for i in range(before)]
    settled = sticky.assign(counts, old)
    leaver = data.draw(st.sampled_from(old)).member_id
    stayers = [m for m in next_round(settled, old) if m.member_id != leaver]
    result = sticky.assign(counts, stayers)
    assert set(owners(result)) == {("t", p) for p in range(partitions)}
    assert max(loads(result).values()) - min(loads(result).values()) <= 1
    assert all(set(m.owned.get("t", [])) <= set(result[m.member_id].get("t", [])) for m in stayers)


def test_a_large_group_is_assigned_quickly() -> None:
    counts = {f"t{i}": 200 for i in range(10)}
    everything = {t: list(range(c)) for t, c in counts.items()}
    members = [member("m00", *counts, owned=everything, generation=1)]
    members += [member(f"m{i:02}", *counts, generation=1) for i in range(1, 100)]
    result = CooperativeStickyAssignor().assign(counts, members)
    assert loads(result) == {"m00": 20} | {f"m{i:02}": 0 for i in range(1, 100)}
    second = CooperativeStickyAssignor().assign(counts, next_round(result, members))
    assert set(loads(second).values()) == {20}
