"""Produce: validate and append each partition's record set; acks 0, 1 and all.

Each partition succeeds or fails on its own (Kafka semantics); a partition's record set is
appended whole or not at all. Internal topics (`__consumer_offsets`,
`__transaction_state`) refuse client appends with INVALID_TOPIC_EXCEPTION, as Kafka does.
With acks=0 nothing is answered, and a failure closes the connection so the client notices
and refreshes its metadata, as Kafka does.

The rules — leadership, `min.insync.replicas`, internal topics, and when an acks=all write
is in the ISR — are the replica manager's (`ReplicaManager.append` and
`await_replication`): this handler maps partitions to appends and outcomes to answers.

Transactional requests (KIP-890 part 1, `transaction.partition.verification.enable`): where
a batch would open its producer's transaction on a partition, the leader first asks the
transaction coordinator whether that partition is in the transaction
(`server/txn_verification.py`: what is asked, how refusals are answered) and appends with
the guard it got (`HostedPartition.start_transaction_verification`); the request's other
partitions are appended with it. A request whose partitions all have the transaction open
already is appended at once, as any other. With verification on, a transactional batch
sent without a transactional id can open no transaction (INVALID_TXN_STATE). A request
waiting for its verification keeps its place: later produce requests of the same
connection append after it (Kafka reads one request of a connection at a time), so a
producer's pipelined batches still reach each partition in sequence order.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.messages import ProduceRequest, ProduceResponse
from riverlog.protocol.records import compression
from riverlog.protocol.records.batch_header import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    HEADER_FIELDS,
    LOG_OVERHEAD,
    MAGIC_POSITION,
    peek_magic,
    read_batch_header,
)
from riverlog.protocol.records.convert import legacy_to_v2
from riverlog.server.dispatch import RequestContext
from riverlog.server.replication.partition import HostedPartition
from riverlog.server.txn_verification import produce_error
from riverlog.storage.producer_state import NO_GUARD, VerificationGuard

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from riverlog.server.broker import Broker
    from riverlog.server.network import Connection

PartitionResponse = ProduceResponse.PartitionProduceResponse
PartitionData = ProduceRequest.PartitionProduceData
Records = memoryview
Verifying = asyncio.Future[dict[TopicPartition, ErrorCode]]
Prepared = list[tuple[Records | KafkaError, VerificationGuard]]
"""Each partition's checked record set (or why not) and guard, in request order."""
_BUFFERS = (bytes, bytearray, memoryview)  # a tuple: isinstance of a union is slower


V2_ONLY_FROM = 3  # Produce v3+: exactly one magic-2 batch per partition
ZSTD_FROM = 7  # KIP-110


def _record_set(records: memoryview, version: int) -> memoryview:
    """A partition's record set as the request version allows it (Kafka's
    `ProduceRequest.validateRecords`): from v3 exactly one batch of magic 2, zstd only from
    v7; before v3, message sets of pre-0.11 clients (magic 0/1) become v2 batches."""
    if version < V2_ONLY_FROM:
        return _up_convert(records)
    if len(records) >= BATCH_HEADER_SIZE:  # the common case, in one unpack: no header built
        fields = HEADER_FIELDS.unpack_from(records, 0)
        if (
            fields[3] == 2  # magic
            and fields[1] + LOG_OVERHEAD == len(records)  # one whole batch
            and fields[6] >= 0  # last offset delta
            and fields[12] >= 0  # record count
            and (version >= ZSTD_FROM or fields[5] & COMPRESSION_MASK != compression.ZSTD)
        ):
            return records
    return _record_set_checked(records, version)


def _record_set_checked(records: memoryview, version: int) -> memoryview:
    """`_record_set` step by step (v3+): every fault answered with Kafka's code."""
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
    if header.batch_length + LOG_OVERHEAD != len(records):  # `header.size`, without a call
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
) -> ProduceResponse | Awaitable[ProduceResponse | None] | None:
    conn = ctx.connection
    if conn is not None and conn.produce_order is not None:
        # An earlier request of this connection waits to append: append after it.
        return _in_order(broker, ctx, conn.produce_order, _hold(conn))
    if not broker.txn_verifier.enabled:  # the common cases first, without more calls
        return _produce(broker, ctx, None, None)
    request = ctx.request.body
    assert isinstance(request, ProduceRequest)
    if request.transactional_id is None:
        return _produce(broker, ctx, NO_GUARD, None)
    return _dispatch(broker, ctx, None)


def _dispatch(
    broker: Broker, ctx: RequestContext, held: asyncio.Future[None] | None
) -> ProduceResponse | Awaitable[ProduceResponse | None] | None:
    """Append now, or once verified. `held`: this request's place in its connection's
    append order, released once it appended (or failed to)."""
    request = ctx.request.body
    assert isinstance(request, ProduceRequest)
    handed_over = False
    try:
        if not broker.txn_verifier.enabled:
            return _produce(broker, ctx, None, None)
        if request.transactional_id is None:
            return _produce(broker, ctx, NO_GUARD, None)
        prepared, unverified, asked = _start_verification(broker, ctx, request.transactional_id)
        if asked is None:
            return _produce(broker, ctx, NO_GUARD, prepared)
        if held is None and ctx.connection is not None:
            held = _hold(ctx.connection)
        handed_over = True
        return _produce_verified(broker, ctx, prepared, unverified, asked, held)
    finally:
        if not handed_over:
            _release(ctx, held)


