"""Transaction APIs: InitProducerId (with a transactional id), AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions,
ListTransactions, DescribeProducers — request and response mapping only.

The rules live in `coordinator/transaction.py`, the I/O in `server/transaction_coordinator.py`
(transaction coordinator), `server/txn_offsets.py` (group coordinator side) and
`server/txn_markers.py` (partition leaders). Wire versions: AddPartitionsToTxn v0-v3 carry
one transaction, v4+ a batch of them (and `verify_only`, KIP-890 part 1, asked by partition
leaders); PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to clients of versions that
predate it (InitProducerId < 4, AddPartitionsToTxn < 2, AddOffsetsToTxn < 2, EndTxn < 2,
TxnOffsetCommit < 2), as Kafka does.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from typing import TYPE_CHECKING

from riverlog.coordinator.records import StoredOffset
from riverlog.coordinator.transaction import Listing, TopicPartition, TxnState
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.server.dispatch import RequestContext
from riverlog.server.group_coordinator import OFFSETS_TOPIC
from riverlog.server.txn_markers import write_markers

if TYPE_CHECKING:
    from riverlog.server.broker import Broker


def _fenced_as(error: ErrorCode, version: int, since: int) -> int:
    if error is error_codes.PRODUCER_FENCED and version < since:
        return error_codes.INVALID_PRODUCER_EPOCH.code
    return error.code


async def init_transactional_producer_id(
    broker: Broker, ctx: RequestContext, request: m.InitProducerIdRequest
) -> m.InitProducerIdResponse:
    """InitProducerId with a transactional id (the idempotent case stays in producers.py)."""
    assert request.transactional_id is not None
    coordinator = broker.transactions
    error, producer_id, epoch = await coordinator.init_producer_id(
        request.transactional_id,
        request.transaction_timeout_ms,
        request.producer_id if ctx.version >= 3 else -1,
        request.producer_epoch if ctx.version >= 3 else -1,
    )
    return m.InitProducerIdResponse(
        error_code=_fenced_as(error, ctx.version, 4),
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def _partitions(
    topics: list[m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic],
) -> list[TopicPartition]:
    return [(t.name, p) for t in topics for p in t.partitions]


async def _add_one(
    broker: Broker,
    version: int,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    wanted: list[TopicPartition],
    verify_only: bool,
) -> dict[TopicPartition, int]:
    """Error code per partition of one transaction's AddPartitionsToTxn."""
    unknown = {
        tp for tp in wanted if (t := broker.topics.get(tp[0])) is None or tp[1] not in t.partitions
    }
    if unknown:
        return {
            tp: (
                error_codes.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else error_codes.OPERATION_NOT_ATTEMPTED
            ).code
            for tp in wanted
        }
    coordinator = broker.transactions
    if verify_only:
        verified = coordinator.verify_partitions(
            transactional_id, producer_id, epoch, frozenset(wanted)
        )
        if isinstance(verified, ErrorCode):
            return dict.fromkeys(wanted, verified.code)
        return {tp: verified[tp].code for tp in wanted}
    error = await coordinator.add_partitions(
        transactional_id, producer_id, epoch, frozenset(wanted)
    )
    return dict.fromkeys(wanted, _fenced_as(error, version, 2))


def _topic_results(
    errors: dict[TopicPartition, int],
) -> list[m.AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[m.AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]] = (
        defaultdict(list)
    )
    for (topic, index), code in errors.items():
        by_topic[topic].append(
            m.AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult(
                partition_index=index, partition_error_code=code
            )
        )
    return [
        m.AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(name=t, results_by_partition=r)
        for t, r in by_topic.items()
    ]


async def handle_add_partitions_to_txn(
    broker: Broker, ctx: RequestContext
) -> m.AddPartitionsToTxnResponse:
    request = ctx.request.body
    assert isinstance(request, m.AddPartitionsToTxnRequest)
    if ctx.version <= 3:
        errors = await _add_one(
            broker,
            ctx.version,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            _partitions(request.v3_and_below_topics),
            False,
        )
        return m.AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(errors))
    results = await asyncio.gather(
        *(
            _add_one(
                broker,
                ctx.version,
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                _partitions(t.topics),
                t.verify_only,
            )
            for t in request.transactions
        )
    )
    return m.AddPartitionsToTxnResponse(
        results_by_transaction=[
            m.AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
                transactional_id=t.transactional_id, topic_results=_topic_results(errors)
            )
            for t, errors in zip(request.transactions, results, strict=True)
        ]
    )


async def handle_add_offsets_to_txn(
    broker: Broker, ctx: RequestContext
) -> m.AddOffsetsToTxnResponse:
    request = ctx.request.body
    assert isinstance(request, m.AddOffsetsToTxnRequest)
    broker.groups.ensure_offsets_topic()
    offsets_partition = (OFFSETS_TOPIC, broker.groups.partition_of(request.group_id))
    error = await broker.transactions.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        frozenset({offsets_partition}),
    )
    return m.AddOffsetsToTxnResponse(error_code=_fenced_as(error, ctx.version, 2))


