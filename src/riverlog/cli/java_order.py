"""The order in which Java's `HashMap` iterates: Kafka's tools print some maps that way.

`kafka-delete-records.sh` prints its per-partition results, and `kafka-log-dirs.sh` writes its
JSON objects, by iterating `java.util.HashMap`s, so their order is the buckets' order:
`(h ^ (h >>> 16)) & (capacity - 1)` with the table grown from 16 by doubling while more than
3/4 full, entries of one bucket in insertion order. To print what Kafka prints, the tools sort
with `hash_map_order` and the hashes here (`String.hashCode`, `TopicPartition.hashCode`).

Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

_K = TypeVar("_K")


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def string_hash(s: str) -> int:
    """Java's `String.hashCode` (over UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def topic_partition_hash(topic: str, partition: int) -> int:
    """Kafka's `TopicPartition.hashCode`."""
    return _int32(31 * (31 + partition) + string_hash(topic))


def _bucket(h: int, capacity: int) -> int:
    u = h & 0xFFFFFFFF
    return (u ^ (u >> 16)) & (capacity - 1)


def hash_map_order(keys: Iterable[_K], hash_of: Callable[[_K], int]) -> list[_K]:
    """`keys` (given in insertion order) in the order a default `HashMap` iterates them."""
    items = list(keys)
    capacity = 16
    while len(items) > capacity * 3 // 4:
        capacity *= 2
    ranked = sorted(enumerate(items), key=lambda ik: (_bucket(hash_of(ik[1]), capacity), ik[0]))
    return [k for _, k in ranked]
