"""Fetch: record data straight from segment files, with long polls and fetch sessions.

How it works. The request's partitions (or, in an incremental fetch session, the session's
partitions) are read from their logs up to the high watermark, bounded per partition
(`partition_max_bytes`) and in total (`max_bytes`); the first partition with data always gets
at least one whole batch (KIP-74). Record data is a `FileRegion` the network layer sends with
`sendfile`. If fewer than `min_bytes` are available the request waits in the fetch purgatory,
watching its partitions: an append to any of them completes it at once; otherwise it answers
with what there is after `max_wait_ms`.

READ_COMMITTED consumers (v4+) read up to the last stable offset instead, and get the
aborted transactions within what they read (`aborted_transactions`) so they can drop those
producers' records (`_transactional` below).

Topics are named by name up to v12 and by id from v13; an unknown id is UNKNOWN_TOPIC_ID.
Only the leader answers, except to the debugging consumer (replica id -2), which any replica
answers from its own log up to its own high watermark.
Followers catching up on throttled partitions get data only while the broker's leader
replication quota allows (`server/replication_quota.py`).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, cast

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.exceptions import UnsupportedCompressionError
from riverlog.protocol.messages import FetchRequest, FetchResponse
from riverlog.protocol.primitives import FileRegion
from riverlog.protocol.records import compression
from riverlog.protocol.records.batch_header import BATCH_HEADER_SIZE, read_batch_header
from riverlog.protocol.records.convert import v2_to_legacy
from riverlog.server.dispatch import RequestContext, Response
from riverlog.server.fetch_session import (
    FetchContext,
    FetchSessionError,
    PartitionFetch,
    PartitionState,
)
from riverlog.server.partition import HostedPartition
from riverlog.server.replication_quota import throttled
from riverlog.storage.log import PartitionLog

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from riverlog.server.broker import Broker

TOPIC_IDS_FROM = 13
V2_RECORDS_FROM = 4  # Fetch v0-1 read magic 0, v2-3 magic 1
ZSTD_FROM = 10  # KIP-110: older fetchers cannot read zstd batches
DEBUGGING_CONSUMER_ID = -2
"""Kafka's `Request.DebuggingConsumerId` (the replica verification tool): a consumer that
may read from any replica, follower or leader, up to that replica's high watermark."""


def _holds_zstd(region: FileRegion) -> bool:
    """Whether a region holds a zstd batch: batch headers only, for pre-v10 fetchers."""
    position, end = region.offset, region.offset + region.length
    while end - position >= BATCH_HEADER_SIZE:
        raw = os.pread(region.fileno, BATCH_HEADER_SIZE, position)
        header = read_batch_header(raw, 0, whole=False)
        if header.compression == compression.ZSTD:
            return True
        position += header.size
    return False


def _down_convert(region: FileRegion, version: int) -> bytes:
    """Old clients cannot take v2 batches: read the region and convert (a copy, unavoidably)."""
    data = os.pread(region.fileno, region.length, region.offset)
    return v2_to_legacy(data, 0 if version <= 1 else 1)

TopicPartition = tuple[str, int]
READ_COMMITTED = 1


def _transactional(
    log: PartitionLog, start: int, end: int
) -> list[FetchResponse.AbortedTransaction]:
    """The aborted transactions a READ_COMMITTED consumer must drop in [start, end)."""
    return [FetchResponse.AbortedTransaction(producer_id=a.producer_id,
                                             first_offset=a.first_offset)
            for a in log.aborted_transactions(start, end)]  # fmt: skip


def _requested(
    broker: Broker, request: FetchRequest, version: int
) -> tuple[OrderedDict[Hashable, PartitionFetch], list[Hashable], dict[Hashable, int]]:
    """Partitions asked for (key = (topic name or id, partition)), forgotten ones, and errors
    for topic ids that name nothing."""
    wanted: OrderedDict[Hashable, PartitionFetch] = OrderedDict()
    unknown: dict[Hashable, int] = {}
    for topic in request.topics:
        name = topic.topic
        if version >= TOPIC_IDS_FROM:
            known = broker.topics.by_id(topic.topic_id)
            name = known.name if known is not None else str(topic.topic_id)
            if known is None:
                for p in topic.partitions:
                    unknown[(name, p.partition)] = error_codes.UNKNOWN_TOPIC_ID.code
        for p in topic.partitions:
            wanted[(name, p.partition)] = PartitionFetch(
                fetch_offset=p.fetch_offset,
                max_bytes=p.partition_max_bytes,
                current_leader_epoch=p.current_leader_epoch,
                last_fetched_epoch=p.last_fetched_epoch,
                log_start_offset=p.log_start_offset,
            )
    forgotten: list[Hashable] = []
    for gone in request.forgotten_topics_data or ():
        name = gone.topic
        if version >= TOPIC_IDS_FROM:
            known = broker.topics.by_id(gone.topic_id)
            name = known.name if known is not None else str(gone.topic_id)
        forgotten += [(name, p) for p in gone.partitions]
    return wanted, forgotten, unknown


