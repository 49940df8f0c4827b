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
Which replica answers, fencing by leader epoch, how far each reader may read and
replication throttles are the replica manager's (`fetch_target`, `fetchable_bytes`,
`read_for_fetch`); a follower's fetch offsets go to it as its progress (`follower_fetched`).
This handler owns fetch sessions, limits across partitions and response formats.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, cast

from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.exceptions import ProtocolError, UnsupportedCompressionError
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
from riverlog.server.replication.partition import HostedPartition
from riverlog.storage.log import PartitionLog

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from riverlog.server.broker import Broker

TOPIC_IDS_FROM = 13
V2_RECORDS_FROM = 4  # Fetch v0-1 read magic 0, v2-3 magic 1
ZSTD_FROM = 10  # KIP-110: older fetchers cannot read zstd batches
RACK_AWARE_FROM = 11  # KIP-392: consumers say their rack and may read from followers


def _holds_zstd(region: FileRegion) -> bool:
    """Whether a region holds a zstd batch: batch headers only, for pre-v10 fetchers."""
    position, end = region.offset, region.offset + region.length
    while end - position >= BATCH_HEADER_SIZE:
        raw = os.pread(region.fileno, BATCH_HEADER_SIZE, position)
        try:
            header = read_batch_header(raw, 0, whole=False)
        except ProtocolError:  # corrupted on disk: down-conversion skips what follows
            return False
        if header.compression == compression.ZSTD:
            return True
        position += header.size
    return False


def _down_convert(region: FileRegion, version: int) -> bytes:
    """Old clients cannot take v2 batches: read the region and convert (a copy, unavoidably)."""
    data = os.pread(region.fileno, region.length, region.offset)
    return v2_to_legacy(data, 0 if version <= 1 else 1)


READ_COMMITTED = 1


def _aborted(log: PartitionLog, start: int, end: int) -> list[FetchResponse.AbortedTransaction]:
    """The aborted transactions a READ_COMMITTED consumer must drop in [start, end)."""
    return [
        FetchResponse.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
        for a in log.aborted_transactions(start, end)
    ]


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
        self.client_rack = request.rack_id if version >= RACK_AWARE_FROM else None
        """A consumer's `client.rack` (KIP-392); None before Fetch v11."""
        self.rack_aware = self.client_rack is not None and replica_id < 0
        """A consumer's fetch (v11+) that followers may serve and that may be told of a
        preferred replica; never a follower's (checked once here, not per partition read:
        issue 29)."""
        self.read_committed = (
            version >= 4 and request.isolation_level == READ_COMMITTED and replica_id < 0
        )
        """Reads stop at the last stable offset and name the aborted transactions."""

    def _target(self, key: Hashable, fetch: PartitionFetch) -> HostedPartition | int:
        """The replica to read, or why not: an error code."""
        target = self.broker.replicas.fetch_target(
            cast(TopicPartition, key),
            fetch.current_leader_epoch,
            self.replica_id,
            followers_serve=self.rack_aware,
        )
        return target if isinstance(target, HostedPartition) else target.code

    def _preferred_replica(self, hosted: HostedPartition, fetch: PartitionFetch) -> int:
        """KIP-392: another replica this consumer should read from, or -1 (callers ask
        only when `rack_aware`)."""
        if self.client_rack is None or self.replica_id >= 0:
            return -1
        return self.broker.replicas.fetch_reader.preferred_read_replica(
            hosted, fetch.fetch_offset, self.client_rack
        )

    def available(self) -> int:
        """Bytes available to this fetch now, capped at min_bytes (cheap: offsets first)."""
        total = 0
        min_bytes = self.request.min_bytes
        for key, fetch in self.ctx.partitions.items():
            hosted = self._target(key, fetch)
            if not isinstance(hosted, HostedPartition) or (
                self.rack_aware and self._preferred_replica(hosted, fetch) >= 0
            ):
                return min_bytes  # an error or another replica to name: answer now
            total += self.broker.replicas.fetch_reader.fetchable_bytes(
                hosted,
                fetch.fetch_offset,
                fetch.max_bytes,
                self.replica_id,
                min_bytes,
                read_committed=self.read_committed,
            )
            if total >= min_bytes:
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
            target = error or self._target(key, fetch)
            hosted = target if isinstance(target, HostedPartition) else None
            if hosted is None:
                error = cast(int, target)
            elif self.rack_aware and (preferred := self._preferred_replica(hosted, fetch)) >= 0:
                data.preferred_read_replica = preferred  # no data: read it there
                log = hosted.log
                data.high_watermark = log.high_watermark
                data.last_stable_offset = log.last_stable_offset
                data.log_start_offset = log.log_start_offset
            else:
                log = hosted.log
                try:
                    region = self.broker.replicas.fetch_reader.read_for_fetch(
                        hosted,
                        fetch.fetch_offset,
                        min(fetch.max_bytes, remaining),
                        self.replica_id,
                        min_one_batch=first_data,
                        read_committed=self.read_committed,
                    )
                except KafkaError as e:
                    error = e.code
                else:
                    if region is not None:
                        remaining -= region.length
                        first_data = False
                        if self.version < V2_RECORDS_FROM:
                            try:
                                data.records = _down_convert(region, self.version)
                            except UnsupportedCompressionError:
                                error = error_codes.UNSUPPORTED_COMPRESSION_TYPE.code
                        elif self.version < ZSTD_FROM and _holds_zstd(region):
                            error = error_codes.UNSUPPORTED_COMPRESSION_TYPE.code
                        else:
                            data.records = region
                        if self.read_committed:
                            limit = self.broker.replicas.fetch_reader.fetch_limit(
                                hosted, self.replica_id, read_committed=True
                            )
                            data.aborted_transactions = _aborted(log, fetch.fetch_offset, limit)
                data.high_watermark = log.high_watermark
                data.last_stable_offset = log.last_stable_offset
                data.log_start_offset = log.log_start_offset
            data.error_code = error
            if self.ctx.session is not None:  # an incremental session lists what changed
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


def handle_fetch(broker: Broker, ctx: RequestContext) -> Response | Awaitable[Response]:
    request = ctx.request.body
    assert isinstance(request, FetchRequest)
    version = ctx.version
    wanted, forgotten, unknown = _requested(broker, request, version)
    now_ms = int(broker.clock.monotonic_s() * 1000)
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
        broker.replicas.follower_fetched(
            replica_id,
            ((cast(TopicPartition, key), f.fetch_offset) for key, f in session.partitions.items()),
        )
    fetch = _Fetch(broker, request, version, session, unknown, replica_id)
    if request.max_wait_ms <= 0 or request.min_bytes <= 0 or unknown:
        return fetch.respond()

    def try_complete() -> FetchResponse | None:
        return fetch.respond() if fetch.available() >= request.min_bytes else None

    # Answered now if enough is there, else parked until an append or the wait's end.
    return broker.replicas.fetch_purgatory.delay(
        list(session.partitions), request.max_wait_ms / 1000, try_complete, fetch.respond
    )
