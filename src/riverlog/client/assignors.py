"""Consumer-group partition assignors: range, roundrobin and cooperative-sticky (pure logic).

The group leader runs one of these over every member's subscription, so riverlog, Java and
librdkafka members can lead each other's groups. Range and roundrobin give exactly the Java
client's results; cooperative-sticky follows the Java assignor's rules, not its exact choices
(those depend on Java's hash-map order, which librdkafka does not reproduce either):
- **range**: per topic, its subscribers in Kafka's member order get contiguous ranges, the
  first `partitions % subscribers` of them one partition more.
- **roundrobin**: every subscribed partition, sorted by (topic, partition), dealt in turn to
  the members in Kafka's member order, skipping members not subscribed to its topic.
- **cooperative-sticky** (KIP-54's goals, KIP-429's protocol): a partition's current holder is
  the member claiming it in `owned` with the highest `generation`; claims of equal generation
  cancel (nobody holds it). Holders keep their partitions of topics they still subscribe to,
  with equal subscriptions up to their fair share; the other partitions go, those with the
  fewest possible takers first, to their least loaded subscriber; then partitions move along
  chains of subscribers until the loads are as even as the subscriptions allow (least sum of
  squares; with equal subscriptions, counts differ by at most one), moving as few held
  partitions as it can. Last, the cooperative rule: a partition planned for a member other
  than its holder(s) — including a holder no longer subscribed to its topic — is left
  *unassigned* this round. The holder finds it missing from its assignment, revokes it and
  rejoins; the follow-up rebalance, where nobody holds it any more, assigns it (and, if the
  group did not change meanwhile, moves nothing else). No partition has two owners at once.

Kafka's member order (Java's `MemberInfo`): members with a `group.instance.id` first, ordered
by it, then the others by member id; strings compare as in Java (by UTF-16 code unit). Topic
names are ASCII (Kafka's legal characters), so they sort the same in both languages.

Invariants: every member appears in the result (possibly with no partitions); no partition is
assigned twice; a member only gets partitions of known topics it subscribes to; partitions are
sorted; the partitions each member gets do not depend on the order of `members`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from riverlog.model import TopicPartition

Assignment = dict[str, dict[str, list[int]]]
"""member_id -> topic -> sorted partitions."""


@dataclass(frozen=True)
class MemberSubscription:
    """One member's JoinGroup metadata as the leader sees it."""

    member_id: str
    group_instance_id: str | None  # static membership id, or None
    topics: tuple[str, ...]  # subscribed topics
    owned: dict[str, list[int]]  # held before this rebalance (cooperative; empty for eager)
    generation: int = -1  # the generation in which it held them (-1 unknown)


class Assignor(Protocol):
    name: str  # the protocol name sent in JoinGroup
    cooperative: bool

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment: ...


def _java_string(s: str) -> bytes:
    """A sort key ordering strings as Java's `String.compareTo` does."""
    return s.encode("utf-16-be", "surrogatepass")


def _member_order(m: MemberSubscription) -> tuple[int, bytes, bytes]:
    # Java leaves two equal instance ids in input order; the member id keeps ours deterministic.
    if m.group_instance_id is not None:
        return (0, _java_string(m.group_instance_id), _java_string(m.member_id))
    return (1, _java_string(m.member_id), b"")


def _result(
    members: Sequence[MemberSubscription], owners: Mapping[TopicPartition, str]
) -> Assignment:
    out: Assignment = {m.member_id: {} for m in members}
    for (topic, partition), member in sorted(owners.items()):
        out[member].setdefault(topic, []).append(partition)
    return out


