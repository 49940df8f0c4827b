"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions.

Each topic in a request succeeds or fails on its own with Kafka's error code and message;
`validate_only` checks everything and changes nothing. A request asking for more records
than Kafka's controller allows in one operation is refused whole, before any work
(`server/request_limits.py`). Replica assignment uses Kafka's
algorithm over the live brokers. In a cluster the broker writes the topic to the store and
the controller does the rest; the answer waits (up to the request's timeout) until this
broker's metadata shows the topic with leaders — or, for deletions, without the topic — so a
client can use it at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from riverlog.server import request_limits
from riverlog.server.dispatch import RequestContext
from riverlog.storage.log_config import InvalidConfigError, LogConfig

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

Result = CreateTopicsResponse.CreatableTopicResult
T = TypeVar("T")


def _create_one(
    broker: Broker, topic: CreateTopicsRequest.CreatableTopic, validate_only: bool, version: int
) -> Result:
    result = Result(name=topic.name, num_partitions=-1, replication_factor=-1)
    try:
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        try:
            LogConfig.from_map({**broker.topic_defaults, **configs})
        except InvalidConfigError as e:
            raise KafkaError(error_codes.INVALID_CONFIG, str(e)) from None
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise KafkaError(
                    error_codes.INVALID_REQUEST,
                    "Both partitions/replication factor and replica assignment were set.",
                )
            assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
            live = set(broker.live_brokers())
            for replicas in assignment.values():
                if not set(replicas) <= live or not replicas:
                    raise KafkaError(
                        error_codes.INVALID_REPLICA_ASSIGNMENT,
                        f"Unknown brokers in the assignment {replicas}.",
                    )
                if len(set(replicas)) != len(replicas):
                    raise KafkaError(
                        error_codes.INVALID_REPLICA_ASSIGNMENT,
                        f"Duplicate brokers in the assignment {replicas}.",
                    )
        else:
            partitions = (
                broker.config["num.partitions"]
                if topic.num_partitions == -1
                else topic.num_partitions
            )
            factor = (
                broker.config["default.replication.factor"]
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            if partitions <= 0:
                raise KafkaError(
                    error_codes.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
                )
            if factor <= 0:
                raise KafkaError(
                    error_codes.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0.",
                )
            assignment = broker.assign(partitions, factor)
        created = broker.create_topic_with_assignment(
            topic.name, assignment, configs, validate_only=validate_only
        )
        result.topic_id = created.topic_id
        result.num_partitions = len(created.partitions)
        result.replication_factor = len(created.partitions[0])
    except KafkaError as e:
        result.error_code = e.code
        result.error_message = e.message if version >= 1 else None
    return result


async def _settled(
    broker: Broker, topics: dict[str, int], timeout_ms: int, *, exists: bool
) -> None:
    """Wait until each topic has at least that many partitions, all led (or is gone)."""
    for name, partitions in topics.items():
        await broker.wait_for_topic(
            name, exists=exists, timeout_s=timeout_ms / 1000, partitions=partitions
        )


def handle_create_topics(
    broker: Broker, ctx: RequestContext
) -> CreateTopicsResponse | Awaitable[CreateTopicsResponse]:
    request = ctx.request.body
    assert isinstance(request, CreateTopicsRequest)
    names = [t.name for t in request.topics]
    results = []
    if (too_big := request_limits.create_topics_error(broker, request)) is not None:
        return CreateTopicsResponse(
            topics=[
                Result(
                    name=t.name,
                    error_code=too_big.code,
                    error_message=too_big.message if ctx.version >= 1 else None,
                )
                for t in request.topics
            ]
        )
    for topic in request.topics:
        if names.count(topic.name) > 1:
            results.append(
                Result(
                    name=topic.name,
                    error_code=error_codes.INVALID_REQUEST.code,
                    error_message="Duplicate topic in the request.",
                )
            )
            continue
        results.append(_create_one(broker, topic, request.validate_only, ctx.version))
    response = CreateTopicsResponse(topics=results)
    created = [r.name for r in results if r.error_code == 0]
    if created and not request.validate_only:
        settled = _settled(broker, dict.fromkeys(created, 1), request.timeout_ms, exists=True)
        return _answer_after(settled, response)
    return response


async def _answer_after(wait: Awaitable[None], response: T) -> T:
    await wait
    return response


def handle_delete_topics(
    broker: Broker, ctx: RequestContext
) -> DeleteTopicsResponse | Awaitable[DeleteTopicsResponse]:
    request = ctx.request.body
    assert isinstance(request, DeleteTopicsRequest)
    wanted: list[tuple[str | None, uuid.UUID | None]] = [
        (t.name, t.topic_id) for t in request.topics
    ] or [(n, None) for n in request.topic_names]
    responses = []
    for name, topic_id in wanted:
        answer = DeleteTopicsResponse.DeletableTopicResult(name=name)
        try:
            if not broker.config["delete.topic.enable"]:
                raise KafkaError(error_codes.TOPIC_DELETION_DISABLED)
            if name is None and topic_id is not None:
                known = broker.topics.by_id(topic_id)
                if known is None:
                    raise KafkaError(error_codes.UNKNOWN_TOPIC_ID)
                name = answer.name = known.name
            if name is None:
                raise KafkaError(error_codes.INVALID_REQUEST, "No topic name or id.")
            deleted = broker.delete_topic(name)
            answer.topic_id = deleted.topic_id
        except KafkaError as e:
            answer.error_code = e.code
            answer.error_message = e.message if ctx.version >= 5 else None
        responses.append(answer)
    response = DeleteTopicsResponse(responses=responses)
    gone = [r.name for r in responses if r.error_code == 0 and r.name is not None]
    if gone:
        settled = _settled(broker, dict.fromkeys(gone, 1), request.timeout_ms, exists=False)
        return _answer_after(settled, response)
    return response


def handle_create_partitions(
    broker: Broker, ctx: RequestContext
) -> CreatePartitionsResponse | Awaitable[CreatePartitionsResponse]:
    """Answered once the new partitions have leaders (or after the request's timeout)."""
    request = ctx.request.body
    assert isinstance(request, CreatePartitionsRequest)
    results = []
    grown: dict[str, int] = {}
    if (too_big := request_limits.create_partitions_error(broker, request)) is not None:
        return CreatePartitionsResponse(
            results=[
                CreatePartitionsResponse.CreatePartitionsTopicResult(
                    name=t.name, error_code=too_big.code, error_message=too_big.message
                )
                for t in request.topics
            ]
        )
    for topic in request.topics:
        answer = CreatePartitionsResponse.CreatePartitionsTopicResult(name=topic.name)
        try:
            # no assignments (null, or an empty list as some clients send): Kafka's placement
            given = [list(a.broker_ids) for a in topic.assignments or ()] or None
            broker.add_partitions(
                topic.name, topic.count, validate_only=request.validate_only, assignments=given
            )
            grown[topic.name] = topic.count
        except KafkaError as e:
            answer.error_code = e.code
            answer.error_message = e.message
        results.append(answer)
    response = CreatePartitionsResponse(results=results)
    if grown and not request.validate_only:
        settled = _settled(broker, grown, request.timeout_ms, exists=True)
        return _answer_after(settled, response)
    return response
