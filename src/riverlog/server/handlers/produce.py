"""Produce: validate and append each partition's record set; acks 0, 1 and all.

Each partition succeeds or fails on its own (Kafka semantics); a partition's record set is
appended whole or not at all. Internal topics (`__consumer_offsets`,
`__transaction_state`) refuse client appends with INVALID_TOPIC_EXCEPTION, as Kafka does.
With acks=0 nothing is answered, and a failure closes the connection so the client notices
and refreshes its metadata, as Kafka does.

The rules — leadership, `min.insync.replicas`, internal topics, and when an acks=all write
is in the ISR — are the replica manager's (`ReplicaManager.append` and
`await_replication`): this handler maps partitions to appends and outcomes to answers.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.messages import ProduceRequest, ProduceResponse
from riverlog.protocol.records import compression
from riverlog.protocol.records.batch_header import MAGIC_POSITION, peek_magic, read_batch_header
from riverlog.protocol.records.convert import legacy_to_v2
from riverlog.server.dispatch import RequestContext
from riverlog.server.replication.partition import HostedPartition

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from riverlog.server.broker import Broker

PartitionResponse = ProduceResponse.PartitionProduceResponse


V2_ONLY_FROM = 3  # Produce v3+: exactly one magic-2 batch per partition
ZSTD_FROM = 7  # KIP-110


def _record_set(records: memoryview, version: int) -> memoryview:
    """A partition's record set as the request version allows it (Kafka's
    `ProduceRequest.validateRecords`): from v3 exactly one batch of magic 2, zstd only from
    v7; before v3, message sets of pre-0.11 clients (magic 0/1) become v2 batches."""
    if version < V2_ONLY_FROM:
        return _up_convert(records)
    prefix = f"Produce requests with version {version}"
    if len(records) <= MAGIC_POSITION:
        raise KafkaError(
            error_codes.INVALID_RECORD,
            f"{prefix} must have at least one record batch per partition",
        )
    if peek_magic(records) != 2:
        raise KafkaError(
            error_codes.INVALID_RECORD,
            f"{prefix} are only allowed to contain record batches with magic version 2",
        )
    try:
        header = read_batch_header(records, 0, whole=False)
    except ProtocolError as e:
        raise KafkaError(error_codes.CORRUPT_MESSAGE, f"Bad record batch: {e}") from e
    if version < ZSTD_FROM and header.compression == compression.ZSTD:
        raise KafkaError(
            error_codes.UNSUPPORTED_COMPRESSION_TYPE,
            f"{prefix} are not allowed to use ZStandard compression",
        )
    if header.size != len(records):
        raise KafkaError(
            error_codes.INVALID_RECORD,
            f"{prefix} are only allowed to contain exactly one record batch per partition",
        )
    return records


def _up_convert(records: memoryview) -> memoryview:
    """Message sets of pre-0.11 clients (magic 0/1) become v2 batches before validation."""
    if len(records) > MAGIC_POSITION and peek_magic(records) < 2:
        try:
            return memoryview(legacy_to_v2(records))
        except ProtocolError as e:
            raise KafkaError(error_codes.CORRUPT_MESSAGE, f"Bad legacy message set: {e}") from e
    return records


def _failed(index: int, error: KafkaError, version: int) -> PartitionResponse:
    return PartitionResponse(
        index=index,
        error_code=error.code,
        base_offset=-1,
        record_errors=[
            ProduceResponse.BatchIndexAndErrorMessage(
                batch_index=i, batch_index_error_message=message
            )
            for i, message in error.record_errors
        ]
        if version >= 8
        else [],
        error_message=error.message if version >= 8 else None,
    )


def handle_produce(
    broker: Broker, ctx: RequestContext
) -> ProduceResponse | Awaitable[ProduceResponse] | None:
    request = ctx.request.body
    assert isinstance(request, ProduceRequest)
    version = ctx.version
    bad_acks = request.acks not in (-1, 0, 1)
    all_acks = request.acks == -1
    waiting: list[PartitionResponse] = []
    writes: list[tuple[HostedPartition, int]] = []
    any_error = False
    topics: list[ProduceResponse.TopicProduceResponse] = []
    for topic in request.topic_data:
        partitions: list[PartitionResponse] = []
        for data in topic.partition_data:
            try:
                if bad_acks:
                    raise KafkaError(error_codes.INVALID_REQUIRED_ACKS)
                if not isinstance(data.records, bytes | bytearray | memoryview):
                    raise KafkaError(error_codes.CORRUPT_MESSAGE, "The record set is null.")
                broker.replicas.get(topic.name, data.index)  # unknown partitions first, as Kafka
                records = _record_set(memoryview(data.records), version)
                hosted, result = broker.replicas.append(
                    topic.name, data.index, records, acks=request.acks
                )
            except KafkaError as e:
                any_error = True
                partitions.append(_failed(data.index, e, version))
                continue
            answer = PartitionResponse(
                index=data.index,
                error_code=0,
                base_offset=result.first_offset,
                log_append_time_ms=result.log_append_time_ms,
                log_start_offset=result.log_start_offset,
            )
            partitions.append(answer)
            if all_acks:
                waiting.append(answer)
                writes.append((hosted, result.last_offset + 1))
        topics.append(
            ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions)
        )
    if request.acks == 0:
        if any_error and ctx.connection is not None:
            ctx.connection.close()
        return None
    response = ProduceResponse(responses=topics)
    if not writes:
        return response
    codes = broker.replicas.await_replication(writes, request.timeout_ms)
    if isinstance(codes, list):
        return _answered(response, waiting, codes)
    return _answer_later(response, waiting, codes)


def _answered(
    response: ProduceResponse, waiting: list[PartitionResponse], codes: list[ErrorCode]
) -> ProduceResponse:
    for answer, code in zip(waiting, codes, strict=True):
        answer.error_code = code.code
    return response


def _answer_later(
    response: ProduceResponse,
    waiting: list[PartitionResponse],
    codes: asyncio.Future[list[ErrorCode]],
) -> asyncio.Future[ProduceResponse]:
    """acks=all: answer once the replica manager settled every write (by a callback of
    `codes`, not a task: issue 29). A client gone meanwhile cancels the answer; the wait
    itself ends as it would have (Kafka's DelayedProduce: completed or timed out)."""
    answer: asyncio.Future[ProduceResponse] = asyncio.get_running_loop().create_future()

    def settled(done: asyncio.Future[list[ErrorCode]]) -> None:
        if answer.done():
            return
        if done.cancelled():
            answer.cancel()
        elif (error := done.exception()) is not None:
            answer.set_exception(error)
        else:
            answer.set_result(_answered(response, waiting, done.result()))

    codes.add_done_callback(settled)
    return answer
