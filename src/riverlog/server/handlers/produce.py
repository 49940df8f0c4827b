"""Produce: validate and append each partition's record set; acks 0, 1 and all.

Each partition succeeds or fails on its own (Kafka semantics); a partition's record set is
appended whole or not at all. With acks=0 nothing is answered, and a failure closes the
connection so the client notices and refreshes its metadata, as Kafka does. On one broker,
acks=all is satisfied by the local append (the ISR is the leader alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.messages import ProduceRequest, ProduceResponse
from riverlog.protocol.records.batch_header import MAGIC_POSITION, peek_magic
from riverlog.protocol.records.convert import legacy_to_v2
from riverlog.server.dispatch import RequestContext

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

PartitionResponse = ProduceResponse.PartitionProduceResponse


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
        error_message=error.message if version >= 8 else None,
    )


def handle_produce(broker: Broker, ctx: RequestContext) -> ProduceResponse | None:
    request = ctx.request.body
    assert isinstance(request, ProduceRequest)
    version = ctx.version
    bad_acks = request.acks not in (-1, 0, 1)
    any_error = False
    topics: list[ProduceResponse.TopicProduceResponse] = []
    for topic in request.topic_data:
        partitions: list[PartitionResponse] = []
        for data in topic.partition_data:
            try:
                if bad_acks:
                    raise KafkaError(error_codes.INVALID_REQUIRED_ACKS)
                if request.transactional_id is not None:
                    raise KafkaError(
                        error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "Transactions are not supported by this broker yet.",
                    )
                if not isinstance(data.records, bytes | bytearray | memoryview):
                    raise KafkaError(error_codes.CORRUPT_MESSAGE, "The record set is null.")
                records = _up_convert(memoryview(data.records))
                result = broker.replicas.append(topic.name, data.index, records)
            except KafkaError as e:
                any_error = True
                partitions.append(_failed(data.index, e, version))
                continue
            partitions.append(
                PartitionResponse(
                    index=data.index,
                    error_code=0,
                    base_offset=result.first_offset,
                    log_append_time_ms=result.log_append_time_ms,
                    log_start_offset=result.log_start_offset,
                )
            )
        topics.append(
            ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions)
        )
    if request.acks == 0:
        if any_error and ctx.connection is not None:
            ctx.connection.close()
        return None
    return ProduceResponse(responses=topics)
