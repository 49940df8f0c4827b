"""The producer's record accumulator: records collected into per-partition batches (sans-I/O).

`append` encodes a record into the open batch of its partition (a new batch when the open one
would pass `batch.size`; a record larger than that gets a batch of its own); `append_plain`
does the same for a run of records without headers in one call (the blocking producer's hot
path: one encoding loop per run instead of two calls per record). `ready(now_ms)`
names the partitions whose first batch should be sent: it is full, a later batch exists, its
`linger.ms` has passed, or a flush is in progress. The sender `pop`s those batches, and puts
back (`requeue`, at the front, in sequence order) those it must retry.

Invariants: batches of a partition leave in the order they were created, except that retried
ones go back in front of every batch not yet sent; `buffered_bytes` is the encoded size of
every record not yet completed; nothing here touches a socket or a clock — time is `now_ms`.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from riverlog.model import TopicPartition
from riverlog.protocol.records.batch_header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from riverlog.protocol.records.v2 import assemble_batch, encode_record
from riverlog.protocol.varint import encode_unsigned_varint, encode_varint, encode_varlong

KeyValue = tuple[bytes | None, bytes | None]
"""A record without headers: key and value."""

BATCH_OVERHEAD = 61 + 12  # batch header and the produce request's per-partition framing
_ATTRIBUTES = b"\x00"  # record attributes: unused
_NO_HEADERS = b"\x00"
_NULL = encode_varint(-1)
_NO_LIMIT = 1 << 62
RECORD_BOUND = 21
"""A record's encoded size is at most this plus its key and value (no headers): the varints
at their widest but the length's."""
_TABLE_LIMIT = 1 << 14
_HALF_LIMIT = _TABLE_LIMIT >> 1  # a non-negative value v below it is table[v << 1]
_SMALL_VARINTS = [encode_unsigned_varint(z) for z in range(_TABLE_LIMIT)]
"""Unsigned varints below 2**14, by value: zig-zag values of -8192..8191 (lengths up to 8 KiB,
timestamp deltas up to 8 s) are encoded by one list lookup."""


