"""Replica assignment for new topics and partitions: a pure function, as Kafka computes it.

Kafka's rack-unaware algorithm spreads leaders (first replicas) round-robin over the brokers
from a start index, and places the other replicas at a shift from the leader that grows by
one every time the partition ids wrap around the broker list — so leaders are balanced and
no two partitions share the same follower pattern more than needed:

    first(p)      = (p + start) mod n
    shift         = initial_shift + p div n
    replica(p, j) = (first(p) + 1 + (shift + j) mod (n - 1)) mod n     for j = 0 .. rf-2

`start` and `initial_shift` are random in Kafka; callers pass them (tests pass fixed ones).
The shift grows each time the partition id reaches a multiple of n during one call, counted
from the first partition assigned in that call, exactly as Kafka does when partitions are
added later.

With `broker.rack` on every broker, `assign_replicas_rack_aware` (Kafka's rack-aware
variant) spreads each partition's replicas over as many racks as it can; `assign` chooses.
"""

from __future__ import annotations


class AssignmentError(ValueError):
    """The request cannot be satisfied: too few brokers, or a bad count."""


def _check(broker_count: int, num_partitions: int, replication_factor: int) -> None:
    if num_partitions <= 0:
        raise AssignmentError("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise AssignmentError("replication factor must be larger than 0")
    if replication_factor > broker_count:
        raise AssignmentError(
            f"replication factor: {replication_factor} larger than available brokers: "
            f"{broker_count}"
        )


def assign_replicas(
    brokers: list[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int = 0,
    initial_shift: int = 0,
    first_partition: int = 0,
) -> dict[int, list[int]]:
    """Partition id → replica list (preferred leader first) for `num_partitions` partitions
    numbered from `first_partition`."""
    _check(len(brokers), num_partitions, replication_factor)
    ordered = sorted(brokers)
    n = len(ordered)
    assignment: dict[int, list[int]] = {}
    shift = initial_shift
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[_replica_index(first, shift, j, n)])
        assignment[p] = replicas
    return assignment


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Brokers ordered by taking one from each rack in turn (racks sorted, brokers sorted
    within a rack): [a1, b1, c1, a2, b2, ...]."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(racks):
        out += [q[depth] for q in queues if depth < len(q)]
        depth += 1
    return out


def assign_replicas_rack_aware(
    racks: dict[int, str],
    num_partitions: int,
    replication_factor: int,
    *,
    start_index: int = 0,
    initial_shift: int = 0,
    first_partition: int = 0,
) -> dict[int, list[int]]:
    """Kafka's rack-aware assignment: leaders round-robin over a rack-alternated broker list;
    each further replica goes to the next broker (by the same shifting rule) on a rack without
    a replica yet, while such racks remain, and never twice to one broker while others have
    none."""
    _check(len(racks), num_partitions, replication_factor)
    arranged = rack_alternated(racks)
    n, rack_count = len(arranged), len(set(racks.values()))
    assignment: dict[int, list[int]] = {}
    shift = initial_shift
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        leader = arranged[first]
        replicas, used_racks, k = [leader], {racks[leader]}, 0
        while len(replicas) < replication_factor:
            broker = arranged[_replica_index(first, shift * rack_count, k, n)]
            rack = racks[broker]
            k += 1
            if (rack not in used_racks or len(used_racks) == rack_count) and (
                broker not in replicas or len(replicas) == n
            ):
                replicas.append(broker)
                used_racks.add(rack)
        assignment[p] = replicas
    return assignment


def assign(
    brokers: dict[int, str | None],
    num_partitions: int,
    replication_factor: int,
    **placement: int,
) -> dict[int, list[int]]:
    """Rack-aware when every broker has `broker.rack`, rack-unaware when none has; a mix is
    refused, as Kafka refuses it."""
    racks = {b: r for b, r in brokers.items() if r is not None}
    if not racks:
        return assign_replicas(list(brokers), num_partitions, replication_factor, **placement)
    if len(racks) != len(brokers):
        raise AssignmentError(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    return assign_replicas_rack_aware(racks, num_partitions, replication_factor, **placement)
