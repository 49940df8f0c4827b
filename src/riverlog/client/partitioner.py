"""Choosing a partition for a record: Kafka's default partitioner and the custom-partitioner hook.

Keyed records go to `murmur2(key) & 0x7fffffff % partitions` — exactly the Java client's
`Utils.toPositive(Utils.murmur2(key)) % numPartitions` and librdkafka's `murmur2_random`, so a
key lands on the same partition whichever of these clients wrote it. Records without a key use
sticky partitioning (KIP-480): all go to one partition, chosen at random among those with a
leader, until the producer closes that partition's batch; then another is chosen.

Invariant: `DefaultPartitioner.partition` returns a value in `range(partition_count)`; a custom
partitioner's answer is checked by the producer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (`Utils.murmur2`), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


_HASHES: dict[bytes, int] = {}
_HASHES_KEPT = 100_000


def key_partition(key: bytes, partition_count: int) -> int:
    """The partition the Java client and librdkafka (`murmur2_random`) pick for `key`.
    Positive hashes of recent keys are remembered (keys repeat: user ids, device ids)."""
    h = _HASHES.get(key)
    if h is None:
        if len(_HASHES) >= _HASHES_KEPT:
            _HASHES.clear()
        h = _HASHES[key] = murmur2(key) & 0x7FFFFFFF
    return h % partition_count


class Partitioner(Protocol):
    """What a custom partitioner implements (the Java client's `Partitioner`)."""

    def partition(
        self, topic: str, key: bytes | None, partition_count: int, available: Sequence[int]
    ) -> int:
        """The partition for a record; `available` are the partitions that have a leader."""
        ...

    def on_new_batch(self, topic: str, partition: int) -> None:
        """The producer closed the batch it was filling for `partition` of `topic`."""
        ...


class DefaultPartitioner:
    """murmur2 for keys, sticky random partition for records without one."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self._previous: dict[str, int] = {}

    def partition(
        self, topic: str, key: bytes | None, partition_count: int, available: Sequence[int]
    ) -> int:
        if key is not None:
            return key_partition(key, partition_count)
        current = self._sticky.get(topic)
        if current is None or current >= partition_count:
            current = self._choose(partition_count, available, self._previous.get(topic))
            self._sticky[topic] = current
        return current

    def on_new_batch(self, topic: str, partition: int) -> None:
        if self._sticky.get(topic) == partition:
            self._previous[topic] = self._sticky.pop(topic)  # the next keyless record picks another

    def _choose(self, count: int, available: Sequence[int], previous: int | None) -> int:
        candidates = [p for p in available if p < count] or list(range(count))
        if len(candidates) > 1 and previous in candidates:
            candidates.remove(previous)
        return self._rng.choice(candidates)