@dataclass(eq=False)
class ProducerBatch:
    """Records of one partition sent (and retried) together, with their sequence once sent.

    Records are kept as their encoded pieces (`parts`) and joined once, when the batch is
    encoded; `futures[i]` is answered for record i."""

    topic: str
    partition: int
    created_ms: int
    base_timestamp: int
    max_timestamp: int = -1
    parts: list[bytes] = field(default_factory=list)
    count: int = 0
    size: int = BATCH_OVERHEAD
    futures: list[Any] = field(default_factory=list)
    """Per record, who hears the outcome (the producer's business)."""
    timestamps: list[int] = field(default_factory=list)
    attempts: int = 0
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    is_transactional: bool = False
    closed: bool = False
    """No more records: it was sent once (its sequence and bytes are fixed)."""
    serial: int = field(default_factory=itertools.count().__next__)
    """Creation order across all batches (a partition's retries go back in this order)."""
    sent_behind: bool = False
    """When last sent, an earlier batch of its partition and producer id was unanswered or
    waiting for a retry (the producer's business: a refusal as out of order is then no gap)."""

    def add(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> int:
        """Append a record; its encoded size."""
        if not headers:
            return self.add_plain(timestamp, ((key, value),), 0, _NO_LIMIT)[1]
        data = encode_record(self.count, timestamp - self.base_timestamp, key, value, headers)
        self.parts.append(data)
        self.count += 1
        self.size += len(data)
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self.timestamps.append(timestamp)
        return len(data)

    def add_plain(
        self, timestamp: int, records: Sequence[KeyValue], start: int, limit: int
    ) -> tuple[int, int]:
        """Append `records[start:]`, records without headers all stamped `timestamp`, while
        the batch stays within `limit` bytes by their size bound (a batch without records
        takes one whatever its size); (records taken, bytes they added). The hot path of
        the producer: zig-zag varints by table lookup, pieces joined only by `encode`."""
        table, parts = _SMALL_VARINTS, self.parts
        n, size = self.count, self.size
        d = timestamp - self.base_timestamp
        z = (d << 1) ^ (d >> 63)
        delta = table[z] if z < _TABLE_LIMIT else encode_varlong(d)
        for i in range(start, len(records)):
            key, value = records[i]
            if key is None:
                key_length, key, kl = _NULL, b"", 0
            else:
                kl = len(key)
                key_length = table[kl << 1] if kl < _HALF_LIMIT else encode_varint(kl)
            if value is None:
                value_length, value, vl = _NULL, b"", 0
            else:
                vl = len(value)
                value_length = table[vl << 1] if vl < _HALF_LIMIT else encode_varint(vl)
            if n and size + RECORD_BOUND + kl + vl > limit:
                break
            offset = table[n << 1] if n < _HALF_LIMIT else encode_varint(n)
            body = 2 + len(delta) + len(offset) + len(key_length) + kl + len(value_length) + vl
            length = table[body << 1] if body < _HALF_LIMIT else encode_varint(body)
            parts += (
                length,
                _ATTRIBUTES,
                delta,
                offset,
                key_length,
                key,
                value_length,
                value,
                _NO_HEADERS,
            )
            size += len(length) + body
            n += 1
        taken, added = n - self.count, size - self.size
        self.count, self.size = n, size
        if taken:
            self.timestamps += [timestamp] * taken
            if timestamp > self.max_timestamp:
                self.max_timestamp = timestamp
        return taken, added

    def encode(self, compression_type: int) -> bytes:
        """The batch as sent: a v2 batch with this batch's producer id, epoch and sequence."""
        return assemble_batch(
            b"".join(self.parts),
            self.count,
            base_offset=0,
            base_timestamp=self.base_timestamp,
            max_timestamp=self.max_timestamp,
            last_offset_delta=self.count - 1,
            compression_type=compression_type,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            is_transactional=self.is_transactional,
        )


def _estimate(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> int:
    """An upper bound of a record's encoded size (varints at their widest but the length)."""
    size = RECORD_BOUND + (len(key) if key else 0) + (len(value) if value else 0)
    for header_key, header_value in headers:
        size += 10 + len(header_key) * 4 + len(header_value or b"")
    return size


class RecordAccumulator:
    def __init__(self, batch_size: int, linger_ms: int) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffered_bytes = 0
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._flushing = 0

    def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        now_ms: int,
    ) -> tuple[ProducerBatch, bool]:
        """Add a record; returns its batch and whether a new batch was started for it."""
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = deque()
        batch = queue[-1] if queue else None
        started = False
        if headers:
            estimate = _estimate(key, value, headers)
        else:
            estimate = (
                RECORD_BOUND
                + (len(key) if key is not None else 0)
                + (len(value) if value is not None else 0)
            )
        if batch is None or batch.closed or batch.size + estimate > self.batch_size:
            batch = ProducerBatch(topic, partition, now_ms, timestamp)
            queue.append(batch)
            started = True
        self.buffered_bytes += batch.add(timestamp, key, value, headers)
        return batch, started

    def append_plain(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        records: Sequence[KeyValue],
        waiters: Sequence[Any],
        now_ms: int,
    ) -> int:
        """Add records without headers, all stamped `timestamp`, in order, starting batches as
        `append` would (`waiters[i]` hears about `records[i]`); how many batches it started."""
        queue = self._queues.get((topic, partition))
        if queue is None:
            queue = self._queues[(topic, partition)] = deque()
        started = start = 0
        while start < len(records):
            batch = queue[-1] if queue else None
            taken = added = 0
            if batch is not None and not batch.closed:
                taken, added = batch.add_plain(timestamp, records, start, self.batch_size)
            if not taken:
                batch = ProducerBatch(topic, partition, now_ms, timestamp)
                queue.append(batch)
                started += 1
                taken, added = batch.add_plain(timestamp, records, start, self.batch_size)
            assert batch is not None
            batch.futures += waiters[start : start + taken]
            self.buffered_bytes += added
            start += taken
        return started

    def ready(self, now_ms: int, muted: Callable[[TopicPartition], bool]) -> list[TopicPartition]:
        """Partitions whose first batch is due, leaving out those `muted` says to hold."""
        out = []
        for tp, queue in self._queues.items():
            if not queue or muted(tp):
                continue
            head = queue[0]
            if (
                self._flushing
                or head.closed
                or len(queue) > 1
                or head.size >= self.batch_size
                or now_ms - head.created_ms >= self.linger_ms
            ):
                out.append(tp)
        return out

    def next_linger_deadline(self) -> int | None:
        """The earliest time a partition becomes ready by lingering; None if none waits."""
        heads = [q[0].created_ms for q in self._queues.values() if q]
        return min(heads) + self.linger_ms if heads else None

    def pop(self, tp: TopicPartition) -> ProducerBatch:
        batch = self._queues[tp].popleft()
        batch.closed = True
        return batch

    def take_partition(self, tp: TopicPartition) -> list[ProducerBatch]:
        """Remove and return every batch waiting for `tp`."""
        queue = self._queues.get(tp)
        taken = list(queue or ())
        if queue:
            queue.clear()
        return taken

    def requeue(self, batches: list[ProducerBatch]) -> None:
        """Put batches to retry back at the front of their partitions, in the given order."""
        for batch in reversed(batches):
            self._queues.setdefault((batch.topic, batch.partition), deque()).appendleft(batch)

    def release(self, batch: ProducerBatch) -> None:
        """A batch is done (delivered or failed): its bytes leave the buffer."""
        self.buffered_bytes -= batch.size - BATCH_OVERHEAD

    def take_expired(self, now_ms: int, deadline_ms: int) -> list[ProducerBatch]:
        """Remove and return waiting batches created more than `deadline_ms` ago."""
        out = []
        for queue in self._queues.values():
            while queue and now_ms - queue[0].created_ms >= deadline_ms:
                out.append(queue.popleft())
        return out

    def has_waiting(self) -> bool:
        return any(self._queues.values())

    def begin_flush(self) -> None:
        self._flushing += 1

    def end_flush(self) -> None:
        self._flushing -= 1