class _Fetch:
    """One fetch request's reading: `available` for the purgatory, `respond` to answer."""

    def __init__(
        self,
        broker: Broker,
        request: FetchRequest,
        version: int,
        ctx: FetchContext,
        unknown: dict[Hashable, int],
        replica_id: int,
    ) -> None:
        self.broker = broker
        self.request = request
        self.version = version
        self.ctx = ctx
        self.unknown = unknown
        self.replica_id = replica_id
        """The fetching follower's broker id; -1 for consumers, -2 for the debugging
        consumer."""
        self.read_committed = (
            version >= 4 and request.isolation_level == READ_COMMITTED and replica_id < 0
        )

    def _readable(self, key: Hashable, fetch: PartitionFetch) -> HostedPartition | int:
        """The partition to read, or why not: an error code."""
        topic, index = cast(TopicPartition, key)
        hosted = self.broker.replicas.partitions.get((topic, index))
        if hosted is None:
            return error_codes.UNKNOWN_TOPIC_OR_PARTITION.code
        if hosted.leader_id != self.broker.broker_id and self.replica_id != DEBUGGING_CONSUMER_ID:
            return error_codes.NOT_LEADER_OR_FOLLOWER.code
        wanted = fetch.current_leader_epoch
        if wanted >= 0 and wanted != hosted.leader_epoch:
            return (error_codes.FENCED_LEADER_EPOCH if wanted < hosted.leader_epoch
                    else error_codes.UNKNOWN_LEADER_EPOCH).code  # fmt: skip
        return hosted

    def _throttled(self, hosted: HostedPartition) -> bool:
        """A follower catching up on a partition throttled on this leader
        (`server/replication_quota.py`)."""
        return (
            self.replica_id >= 0
            and self.broker.leader_quota.limited
            and self.replica_id not in hosted.isr
            and throttled(hosted.log.config.leader_replication_throttled_replicas,
                          hosted.index, self.broker.broker_id)
        )  # fmt: skip

    def _held(self, hosted: HostedPartition) -> bool:
        """Throttled while the leader's replication quota is used up: no data this time."""
        return self._throttled(hosted) and self.broker.leader_quota.exceeded(time.monotonic())

    def limit(self, hosted: HostedPartition) -> int:
        """Followers read up to the log end, consumers up to the (local) high watermark,
        READ_COMMITTED consumers up to the last stable offset."""
        plog = hosted.log
        if self.replica_id >= 0:
            return plog.log_end_offset
        return plog.last_stable_offset if self.read_committed else plog.high_watermark

    def available(self) -> int:
        """Bytes available to this fetch now, capped at min_bytes (cheap: offsets only)."""
        total = 0
        for key, fetch in self.ctx.partitions.items():
            hosted = self._readable(key, fetch)
            if not isinstance(hosted, HostedPartition):
                return self.request.min_bytes  # an error to report: answer now
            log = hosted.log
            if fetch.fetch_offset > log.log_end_offset or fetch.fetch_offset < log.log_start_offset:
                return self.request.min_bytes
            limit = self.limit(hosted)
            if limit > fetch.fetch_offset and not self._held(hosted):
                if self.replica_id >= 0 and self.request.min_bytes <= 1:
                    # A follower reads up to the log end, where the last batch ends: with
                    # its offset below that there is a batch to send (`respond` reads it).
                    return self.request.min_bytes
                read = log.read(fetch.fetch_offset, fetch.max_bytes, max_offset=limit)
                total += read.records.length if read.records is not None else 0
                if total >= self.request.min_bytes:
                    break
        return total

    def respond(self) -> FetchResponse:
        remaining = self.request.max_bytes if self.version >= 3 else 2**31 - 1
        first_data = True
        topics: OrderedDict[str, FetchResponse.FetchableTopicResponse] = OrderedDict()
        for key, fetch in self.ctx.partitions.items():
            topic, index = cast(TopicPartition, key)
            # Empty, never null: Kafka always sends a record set and kafka-python relies on it.
            data = FetchResponse.PartitionData(
                records=b"",
                partition_index=index,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
            )
            error = self.unknown.get(key, 0)
            readable = error or self._readable(key, fetch)
            hosted = readable if isinstance(readable, HostedPartition) else None
            if hosted is None:
                error = cast(int, readable)
            else:
                log = hosted.log
                try:
                    read = None if self._held(hosted) else log.read(
                        fetch.fetch_offset,
                        min(fetch.max_bytes, remaining),
                        max_offset=self.limit(hosted),
                        min_one_batch=first_data,
                    )
                except KafkaError as e:
                    error = e.code
                else:
                    if read is not None and read.records is not None:
                        if self._throttled(hosted):
                            self.broker.leader_quota.record(read.records.length,
                                                            time.monotonic())  # fmt: skip
                        remaining -= read.records.length
                        first_data = False
                        if self.version < V2_RECORDS_FROM:
                            try:
                                data.records = _down_convert(read.records, self.version)
                            except UnsupportedCompressionError:
                                error = error_codes.UNSUPPORTED_COMPRESSION_TYPE.code
                        elif self.version < ZSTD_FROM and _holds_zstd(read.records):
                            error = error_codes.UNSUPPORTED_COMPRESSION_TYPE.code
                        else:
                            data.records = read.records
                        if self.read_committed:
                            data.aborted_transactions = _transactional(
                                log, fetch.fetch_offset, self.limit(hosted))
                data.high_watermark = log.high_watermark
                data.last_stable_offset = log.last_stable_offset
                data.log_start_offset = log.log_start_offset
            data.error_code = error
            state = PartitionState(
                data.high_watermark, data.last_stable_offset, data.log_start_offset
            )
            if not self.ctx.include(key, state, bool(data.records), error):
                continue
            entry = topics.get(topic)
            if entry is None:
                entry = FetchResponse.FetchableTopicResponse(topic=topic, partitions=[])
                known = self.broker.topics.get(topic)
                if known is not None:
                    entry.topic_id = known.topic_id
                topics[topic] = entry
            entry.partitions.append(data)
        return FetchResponse(session_id=self.ctx.session_id, responses=list(topics.values()))


