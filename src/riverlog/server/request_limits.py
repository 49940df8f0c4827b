"""Bounds on the work one admin request may ask for, checked before any work is done.

Kafka's controller (KRaft) builds the records of one user operation in a list bounded by
`MAX_RECORDS_PER_USER_OP` (10,000) and answers POLICY_VIOLATION "Unable to perform
excessively large batch operation." when a request needs more: a CreateTopics of
`num_partitions=2147483647`, even `validate_only`, is refused at once instead of assigning
two billion partitions. riverlog applies the same bound to CreateTopics and
CreatePartitions, counting records as Kafka does (one per topic, partition and config), and
to the whole request: every topic of a request over the bound gets the error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import CreatePartitionsRequest, CreateTopicsRequest

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

MAX_RECORDS_PER_USER_OP = 10_000
EXCESSIVE_BATCH = "Unable to perform excessively large batch operation."


def _partitions(broker: Broker, topic: CreateTopicsRequest.CreatableTopic) -> int:
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return int(broker.config["num.partitions"])
    return max(topic.num_partitions, 0)


def create_topics_error(broker: Broker, request: CreateTopicsRequest) -> KafkaError | None:
    """POLICY_VIOLATION when the topics of `request` need too many records, else None."""
    records = sum(1 + _partitions(broker, t) + len(t.configs) for t in request.topics)
    return _bounded(records)


def create_partitions_error(broker: Broker, request: CreatePartitionsRequest) -> KafkaError | None:
    """POLICY_VIOLATION when the partitions `request` adds need too many records."""
    records = 0
    for topic in request.topics:
        known = broker.topics.get(topic.name)
        current = len(known.partitions) if known is not None else 0
        records += 1 + max(topic.count - current, 0)
    return _bounded(records)


def _bounded(records: int) -> KafkaError | None:
    if records > MAX_RECORDS_PER_USER_OP:
        return KafkaError(error_codes.POLICY_VIOLATION, EXCESSIVE_BATCH)
    return None