def _hold(conn: Connection) -> asyncio.Future[None]:
    """A place in `conn`'s append order, after every request holding one."""
    held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    conn.produce_order = held
    return held


def _release(ctx: RequestContext, held: asyncio.Future[None] | None) -> None:
    if held is None or held.done():
        return
    held.set_result(None)
    if ctx.connection is not None and ctx.connection.produce_order is held:
        ctx.connection.produce_order = None


async def _in_order(
    broker: Broker, ctx: RequestContext, earlier: asyncio.Future[None], held: asyncio.Future[None]
) -> ProduceResponse | None:
    try:
        await earlier
    except BaseException:
        _release(ctx, held)
        raise
    result = _dispatch(broker, ctx, held)
    if result is None or isinstance(result, ProduceResponse):
        return result
    return await result


def _checked(broker: Broker, topic: str, data: PartitionData, version: int, acks: int) -> Records:
    if acks not in (-1, 0, 1):
        raise KafkaError(error_codes.INVALID_REQUIRED_ACKS)
    if not isinstance(data.records, _BUFFERS):
        raise KafkaError(error_codes.CORRUPT_MESSAGE, "The record set is null.")
    broker.replicas.get(topic, data.index)  # unknown partitions first, as Kafka
    return _record_set(memoryview(data.records), version)


def _produce(
    broker: Broker,
    ctx: RequestContext,
    guard: VerificationGuard | None,
    prepared: Prepared | None,
) -> ProduceResponse | Awaitable[ProduceResponse] | None:
    """Append each partition's record set and answer (acks=all: once the ISR has them).
    `guard`: verification is off (None) or nothing was verified (NO_GUARD); `prepared`:
    each partition's checked record set (or why not) and guard, in request order, when a
    transactional request was verified first."""
    request = ctx.request.body
    assert isinstance(request, ProduceRequest)
    version = ctx.version
    acks = request.acks
    waiting: list[PartitionResponse] = []
    writes: list[tuple[HostedPartition, int]] = []
    any_error = False
    topics: list[ProduceResponse.TopicProduceResponse] = []
    position = 0
    for topic in request.topic_data:
        partitions: list[PartitionResponse] = []
        for data in topic.partition_data:
            try:
                if prepared is None:
                    records = _checked(broker, topic.name, data, version, acks)
                else:
                    checked, guard = prepared[position]
                    position += 1
                    if isinstance(checked, KafkaError):
                        raise checked
                    records = checked
                hosted, result = broker.replicas.append(
                    topic.name, data.index, records, acks=acks, verification=guard
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
            if acks == -1:
                waiting.append(answer)
                writes.append((hosted, result.last_offset + 1))
        topics.append(
            ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions)
        )
    if acks == 0:
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


def _start_verification(
    broker: Broker, ctx: RequestContext, transactional_id: str
) -> tuple[Prepared, list[tuple[int, TopicPartition]], Verifying | None]:
    """KIP-890 part 1: the partitions where the request's batch would open its producer's
    transaction (with their positions) and the coordinator's answer to come for them —
    None when there are none."""
    request = ctx.request.body
    assert isinstance(request, ProduceRequest)
    prepared: Prepared = []
    unverified: list[tuple[int, TopicPartition]] = []
    producers: set[tuple[int, int]] = set()
    for topic in request.topic_data:
        for data in topic.partition_data:
            try:
                records = _checked(broker, topic.name, data, ctx.version, request.acks)
                hosted = broker.replicas.leader(topic.name, data.index)
                guard = hosted.start_transaction_verification(records)
            except KafkaError as e:
                prepared.append((e, NO_GUARD))
                continue
            if guard is not NO_GUARD:
                header = read_batch_header(records, 0, whole=False)
                producers.add((header.producer_id, header.producer_epoch))
                unverified.append((len(prepared), (topic.name, data.index)))
            prepared.append((records, guard))
    if not unverified:
        return prepared, [], None
    if len({producer_id for producer_id, _ in producers}) > 1:
        mixed = KafkaError(
            error_codes.INVALID_PRODUCER_ID_MAPPING,
            "Transactional records contained more than one producer ID",
        )
        return [(mixed, NO_GUARD)] * len(prepared), [], None
    [(producer_id, epoch), *_] = producers
    asked = broker.txn_verifier.verify(
        transactional_id, producer_id, epoch, [tp for _, tp in unverified]
    )
    return prepared, unverified, asked


async def _produce_verified(
    broker: Broker,
    ctx: RequestContext,
    prepared: Prepared,
    unverified: list[tuple[int, TopicPartition]],
    asked: Verifying,
    held: asyncio.Future[None] | None,
) -> ProduceResponse | None:
    """Append once the coordinator answered; refused partitions get Kafka's answers."""
    try:
        errors = await asked
        for position, tp in unverified:
            error = errors.get(tp)
            if error is not None:
                prepared[position] = (produce_error(error, ctx.version), NO_GUARD)
        produced = _produce(broker, ctx, NO_GUARD, prepared)
    finally:
        _release(ctx, held)
    if produced is None or isinstance(produced, ProduceResponse):
        return produced
    return await produced


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
