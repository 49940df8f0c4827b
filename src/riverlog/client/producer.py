"""A simple producer: records grouped per partition into one v2 batch each, sent to leaders.

Partitioning is Kafka's default: murmur2 of the key (so keyed records land where the Java
client and librdkafka's `murmur2_random` put them), round robin for records without a key.
Retriable errors (leader moved, topic being created) refresh metadata and retry a few times.
Idempotence and transactions are not offered here yet.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from riverlog.client.cluster import Cluster
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import ProduceRequest, ProduceResponse
from riverlog.protocol.records import compression
from riverlog.protocol.records.v2 import Record, encode_batch

RETRIES = 5


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2), as a signed 32-bit int."""
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


def key_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass
class OutgoingRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class Delivered:
    partition: int
    offset: int


class Producer:
    def __init__(
        self,
        cluster: Cluster,
        *,
        acks: int = -1,
        compression_type: int = compression.NONE,
        timeout_ms: int = 30_000,
    ) -> None:
        self.cluster = cluster
        self.acks = acks
        self.compression_type = compression_type
        self.timeout_ms = timeout_ms
        self._round_robin = itertools.count()

    async def send(self, topic: str, records: Sequence[OutgoingRecord]) -> list[Delivered]:
        """Send records; returns where each landed (offsets are -1 with acks=0)."""
        count = await self.cluster.partitions_of(topic)
        by_partition: dict[int, list[int]] = {}
        for i, r in enumerate(records):
            if r.partition is not None:
                p = r.partition
            elif r.key is not None:
                p = key_partition(r.key, count)
            else:
                p = next(self._round_robin) % count
            by_partition.setdefault(p, []).append(i)
        results: list[Delivered] = [Delivered(-1, -1)] * len(records)
        sends = [
            self._send_partition(topic, p, [records[i] for i in idx])
            for p, idx in by_partition.items()
        ]
        for (p, idx), base in zip(by_partition.items(), await asyncio.gather(*sends), strict=True):
            for n, i in enumerate(idx):
                results[i] = Delivered(p, base + n if base >= 0 else -1)
        return results

    async def _send_partition(
        self, topic: str, partition: int, records: list[OutgoingRecord]
    ) -> int:
        now = int(time.time() * 1000)
        batch = encode_batch(
            [
                Record(
                    i,
                    r.timestamp if r.timestamp is not None else now,
                    r.key,
                    r.value,
                    list(r.headers),
                )
                for i, r in enumerate(records)
            ],
            compression_type=self.compression_type,
        )
        request = ProduceRequest(
            acks=self.acks,
            timeout_ms=self.timeout_ms,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=partition, records=batch)
                    ],
                )
            ],
        )
        for attempt in range(RETRIES):
            conn = await self.cluster.leader_connection(topic, partition)
            if self.acks == 0:
                await conn.send_no_response(request)
                return -1
            response = await conn.send(request)
            assert isinstance(response, ProduceResponse)
            answer = response.responses[0].partition_responses[0]
            if answer.error_code == 0:
                return answer.base_offset
            error = KafkaError(for_code(answer.error_code), answer.error_message)
            if not error.retriable or attempt == RETRIES - 1:
                raise error
            await asyncio.sleep(0.1 * (attempt + 1))
            await self.cluster.refresh([topic])
        raise AssertionError("unreachable")
