"""Offset queries and moves: ListOffsets, OffsetForLeaderEpoch, DeleteRecords (an offset
below -1, or above the high watermark, answers OFFSET_OUT_OF_RANGE).

ListOffsets answers earliest (-2), latest (-1), max timestamp (-3), earliest local (-4: the
earliest, riverlog has no tiered storage), latest tiered (-5: -1, nothing is tiered) and by
timestamp (first record at or after it, or -1 when none); v0 answers in its old list form.
Consumers (replica id -1) see offsets only up to the high watermark — with READ_COMMITTED
(v2+) up to the last stable offset. A new leader learns the high
watermark from its followers' first fetches; until it reaches the start of the leader's epoch,
consumers asking v2+ for the latest offset, or for a timestamp not found below it, get the
retriable OFFSET_NOT_AVAILABLE (as Kafka answers), never an end offset that went backwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from riverlog.server.dispatch import RequestContext

READ_COMMITTED = 1

if TYPE_CHECKING:
    from riverlog.server.broker import Broker
    from riverlog.server.replication.partition import HostedPartition

PartitionAnswer = ListOffsetsResponse.ListOffsetsPartitionResponse
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def _list_one(
    broker: Broker,
    topic: str,
    p: ListOffsetsRequest.ListOffsetsPartition,
    version: int,
    consumer: bool,
    read_committed: bool = False,
) -> PartitionAnswer:
    try:
        hosted = broker.replicas.leader(topic, p.partition_index)
    except KafkaError as e:
        return PartitionAnswer(
            partition_index=p.partition_index, timestamp=-1, offset=-1, error_code=e.code
        )
    return offsets_answer(hosted, p, version, consumer, read_committed=read_committed)


def offsets_answer(
    hosted: HostedPartition,
    p: ListOffsetsRequest.ListOffsetsPartition,
    version: int,
    consumer: bool,
    *,
    read_committed: bool = False,
) -> PartitionAnswer:
    """The answer of the leader replica `hosted` to one partition of a ListOffsets request
    (`consumer`: asked by a consumer, not a replica; `read_committed`: its isolation level
    is READ_COMMITTED, so nothing past the last stable offset is visible)."""
    answer = PartitionAnswer(partition_index=p.partition_index, timestamp=-1, offset=-1)
    log = hosted.log
    visible = log.last_stable_offset if read_committed else log.high_watermark
    lagging = consumer and version >= 2 and hosted.leader_epoch_start > log.high_watermark
    found: tuple[int, int] | None
    if p.timestamp == LATEST_TIMESTAMP:
        found = (visible if consumer else log.log_end_offset, -1)
    elif p.timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        found = (log.log_start_offset, -1)  # no tiered storage: every record is local
        lagging = False
    elif p.timestamp == LATEST_TIERED_TIMESTAMP:
        found, lagging = (-1, -1), False  # no tiered storage: nothing is tiered
    else:
        found = log.offset_for_timestamp(p.timestamp)
        if found is not None and consumer and found[0] >= visible:
            found = None
        lagging = lagging and found is None
    if lagging:
        answer.error_code = error_codes.OFFSET_NOT_AVAILABLE.code
        return answer
    if version == 0:
        answer.old_style_offsets = [] if found is None else [found[0]][: max(p.max_num_offsets, 0)]
        return answer
    if found is not None:
        answer.offset, answer.timestamp = found
        answer.leader_epoch = hosted.leader_epoch
    return answer


def handle_list_offsets(broker: Broker, ctx: RequestContext) -> ListOffsetsResponse:
    request = ctx.request.body
    assert isinstance(request, ListOffsetsRequest)
    consumer = request.replica_id < 0
    read_committed = ctx.version >= 2 and request.isolation_level == READ_COMMITTED
    return ListOffsetsResponse(
        topics=[
            ListOffsetsResponse.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    _list_one(broker, t.name, p, ctx.version, consumer, read_committed)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def handle_offset_for_leader_epoch(
    broker: Broker, ctx: RequestContext
) -> OffsetForLeaderEpochResponse:
    request = ctx.request.body
    assert isinstance(request, OffsetForLeaderEpochRequest)
    results = []
    for topic in request.topics:
        answers = []
        for p in topic.partitions:
            answer = OffsetForLeaderEpochResponse.EpochEndOffset(
                partition=p.partition, leader_epoch=-1, end_offset=-1
            )
            try:
                log = broker.replicas.leader(topic.topic, p.partition).log
                answer.leader_epoch, answer.end_offset = log.epochs.end_offset_for(
                    p.leader_epoch, log.log_end_offset
                )
            except KafkaError as e:
                answer.error_code = e.code
            answers.append(answer)
        results.append(
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
                topic=topic.topic, partitions=answers
            )
        )
    return OffsetForLeaderEpochResponse(topics=results)


def handle_delete_records(broker: Broker, ctx: RequestContext) -> DeleteRecordsResponse:
    request = ctx.request.body
    assert isinstance(request, DeleteRecordsRequest)
    results = []
    for topic in request.topics:
        answers = []
        for p in topic.partitions:
            answer = DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1
            )
            try:
                log = broker.replicas.leader(topic.name, p.partition_index).log
                if p.offset < -1:  # -1 means "up to the high watermark"; below is no offset
                    raise KafkaError(
                        error_codes.OFFSET_OUT_OF_RANGE, f"No offset {p.offset} to delete before."
                    )
                offset = log.high_watermark if p.offset == -1 else p.offset
                answer.low_watermark = log.delete_records_before(offset)
            except KafkaError as e:
                answer.error_code = e.code
            answers.append(answer)
        results.append(
            DeleteRecordsResponse.DeleteRecordsTopicResult(name=topic.name, partitions=answers)
        )
    return DeleteRecordsResponse(topics=results)
