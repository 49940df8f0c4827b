"""Produce: validate and append each partition's record set; acks 0, 1 and all.

Each partition succeeds or fails on its own (Kafka semantics); a partition's record set is
appended whole or not at all. Internal topics (`__consumer_offsets`,
`__transaction_state`) refuse client appends with INVALID_TOPIC_EXCEPTION, as Kafka does.
With acks=0 nothing is answered, and a failure closes the connection so the client notices
and refreshes its metadata, as Kafka does.

acks=all: a partition whose ISR is smaller than `min.insync.replicas` refuses the write
(NOT_ENOUGH_REPLICAS); otherwise the answer waits in the produce purgatory until the high
watermark passes the appended records (every ISR member has them), or fails with
NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile, NOT_ENOUGH_REPLICAS_AFTER_APPEND if
the ISR shrank below the minimum, REQUEST_TIMED_OUT after the request's timeout. A leader
alone in its ISR (one broker) advances the high watermark with the append: no wait.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.messages import ProduceRequest, ProduceResponse
from riverlog.protocol.records.batch_header import MAGIC_POSITION, peek_magic
from riverlog.protocol.records.convert import legacy_to_v2
from riverlog.server.dispatch import RequestContext
from riverlog.server.partition import HostedPartition
from riverlog.server.topics import refuse_client_append

if TYPE_CHECKING:
    from collections.abc import Awaitable

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


class _Replicated:
    """acks=all partitions of one request waiting for their ISR."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.waiting: list[tuple[PartitionResponse, HostedPartition, int, int]] = []

    def add(self, answer: PartitionResponse, hosted: HostedPartition, required: int) -> None:
        self.waiting.append((answer, hosted, hosted.leader_epoch, required))

    def _settle(self) -> bool:
        """Give each partition its error once it is known; whether all are."""
        still = []
        for entry in self.waiting:
            answer, hosted, epoch, required = entry
            current = self.broker.replicas.partitions.get(hosted.key)
            if current is not hosted or hosted.leader_epoch != epoch or \
                    hosted.leader_id != self.broker.broker_id:  # fmt: skip
                answer.error_code = error_codes.NOT_LEADER_OR_FOLLOWER.code
            elif hosted.log.high_watermark >= required:
                if len(hosted.isr) < hosted.log.config.min_insync_replicas:
                    answer.error_code = error_codes.NOT_ENOUGH_REPLICAS_AFTER_APPEND.code
            else:
                still.append(entry)
        self.waiting = still
        return not still

    def wait(self, response: ProduceResponse, timeout_ms: int) -> Awaitable[ProduceResponse]:
        def try_complete() -> ProduceResponse | None:
            return response if self._settle() else None

        def expire() -> ProduceResponse:
            for answer, *_ in self.waiting:
                answer.error_code = error_codes.REQUEST_TIMED_OUT.code
            return response

        keys: list[Hashable] = [hosted.key for _, hosted, _, _ in self.waiting]
        return self.broker.produce_purgatory.delay(keys, timeout_ms / 1000, try_complete, expire)


def _check_isr(hosted: HostedPartition) -> None:
    if len(hosted.isr) < hosted.log.config.min_insync_replicas:
        raise KafkaError(
            error_codes.NOT_ENOUGH_REPLICAS,
            f"The size of the current ISR {hosted.isr} is insufficient to satisfy the "
            f"min.isr requirement of {hosted.log.config.min_insync_replicas}.",
        )


def handle_produce(
    broker: Broker, ctx: RequestContext
) -> ProduceResponse | Awaitable[ProduceResponse] | None:
    request = ctx.request.body
    assert isinstance(request, ProduceRequest)
    version = ctx.version
    bad_acks = request.acks not in (-1, 0, 1)
    all_acks = request.acks == -1
    replicated = _Replicated(broker)
    any_error = False
    topics: list[ProduceResponse.TopicProduceResponse] = []
    for topic in request.topic_data:
        partitions: list[PartitionResponse] = []
        for data in topic.partition_data:
            try:
                if bad_acks:
                    raise KafkaError(error_codes.INVALID_REQUIRED_ACKS)
                refuse_client_append(topic.name)
                if request.transactional_id is not None:
                    raise KafkaError(
                        error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "Transactions are not supported by this broker yet.",
                    )
                if not isinstance(data.records, bytes | bytearray | memoryview):
                    raise KafkaError(error_codes.CORRUPT_MESSAGE, "The record set is null.")
                records = _up_convert(memoryview(data.records))
                hosted = broker.replicas.leader(topic.name, data.index)
                if all_acks:
                    _check_isr(hosted)
                result = broker.replicas.append(topic.name, data.index, records)
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
            if all_acks and hosted.log.high_watermark <= result.last_offset:
                replicated.add(answer, hosted, result.last_offset + 1)
        topics.append(
            ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions)
        )
    if request.acks == 0:
        if any_error and ctx.connection is not None:
            ctx.connection.close()
        return None
    response = ProduceResponse(responses=topics)
    if replicated.waiting:
        return replicated.wait(response, request.timeout_ms)
    return response