class RangeAssignor:
    name = "range"
    cooperative = False

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        ordered = sorted(members, key=_member_order)
        owners: dict[TopicPartition, str] = {}
        for topic, count in partitions_per_topic.items():
            subscribers = [m.member_id for m in ordered if topic in m.topics]
            if not subscribers:
                continue
            each, extra = divmod(count, len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                end = start + each + (1 if i < extra else 0)
                owners.update(((topic, p), member) for p in range(start, end))
                start = end
        return _result(members, owners)


class RoundRobinAssignor:
    name = "roundrobin"
    cooperative = False

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        ordered = sorted(members, key=_member_order)
        topics_of = [set(m.topics) for m in ordered]
        subscribed = sorted(set().union(*topics_of) & partitions_per_topic.keys())
        owners: dict[TopicPartition, str] = {}
        turn = 0
        for topic in subscribed:
            for partition in range(partitions_per_topic[topic]):
                while topic not in topics_of[turn % len(ordered)]:
                    turn += 1  # ends: some member subscribes to `topic`
                owners[(topic, partition)] = ordered[turn % len(ordered)].member_id
                turn += 1
        return _result(members, owners)


class CooperativeStickyAssignor:
    name = "cooperative-sticky"
    cooperative = True

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        ordered = sorted(members, key=_member_order)
        rank = {m.member_id: i for i, m in enumerate(ordered)}
        eligible = {m.member_id: set(m.topics) & partitions_per_topic.keys() for m in ordered}
        subscribers: dict[str, list[str]] = {}  # topic -> its subscribers, in member order
        for member, topics in eligible.items():
            for topic in sorted(topics):
                subscribers.setdefault(topic, []).append(member)
        holders = _current_holders(ordered, partitions_per_topic)

        held: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        free: list[TopicPartition] = []
        for topic in sorted(subscribers):
            for p in range(partitions_per_topic[topic]):
                holder = holders.get((topic, p), [])
                if len(holder) == 1 and topic in eligible[holder[0]]:
                    held[holder[0]].append((topic, p))
                else:
                    free.append((topic, p))
        if len({frozenset(topics) for topics in eligible.values()}) == 1:
            free += _trim_to_fair_shares(held, rank, len(free) + sum(map(len, held.values())))
        kept = {tp: m for m, tps in held.items() for tp in tps}
        for tp in sorted(free, key=lambda tp: (len(subscribers[tp[0]]), tp)):
            target = min(subscribers[tp[0]], key=lambda m: (len(held[m]), rank[m]))
            held[target].append(tp)
        _balance(held, subscribers, rank, kept)

        owners = {
            tp: member
            for member, tps in held.items()
            for tp in tps
            if all(h == member for h in holders.get(tp, []))
        }
        return _result(members, owners)


def _current_holders(
    ordered: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> dict[TopicPartition, list[str]]:
    """Per claimed partition of an existing topic, the claimants of the highest generation
    (more than one only when claims tie), whether or not they still subscribe to the topic."""
    claims: dict[TopicPartition, tuple[int, list[str]]] = {}
    for m in ordered:
        for topic, partitions in sorted(m.owned.items()):
            count = partitions_per_topic.get(topic, 0)
            for p in sorted(set(partitions)):
                if not 0 <= p < count:
                    continue
                generation, who = claims.get((topic, p), (m.generation, []))
                if m.generation > generation:
                    claims[(topic, p)] = (m.generation, [m.member_id])
                elif m.generation == generation:
                    claims[(topic, p)] = (generation, [*who, m.member_id])
    return {tp: who for tp, (_, who) in claims.items()}


def _trim_to_fair_shares(
    held: dict[str, list[TopicPartition]], rank: Mapping[str, int], total: int
) -> list[TopicPartition]:
    """With equal subscriptions the balanced loads are known (Java's constrained path):
    `total // members` each, one more for `total % members` of them, the extra going to those
    holding the most (fewest moves). Trims each member to its share and returns what it gave
    up, its highest-numbered partitions; `_balance` then has nothing left to do."""
    floor, extra = divmod(total, len(held))
    released: list[TopicPartition] = []
    for i, member in enumerate(sorted(held, key=lambda m: (-len(held[m]), rank[m]))):
        share = floor + (1 if i < extra else 0)
        released += held[member][share:]
        del held[member][share:]
    return released


Move = tuple[TopicPartition, str, str]  # (partition, giver, taker)


def _balance(
    held: dict[str, list[TopicPartition]],
    subscribers: Mapping[str, list[str]],
    rank: Mapping[str, int],
    kept: Mapping[TopicPartition, str],
) -> None:
    """Make the loads as even as the subscriptions allow (least sum of squared loads), moving
    as few kept partitions (`kept`: partition -> the holder keeping it) as it can.

    A load falls by moving partitions along a chain: the giver hands one to a subscriber of its
    topic, who may hand another on, until a member holding at least two fewer than the giver
    takes one. The loads are optimal exactly when no such chain exists. First only partitions
    not kept move, then kept ones too, each chain moving as few of them as it can. (So after a
    cooperative round, whose result is an optimal plan minus the partitions withheld, the next
    round moves nothing kept.) Each chain lowers the sum of squares, so this ends."""
    for only_unkept in (True, False):
        while path := _improving_path(held, subscribers, rank, kept, only_unkept):
            for tp, giver, taker in path:
                held[giver].remove(tp)
                held[taker].append(tp)


def _improving_path(
    held: Mapping[str, list[TopicPartition]],
    subscribers: Mapping[str, list[str]],
    rank: Mapping[str, int],
    kept: Mapping[TopicPartition, str],
    only_unkept: bool,
) -> list[Move]:
    """A chain from the most loaded member that can start one to the least loaded member two
    below it, or [] when there is none."""
    load = {m: len(tps) for m, tps in held.items()}
    # What each member gives up first, per topic: a partition whose move changes no holder
    # again (cost 0), then the highest-numbered (Java's sticky assignor revokes the tail).
    offers: dict[str, dict[str, tuple[int, TopicPartition]]] = {m: {} for m in held}
    for member, tps in held.items():
        for tp in tps:
            cost = int(kept.get(tp) == member)
            offer = offers[member].get(tp[0])
            if not (only_unkept and cost) and (
                offer is None or (cost, -tp[1]) < (offer[0], -offer[1][1])
            ):
                offers[member][tp[0]] = (cost, tp)
    lowest = min(load.values(), default=0)
    for source in sorted(held, key=lambda m: (-load[m], rank[m])):
        if load[source] < lowest + 2:
            break
        moved, paths = _cheapest_chains(source, offers, subscribers)
        takers = [m for m in paths if load[m] + 2 <= load[source]]
        if takers:
            return paths[min(takers, key=lambda m: (load[m], moved[m], rank[m]))]
    return []


def _cheapest_chains(
    source: str,
    offers: Mapping[str, Mapping[str, tuple[int, TopicPartition]]],
    subscribers: Mapping[str, list[str]],
) -> tuple[dict[str, int], dict[str, list[Move]]]:
    """0-1 breadth-first search over members and topics: a member reaches each topic it offers a
    partition of (costing 1 for a kept one), a topic each of its subscribers. Per reachable
    member, the fewest kept partitions moved to reach it, and the moves."""
    cost: dict[tuple[bool, str], int] = {(True, source): 0}  # (is a member, name)
    parent: dict[tuple[bool, str], tuple[bool, str]] = {}
    queue = deque([(True, source)])
    while queue:
        node = queue.popleft()
        is_member, name = node
        edges = (
            [((False, t), c) for t, (c, _) in sorted(offers[name].items())]
            if is_member
            else [((True, m), 0) for m in subscribers[name]]
        )
        for nxt, step in edges:
            if cost[node] + step < cost.get(nxt, cost[node] + step + 1):
                cost[nxt], parent[nxt] = cost[node] + step, node
                (queue.appendleft if step == 0 else queue.append)(nxt)
    paths: dict[str, list[Move]] = {}
    for is_member, name in parent:
        if is_member:
            moves, taker = [], (True, name)
            while taker in parent:
                topic = parent[taker]
                giver = parent[topic]
                moves.append((offers[giver[1]][topic[1]][1], giver[1], taker[1]))
                taker = giver
            paths[name] = moves
    return {name: c for (is_member, name), c in cost.items() if is_member}, paths


ASSIGNORS: dict[str, Assignor] = {
    a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor())
}


def assignor_for(name: str) -> Assignor:
    """The assignor of a JoinGroup protocol name; ValueError naming the known ones otherwise."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(f"unknown assignor {name!r} (known: {', '.join(ASSIGNORS)})") from None