async def handle_end_txn(broker: Broker, ctx: RequestContext) -> m.EndTxnResponse:
    request = ctx.request.body
    assert isinstance(request, m.EndTxnRequest)
    error = await broker.transactions.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return m.EndTxnResponse(error_code=_fenced_as(error, ctx.version, 2))


async def handle_txn_offset_commit(
    broker: Broker, ctx: RequestContext
) -> m.TxnOffsetCommitResponse:
    request = ctx.request.body
    assert isinstance(request, m.TxnOffsetCommitRequest)
    now = broker.clock.wall_ms()
    wanted = {
        (t.name, p.partition_index): StoredOffset(
            p.committed_offset,
            p.committed_leader_epoch if ctx.version >= 2 else -1,
            p.committed_metadata or "",
            now,
            -1,
        )
        for t in request.topics
        for p in t.partitions
    }
    v3 = ctx.version >= 3
    errors = await broker.txn_offsets.commit(
        request.group_id,
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.generation_id if v3 else -1,
        request.member_id if v3 else "",
        request.group_instance_id if v3 else None,
        wanted,
        ctx.version,
    )
    by_topic: dict[str, list[m.TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition]] = (
        defaultdict(list)
    )
    for (topic, index), error in errors.items():
        by_topic[topic].append(
            m.TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                partition_index=index, error_code=_fenced_as(error, ctx.version, 2)
            )
        )
    return m.TxnOffsetCommitResponse(
        topics=[
            m.TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ]
    )


# --- partition leaders ---------------------------------------------------------------------


async def handle_write_txn_markers(
    broker: Broker, ctx: RequestContext
) -> m.WriteTxnMarkersResponse:
    request = ctx.request.body
    assert isinstance(request, m.WriteTxnMarkersRequest)
    return await write_markers(broker, request)


# --- describing --------------------------------------------------------------------------


def handle_describe_transactions(
    broker: Broker, ctx: RequestContext
) -> m.DescribeTransactionsResponse:
    request = ctx.request.body
    assert isinstance(request, m.DescribeTransactionsRequest)
    states = []
    for transactional_id in request.transactional_ids:
        error, meta = broker.transactions.describe(transactional_id)
        state = m.DescribeTransactionsResponse.TransactionState(
            error_code=error.code, transactional_id=transactional_id
        )
        if meta is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, index in sorted(meta.partitions):
                by_topic[topic].append(index)
            state.transaction_state = meta.state.kafka_name
            state.transaction_timeout_ms = meta.timeout_ms
            state.transaction_start_time_ms = meta.start_ms
            state.producer_id = meta.producer_id
            state.producer_epoch = meta.producer_epoch
            state.topics = [
                m.DescribeTransactionsResponse.TopicData(topic=t, partitions=ps)
                for t, ps in by_topic.items()
            ]
        states.append(state)
    return m.DescribeTransactionsResponse(transaction_states=states)


def handle_list_transactions(broker: Broker, ctx: RequestContext) -> m.ListTransactionsResponse:
    request = ctx.request.body
    assert isinstance(request, m.ListTransactionsRequest)
    known = {s.kafka_name for s in TxnState}
    unknown = [s for s in request.state_filters if s not in known]
    filters = Listing(
        states=set(request.state_filters) - set(unknown),
        producer_ids=set(request.producer_id_filters),
        duration_ms=request.duration_filter if ctx.version >= 1 else -1,
    )
    error = (
        error_codes.COORDINATOR_LOAD_IN_PROGRESS
        if broker.transactions.loading()
        else error_codes.NONE
    )
    listed = [] if unknown and not filters.states else broker.transactions.listing(filters)
    pattern = request.transactional_id_pattern if ctx.version >= 2 else None
    if pattern:
        listed = [t for t in listed if re.fullmatch(pattern, t.transactional_id)]
    return m.ListTransactionsResponse(
        error_code=error.code,
        unknown_state_filters=unknown,
        transaction_states=[
            m.ListTransactionsResponse.TransactionState(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=t.state.kafka_name,
            )
            for t in listed
        ],
    )


def handle_describe_producers(broker: Broker, ctx: RequestContext) -> m.DescribeProducersResponse:
    """The producers each partition's leader knows: epoch, last sequence and timestamp, and
    the first offset of an open transaction (`kafka-transactions.sh describe-producers`)."""
    request = ctx.request.body
    assert isinstance(request, m.DescribeProducersRequest)
    topics = []
    for topic in request.topics:
        answers = []
        for index in topic.partition_indexes:
            answer = m.DescribeProducersResponse.PartitionResponse(partition_index=index)
            try:
                hosted = broker.replicas.leader(topic.name, index)
            except KafkaError as e:
                answer.error_code = e.code
                answer.error_message = e.message
            else:
                answer.active_producers = [
                    m.DescribeProducersResponse.ProducerState(
                        producer_id=pid,
                        producer_epoch=e.epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=e.txn_first_offset,
                    )
                    for pid, e in sorted(hosted.log.producers.producers.items())
                ]
            answers.append(answer)
        topics.append(
            m.DescribeProducersResponse.TopicResponse(name=topic.name, partitions=answers)
        )
    return m.DescribeProducersResponse(topics=topics)
