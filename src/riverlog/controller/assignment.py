"""Replica assignment for new topics and partitions: a pure function, as Kafka computes it.

Kafka's rack-unaware algorithm spreads leaders (first replicas) round-robin over the brokers
from a start index, and places the other replicas at a shift from the leader that grows by
one every time the partition ids wrap around the broker list — so leaders are balanced and
no two partitions share the same follower pattern more than needed:

    first(p)      = (p + start) mod n
    shift         = initial_shift + p div n
    replica(p, j) = (first(p) + 1 + (shift + j) mod (n - 1)) mod n     for j = 0 .. rf-2

`start` and `initial_shift` are random in Kafka; callers pass them (tests pass fixed ones).
Rack-aware placement comes with the cluster (`broker.rack`).
"""

from __future__ import annotations


class AssignmentError(ValueError):
    """The request cannot be satisfied: too few brokers, or a bad count."""


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
    if num_partitions <= 0:
        raise AssignmentError("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise AssignmentError("replication factor must be larger than 0")
    if replication_factor > len(brokers):
        raise AssignmentError(
            f"replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}"
        )
    ordered = sorted(brokers)
    n = len(ordered)
    assignment: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + num_partitions):
        first = (p + start_index) % n
        shift = initial_shift + p // n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment[p] = replicas
    return assignment