def _follower_fetched(broker: Broker, replica_id: int, session: FetchContext) -> None:
    """A follower's fetch offsets are its log end offsets: the leader's view of its progress."""
    for key, fetch in session.partitions.items():
        hosted = broker.replicas.partitions.get(cast(TopicPartition, key))
        if hosted is not None and hosted.leader_id == broker.broker_id:
            broker.replicas.follower_fetched(hosted, replica_id, fetch.fetch_offset)


def handle_fetch(broker: Broker, ctx: RequestContext) -> Response | Awaitable[Response]:
    request = ctx.request.body
    assert isinstance(request, FetchRequest)
    version = ctx.version
    wanted, forgotten, unknown = _requested(broker, request, version)
    now_ms = int(time.monotonic() * 1000)
    try:
        if version >= 7:
            session = broker.fetch_sessions.open(
                request.session_id, request.session_epoch, wanted, forgotten, now_ms
            )
        else:
            session = FetchContext(0, wanted)
    except FetchSessionError as e:
        return FetchResponse(error_code=e.error_code, session_id=0, responses=[])
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    if replica_id >= 0:
        _follower_fetched(broker, replica_id, session)
    fetch = _Fetch(broker, request, version, session, unknown, replica_id)
    if request.max_wait_ms <= 0 or request.min_bytes <= 0 or unknown:
        return fetch.respond()
    if fetch.available() >= request.min_bytes:
        return fetch.respond()
    keys: list[Hashable] = [k for k in session.partitions]

    def try_complete() -> FetchResponse | None:
        return fetch.respond() if fetch.available() >= request.min_bytes else None

    return broker.fetch_purgatory.delay(
        keys, request.max_wait_ms / 1000, try_complete, fetch.respond
    )
