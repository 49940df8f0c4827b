"""Fetching for the consumer: one Fetch per leader, and what came back, split into batches.

`fetch_from(cluster, node, positions, config)` sends one Fetch (no fetch session: each request
names its partitions) to broker `node` for the partitions it leads, and returns one
`FetchedPartition` per partition: its error code, high watermark, and the *data batches* — the
whole v2 record batches of the answer, with control batches (transaction markers) dropped and,
under `read_committed`, the batches of aborted transactions dropped (`data_batches`, pure logic:
Kafka's consumer algorithm over the response's aborted-transaction list). Records are decoded
only when the consumer hands them out (`decode_records`, the compiled record walk), or
straight into Arrow.

Invariants: `next_offset` is past every complete batch of the answer (control and aborted ones
included), so the consumer never fetches them again; a trailing partial batch (the broker cuts
at the byte limit) is left for the next fetch; old message formats (magic 0/1) are converted
to v2 first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from riverlog.client.cluster import Cluster
from riverlog.client.config import ConsumerConfig
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.exceptions import CorruptRecordError, ProtocolError
from riverlog.protocol.messages import FetchRequest, FetchResponse
from riverlog.protocol.records import compression, convert, walk
from riverlog.protocol.records.batch_header import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    peek_magic,
    read_batch_header,
    verify_crc,
)
from riverlog.protocol.records.v2 import CONTROL_ABORT, control_record_type
from riverlog.protocol.records.v2 import decode_records as decode_v2_records

MAX_FETCH_VERSION = 12  # v13 addresses topics by id only
READ_COMMITTED = 1
# Fetch errors that mean the client's idea of the leader is out of date: refresh metadata.
STALE_METADATA_ERRORS = {
    error_codes.NOT_LEADER_OR_FOLLOWER.code,
    error_codes.UNKNOWN_TOPIC_OR_PARTITION.code,
    error_codes.LEADER_NOT_AVAILABLE.code,
    error_codes.FENCED_LEADER_EPOCH.code,
    error_codes.UNKNOWN_LEADER_EPOCH.code,
    error_codes.KAFKA_STORAGE_ERROR.code,
    error_codes.NETWORK_EXCEPTION.code,
}


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    """0: CreateTime, 1: LogAppendTime."""
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class FetchedPartition:
    tp: TopicPartition
    fetch_offset: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    batches: list[memoryview] = field(default_factory=list)
    next_offset: int = -1
    records: list[ConsumerRecord] | None = None
    """Decoded and not yet handed out (set once records are asked for)."""


def data_batches(
    raw: memoryview, aborted: Sequence[tuple[int, int]] | None, *, check_crcs: bool = True
) -> tuple[list[memoryview], int]:
    """The data batches of a fetched record set and the offset after its last whole batch
    (-1 if it holds none). `aborted` lists (producer id, first offset) of aborted transactions
    to skip (read_committed); None keeps every data batch."""
    if len(raw) >= LOG_OVERHEAD and peek_magic(raw) < 2:
        raw = memoryview(convert.legacy_to_v2(raw))
    pending = sorted(aborted or (), key=lambda a: a[1])
    aborting: set[int] = set()
    out: list[memoryview] = []
    pos, next_offset = 0, -1
    while len(raw) - pos >= LOG_OVERHEAD:
        try:
            header = read_batch_header(raw, pos)
        except ProtocolError:
            break  # a partial header at the end
        end = pos + header.size
        if end > len(raw):
            break
        if check_crcs:
            verify_crc(raw, pos, header)
        batch = raw[pos:end]
        pos, next_offset = end, header.next_offset
        while pending and pending[0][1] <= header.last_offset:
            aborting.add(pending.pop(0)[0])
        if header.is_control:
            if header.producer_id in aborting:
                records = decode_v2_records(header, batch[BATCH_HEADER_SIZE:])
                if records and control_record_type(records[0]) == CONTROL_ABORT:
                    aborting.discard(header.producer_id)
            continue
        if aborted is not None and header.is_transactional and header.producer_id in aborting:
            continue
        if header.records_count:
            out.append(batch)
    return out, next_offset


class UnreadableBatchError(CorruptRecordError):
    """A fetched batch's records cannot be read; `records_before` are those of the batches
    before it, `offset` the first offset it would have held (where the consumer stops)."""

    def __init__(self, message: str, records_before: list[ConsumerRecord], offset: int) -> None:
        super().__init__(message)
        self.records_before = records_before
        self.offset = offset


def decode_records(
    tp: TopicPartition, batches: Sequence[memoryview], min_offset: int
) -> list[ConsumerRecord]:
    """The records of `batches` at or after `min_offset`, through the compiled record walk
    (`records.walk`); `UnreadableBatchError` names the first batch that cannot be read."""
    topic, partition = tp
    out: list[ConsumerRecord] = []
    for batch in batches:
        header = read_batch_header(batch)
        if header.next_offset <= min_offset:
            continue
        body = batch[BATCH_HEADER_SIZE:]
        mark = len(out)
        try:
            if header.compression != compression.NONE:
                body = memoryview(compression.decompress(header.compression, body))
            append_time = header.max_timestamp if header.timestamp_type else -1
            walk.decode(
                out,
                body,
                header.records_count,
                header.base_offset,
                header.base_timestamp,
                append_time,
                min_offset,
                topic,
                partition,
                header.timestamp_type,
                ConsumerRecord,
            )
        except CorruptRecordError as e:
            del out[mark:]  # what the walk decoded of this batch before it failed
            raise UnreadableBatchError(
                f"record batch at offsets {header.base_offset}..{header.last_offset} of "
                f"{topic}-{partition} cannot be read ({e})",
                out,
                max(header.base_offset, min_offset),
            ) from e
    return out


async def fetch_from(
    cluster: Cluster, node: int, positions: dict[TopicPartition, int], config: ConsumerConfig
) -> list[FetchedPartition]:
    """One Fetch to `node` for `positions`; ConnectionError if the broker cannot be reached."""
    topics: dict[str, list[FetchRequest.FetchPartition]] = {}
    for (topic, partition), offset in positions.items():
        topics.setdefault(topic, []).append(
            FetchRequest.FetchPartition(
                partition=partition,
                fetch_offset=offset,
                current_leader_epoch=-1,
                partition_max_bytes=config.max_partition_fetch_bytes,
            )
        )
    read_committed = config.isolation_level == "read_committed"
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=config.fetch_max_wait_ms,
        min_bytes=config.fetch_min_bytes,
        max_bytes=config.fetch_max_bytes,
        isolation_level=READ_COMMITTED if read_committed else 0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
        rack_id="",
    )
    conn = await cluster.connection(node)
    version = min(conn.version_for(FetchRequest), MAX_FETCH_VERSION)
    response = await cluster.send(node, request, version)
    assert isinstance(response, FetchResponse)
    if response.error_code:
        return [
            FetchedPartition(tp, offset, response.error_code) for tp, offset in positions.items()
        ]
    out = []
    for t in response.responses:
        for p in t.partitions:
            tp = (t.topic, p.partition_index)
            if tp not in positions:
                continue
            fetched = FetchedPartition(
                tp, positions[tp], p.error_code, p.high_watermark, p.last_stable_offset
            )
            raw = p.records
            if p.error_code == 0 and isinstance(raw, bytes | bytearray | memoryview):
                aborted = None
                if read_committed:
                    aborted = [
                        (a.producer_id, a.first_offset) for a in p.aborted_transactions or ()
                    ]
                try:
                    fetched.batches, fetched.next_offset = data_batches(
                        memoryview(raw), aborted, check_crcs=config.check_crcs
                    )
                except CorruptRecordError:
                    fetched.error_code = 2  # CORRUPT_MESSAGE: the consumer raises it
            out.append(fetched)
    return out
