"""A simple consumer of assigned partitions (no group yet): fetch, decode, advance.

Positions start at the earliest or latest offset (ListOffsets) or a given offset. `poll`
sends one Fetch per leader (long poll up to `max_wait_ms`), decodes the record batches, drops
records below the position (a fetch starts at the batch holding it) and advances. A position
out of range is reset by `auto_offset_reset`, as Kafka's consumer does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from riverlog.client.admin import list_offsets
from riverlog.client.cluster import Cluster
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import FetchRequest, FetchResponse
from riverlog.protocol.records.v2 import iter_record_batches

EARLIEST = -2
LATEST = -1
OFFSET_OUT_OF_RANGE = 1


@dataclass(frozen=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class Consumer:
    def __init__(
        self,
        cluster: Cluster,
        *,
        auto_offset_reset: int = LATEST,
        max_partition_bytes: int = 1 << 20,
    ) -> None:
        self.cluster = cluster
        self.auto_offset_reset = auto_offset_reset
        self.max_partition_bytes = max_partition_bytes
        self.positions: dict[tuple[str, int], int] = {}

    async def assign(
        self, topic: str, partitions: list[int] | None = None, start: int = LATEST
    ) -> None:
        """Consume `partitions` of `topic` (all when None) from EARLIEST, LATEST or an offset."""
        count = await self.cluster.partitions_of(topic, allow_auto_create=False)
        for p in partitions if partitions is not None else range(count):
            if not 0 <= p < count:
                raise KafkaError(for_code(3), f"Partition {p} of '{topic}' does not exist.")
            self.positions[(topic, p)] = (
                start if start >= 0 else await self._offset_at(topic, p, start)
            )

    async def _offset_at(self, topic: str, partition: int, timestamp: int) -> int:
        conn = await self.cluster.leader_connection(topic, partition)
        found = await list_offsets(conn, [(topic, partition)], timestamp)
        return found[(topic, partition)]

    async def poll(self, max_wait_ms: int = 500) -> list[ConsumedRecord]:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in self.positions:
            await self.cluster.leader_connection(*tp)  # opens and resolves leaders
            by_leader.setdefault(self.cluster.leaders[tp], []).append(tp)
        results = await asyncio.gather(
            *(self._fetch(tps, max_wait_ms) for tps in by_leader.values())
        )
        return [r for batch in results for r in batch]

    async def _fetch(
        self, partitions: list[tuple[str, int]], max_wait_ms: int
    ) -> list[ConsumedRecord]:
        topics: dict[str, list[FetchRequest.FetchPartition]] = {}
        for topic, p in partitions:
            topics.setdefault(topic, []).append(
                FetchRequest.FetchPartition(
                    partition=p,
                    fetch_offset=self.positions[(topic, p)],
                    partition_max_bytes=self.max_partition_bytes,
                )
            )
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=50 << 20,
            isolation_level=0,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
        )
        conn = await self.cluster.leader_connection(*partitions[0])
        version = min(conn.version_for(FetchRequest), 12)  # by name, not topic id
        response = await conn.send(request, version)
        assert isinstance(response, FetchResponse)
        out: list[ConsumedRecord] = []
        for t in response.responses:
            for data in t.partitions:
                out += await self._records(t.topic, data)
        return out

    async def _records(self, topic: str, data: FetchResponse.PartitionData) -> list[ConsumedRecord]:
        key = (topic, data.partition_index)
        if data.error_code == OFFSET_OUT_OF_RANGE:
            self.positions[key] = await self._offset_at(
                topic, data.partition_index, self.auto_offset_reset
            )
            return []
        if data.error_code:
            await self.cluster.refresh([topic])
            return []
        position = self.positions[key]
        out = []
        raw = data.records
        if not isinstance(raw, bytes | bytearray | memoryview):
            return []
        for batch in iter_record_batches(raw):
            if batch.header.is_control:
                position = max(position, batch.header.next_offset)
                continue
            for r in batch.records:
                if r.offset >= position:
                    out.append(
                        ConsumedRecord(
                            topic,
                            data.partition_index,
                            r.offset,
                            r.timestamp,
                            batch.header.timestamp_type,
                            r.key,
                            r.value,
                            r.headers,
                        )
                    )
            position = max(position, batch.header.next_offset)
        self.positions[key] = position
        return out
