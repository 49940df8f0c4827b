"""Kafka's authorization rules of the transaction APIs (KafkaApis), applied by
security/authorization.py through `security/api_rules.py: RULES`:

- AddPartitionsToTxn v0-v3 (clients): Write on the transactional id, else every partition
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED; then Write on each topic (internal topics never
  pass): one denied topic fails the whole transaction — TOPIC_AUTHORIZATION_FAILED for its
  partitions, UNKNOWN_TOPIC_OR_PARTITION for unknown ones, OPERATION_NOT_ATTEMPTED for the
  rest — and nothing is added. v4+ (brokers verifying, KIP-890): ClusterAction on the
  cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED; no per-topic check.
- AddOffsetsToTxn: Write on the transactional id, then Read on the group.
- EndTxn: Write on the transactional id.
- TxnOffsetCommit: Write on the transactional id, then Read on the group (either denied:
  that error for every partition, nothing committed), then Read on each topic
  (TOPIC_AUTHORIZATION_FAILED per partition; the other topics are committed).
- WriteTxnMarkers: Alter or ClusterAction on the cluster (Kafka checks Alter first;
  kafka-transactions.sh's `abort` sends this API too), else CLUSTER_AUTHORIZATION_FAILED
  for every partition and nothing written.
- DescribeTransactions: Describe on each transactional id (TRANSACTIONAL_ID_AUTHORIZATION_
  FAILED per id); topics the principal may not Describe are left out of each answer.
- ListTransactions: only the ids the principal may Describe are listed.
- DescribeProducers: Read on each topic (TOPIC_AUTHORIZATION_FAILED per partition).

Pure: the decisions take the request and the `Subject` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.api import ApiMessage
from riverlog.security.acl import (
    ALTER,
    CLUSTER_ACTION,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
)
from riverlog.security.rules import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    TXN_DENIED,
    Answer,
    Rule,
    Subject,
    topic_split,
    whole_rule,
)

UNKNOWN = error_codes.UNKNOWN_TOPIC_OR_PARTITION.code
NOT_ATTEMPTED = error_codes.OPERATION_NOT_ATTEMPTED.code
VERIFY_FROM_VERSION = 4  # AddPartitionsToTxn v4+: batches from brokers (verify_only)


def _txn_of(request: Any) -> tuple[str, str]:
    return TRANSACTIONAL_ID, request.transactional_id


# --- AddPartitionsToTxn ------------------------------------------------------------------


def _add_partitions_answer(topics: list[Any], code_of: Callable[[str, int], int]) -> Any:
    return m.AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=[
            m.AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=[
                    m.AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=code_of(t.name, p)
                    )
                    for p in t.partitions
                ],
            )
            for t in topics
        ]
    )


def _may_add(subject: Subject, name: str) -> bool:
    topic = subject.topics.get(name)
    if topic is not None and topic.is_internal:
        return False  # Kafka never authorizes a client to add an internal topic
    return subject.may(WRITE, TOPIC, name)


def _add_partitions(subject: Subject, request: Any, version: int) -> None:
    if version >= VERIFY_FROM_VERSION:
        if not subject.on_cluster(CLUSTER_ACTION):
            raise Answer(m.AddPartitionsToTxnResponse(error_code=CLUSTER_DENIED))
        return None
    topics = request.v3_and_below_topics
    if not subject.may(WRITE, TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        raise Answer(_add_partitions_answer(topics, lambda _t, _p: TXN_DENIED))
    denied = {t.name for t in topics if not _may_add(subject, t.name)}
    if not denied:
        return None

    def code_of(name: str, index: int) -> int:
        if name in denied:
            return TOPIC_DENIED
        topic = subject.topics.get(name)
        return UNKNOWN if topic is None or index not in topic.partitions else NOT_ATTEMPTED

    raise Answer(_add_partitions_answer(topics, code_of))


# --- offsets in a transaction ------------------------------------------------------------


def _add_offsets(subject: Subject, request: Any) -> ApiMessage | None:
    if not subject.may(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        return m.AddOffsetsToTxnResponse(error_code=TXN_DENIED)
    if not subject.may(READ, GROUP, request.group_id):
        return m.AddOffsetsToTxnResponse(error_code=GROUP_DENIED)
    return None


def _txn_commit_denied(t: Any, error: int) -> Any:
    return m.TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
        name=t.name,
        partitions=[
            m.TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=error
            )
            for p in t.partitions
        ],
    )


def _txn_commit_whole(subject: Subject, request: Any) -> None:
    """Transactional id, then group: either denied answers every partition, and the
    handler never runs (nothing is staged)."""
    if not subject.may(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        error = TXN_DENIED
    elif not subject.may(READ, GROUP, request.group_id):
        error = GROUP_DENIED
    else:
        return
    raise Answer(
        m.TxnOffsetCommitResponse(topics=[_txn_commit_denied(t, error) for t in request.topics])
    )


_txn_commit_topics = topic_split("topics", "name", READ, "topics", _txn_commit_denied)


def _txn_offset_commit(
    subject: Subject, request: Any, version: int
) -> Callable[[Any], None] | None:
    _txn_commit_whole(subject, request)
    return _txn_commit_topics(subject, request, version)


# --- partition leaders -------------------------------------------------------------------


def _write_markers(subject: Subject, request: Any) -> ApiMessage | None:
    if subject.on_cluster(ALTER) or subject.on_cluster(CLUSTER_ACTION):
        return None
    W = m.WriteTxnMarkersResponse
    return W(
        markers=[
            W.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    W.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            W.WritableTxnMarkerPartitionResult(
                                partition_index=p, error_code=CLUSTER_DENIED
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in marker.topics
                ],
            )
            for marker in request.markers
        ]
    )


def _producers_denied(t: Any, error: int) -> Any:
    return m.DescribeProducersResponse.TopicResponse(
        name=t.name,
        partitions=[
            m.DescribeProducersResponse.PartitionResponse(
                partition_index=p,
                error_code=error,
                error_message=error_codes.TOPIC_AUTHORIZATION_FAILED.message,
            )
            for p in t.partition_indexes
        ],
    )


# --- describing --------------------------------------------------------------------------


def _describe_transactions(
    subject: Subject, request: Any, version: int
) -> Callable[[Any], None] | None:
    ids = request.transactional_ids
    denied = [t for t in ids if not subject.may(DESCRIBE, TRANSACTIONAL_ID, t)]
    if not denied:
        return None
    request.transactional_ids = [t for t in ids if t not in denied]
    answers = [
        m.DescribeTransactionsResponse.TransactionState(error_code=TXN_DENIED, transactional_id=t)
        for t in denied
    ]
    return lambda response: response.transaction_states.extend(answers)


def _hide_txn_topics(subject: Subject, request: Any, response: Any) -> None:
    for state in response.transaction_states:
        state.topics = [t for t in state.topics if subject.may(DESCRIBE, TOPIC, t.topic)]


def _hide_transactions(subject: Subject, request: Any, response: Any) -> None:
    response.transaction_states = [
        s
        for s in response.transaction_states
        if subject.may(DESCRIBE, TRANSACTIONAL_ID, s.transactional_id)
    ]


TXN_RULES: dict[int, Rule] = {
    m.AddPartitionsToTxnRequest.API_KEY: Rule(split=_add_partitions),
    m.AddOffsetsToTxnRequest.API_KEY: Rule(check=_add_offsets),
    m.EndTxnRequest.API_KEY: Rule(check=whole_rule(WRITE, TXN_DENIED, m.EndTxnResponse, _txn_of)),
    m.TxnOffsetCommitRequest.API_KEY: Rule(split=_txn_offset_commit),
    m.WriteTxnMarkersRequest.API_KEY: Rule(check=_write_markers),
    m.DescribeTransactionsRequest.API_KEY: Rule(
        split=_describe_transactions, after=_hide_txn_topics
    ),
    m.ListTransactionsRequest.API_KEY: Rule(after=_hide_transactions),
    m.DescribeProducersRequest.API_KEY: Rule(
        split=topic_split("topics", "name", READ, "topics", _producers_denied)
    ),
}
