"""Admin operations over one connection: the cluster (brokers, controller, every partition),
topics (list, describe, create, delete, grow), topic and broker configs, offsets by time
(ListOffsets), leader elections (ElectLeaders) and partition reassignments. Errors come
back as `KafkaError`s carrying the broker's code and message.

The connection should go to the controller for changes; on a single broker (and until the
cluster issue adds controller routing) any broker will do.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from riverlog.client.cluster import Cluster
from riverlog.client.connection import Connection
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataRequest,
    MetadataResponse,
)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
BROKER_LOGGER_RESOURCE = 8
DYNAMIC_TOPIC_CONFIG = 1
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


def _check(code: int, message: str | None = None) -> None:
    if code != 0:
        raise KafkaError(error_codes.for_code(code), message)


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: list[PartitionInfo] = field(default_factory=list)


@dataclass
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass
class ClusterView:
    cluster_id: str | None
    controller: int
    brokers: list[BrokerInfo]
    topics: list[TopicInfo]


async def _metadata(conn: Connection, names: list[str] | None) -> MetadataResponse:
    topics = (
        None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    )
    response = await conn.send(MetadataRequest(topics=topics, allow_auto_topic_creation=False))
    assert isinstance(response, MetadataResponse)
    return response


async def describe_cluster(conn: Connection) -> ClusterView:
    """Brokers, controller and every topic (internal ones too), from one Metadata answer."""
    response = await _metadata(conn, None)
    brokers = [BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers]
    return ClusterView(
        response.cluster_id,
        response.controller_id,
        sorted(brokers, key=lambda b: b.node_id),
        _topics(response),
    )


async def describe_topics(conn: Connection, names: list[str] | None = None) -> list[TopicInfo]:
    """Topics from Metadata (all topics for None); unknown names raise."""
    return _topics(await _metadata(conn, names))


def _topics(response: MetadataResponse) -> list[TopicInfo]:
    out = []
    for t in response.topics:
        _check(t.error_code, f"Topic '{t.name}' does not exist." if t.error_code == 3 else None)
        out.append(
            TopicInfo(
                t.name or "",
                t.topic_id,
                t.is_internal,
                sorted(
                    (
                        PartitionInfo(
                            p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes)
                        )
                        for p in t.partitions
                    ),
                    key=lambda p: p.partition,
                ),
            )
        )
    return sorted(out, key=lambda t: t.name)


async def broker_racks(conn: Connection) -> dict[int, str | None]:
    """Every live broker's id and `broker.rack` (None: none set), from Metadata."""
    response = await conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
    assert isinstance(response, MetadataResponse)
    return {b.node_id: b.rack for b in response.brokers}


async def create_topic(
    conn: Connection,
    name: str,
    partitions: int = -1,
    replication_factor: int = -1,
    configs: dict[str, str] | None = None,
    *,
    validate_only: bool = False,
    assignment: Mapping[int, list[int]] | None = None,
) -> None:
    """CreateTopics for one topic; with `assignment` (partition -> broker ids) the partitions
    and replication factor come from it (pass -1 for both)."""
    topic = CreateTopicsRequest.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
            for k, v in (configs or {}).items()
        ],
        assignments=[
            CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=ids)
            for p, ids in (assignment or {}).items()
        ],
    )
    response = await conn.send(
        CreateTopicsRequest(topics=[topic], timeout_ms=30_000, validate_only=validate_only)
    )
    assert isinstance(response, CreateTopicsResponse)
    result = response.topics[0]
    _check(result.error_code, result.error_message)


async def delete_topic(conn: Connection, name: str) -> None:
    version = conn.version_for(DeleteTopicsRequest)
    request = DeleteTopicsRequest(timeout_ms=30_000)
    if version >= 6:
        request.topics = [DeleteTopicsRequest.DeleteTopicState(name=name)]
    else:
        request.topic_names = [name]
    response = await conn.send(request, version)
    assert isinstance(response, DeleteTopicsResponse)
    result = response.responses[0]
    _check(result.error_code, result.error_message)


async def create_partitions(
    conn: Connection, name: str, count: int, assignments: list[list[int]] | None = None
) -> None:
    """Grow `name` to `count` partitions; `assignments`: the new partitions' replicas."""
    request = CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(
                name=name,
                count=count,
                assignments=None
                if assignments is None
                else [
                    CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=replicas)
                    for replicas in assignments
                ],
            )
        ],
        timeout_ms=30_000,
    )
    response = await conn.send(request)
    assert isinstance(response, CreatePartitionsResponse)
    result = response.results[0]
    _check(result.error_code, result.error_message)


async def describe_configs(
    conn: Connection, resource_type: int, name: str, *, include_synonyms: bool = False
) -> list[DescribeConfigsResponse.DescribeConfigsResourceResult]:
    """Every config of a topic (TOPIC_RESOURCE) or broker (BROKER_RESOURCE, name = its id;
    "" = the cluster's dynamic defaults), with each value's source and, if asked, synonyms."""
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=None
            )
        ],
        include_synonyms=include_synonyms,
    )
    response = await conn.send(request)
    assert isinstance(response, DescribeConfigsResponse)
    result = response.results[0]
    _check(result.error_code, result.error_message)
    return list(result.configs)


async def topic_config_overrides(conn: Connection, name: str) -> dict[str, str]:
    """The topic's own config overrides (what `kafka-topics --describe` prints)."""
    return {
        c.name: c.value or ""
        for c in await describe_configs(conn, TOPIC_RESOURCE, name)
        if c.config_source == DYNAMIC_TOPIC_CONFIG
    }


async def alter_configs(
    conn: Connection,
    resource_type: int,
    name: str,
    set_values: Mapping[str, str],
    delete: Iterable[str],
) -> None:
    """IncrementalAlterConfigs: set and delete overrides of one resource; others stay."""
    changes = [
        IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=SET, value=v)
        for k, v in set_values.items()
    ]
    changes += [
        IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=DELETE, value=None)
        for k in delete
    ]
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=resource_type, resource_name=name, configs=changes
            )
        ],
        validate_only=False,
    )
    response = await conn.send(request)
    assert isinstance(response, IncrementalAlterConfigsResponse)
    result = response.responses[0]
    _check(result.error_code, result.error_message)


def list_offsets_request(
    partitions: Iterable[tuple[str, int]], timestamp: int
) -> ListOffsetsRequest:
    """A consumer's ListOffsets (replica -1) for one `timestamp` on every partition."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=i, timestamp=timestamp, max_num_offsets=1
                    )
                    for i in indexes
                ],
            )
            for topic, indexes in by_topic.items()
        ],
    )


async def list_offsets(
    conn: Connection, partitions: list[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int]:
    """ListOffsets on the partitions' leader: the earliest (-2), latest (-1), or first offset
    with a timestamp at or after `timestamp`; -1 where no record is that new."""
    response = await conn.send(list_offsets_request(partitions, timestamp))
    assert isinstance(response, ListOffsetsResponse)
    old_style = conn.version_for(ListOffsetsRequest) == 0
    out = {}
    for t in response.topics:
        for p in t.partitions:
            _check(p.error_code)
            if old_style:
                out[(t.name, p.partition_index)] = (
                    p.old_style_offsets[0] if p.old_style_offsets else -1
                )
            else:
                out[(t.name, p.partition_index)] = p.offset
    return out


async def leader_offsets(
    cluster: Cluster,
    partitions: Iterable[tuple[str, int]],
    timestamp: int,
    retry_backoff_ms: int,
    attempts: int = 10,
) -> dict[tuple[str, int], int]:
    """`list_offsets` for partitions of many leaders: one request per leader, retried (after
    marking the partitions stale) while the errors are retriable."""
    wanted = sorted(set(partitions))
    out: dict[tuple[str, int], int] = {}
    for attempt in range(attempts):
        by_leader: dict[int, list[tuple[str, int]]] = {}
        try:
            for tp in wanted:
                if tp not in out:
                    by_leader.setdefault(await cluster.leader_of(*tp), []).append(tp)
            for leader, tps in by_leader.items():
                out.update(await list_offsets(await cluster.connection(leader), tps, timestamp))
            return out
        except (KafkaError, ConnectionError) as e:
            if (isinstance(e, KafkaError) and not e.retriable) or attempt == attempts - 1:
                raise
            for tp in wanted:
                cluster.mark_stale(tp)
            await asyncio.sleep(retry_backoff_ms / 1000)
    raise AssertionError("unreachable")


PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1


async def elect_leaders(
    conn: Connection,
    election_type: int,
    partitions: list[tuple[str, int]] | None,
    timeout_ms: int = 30_000,
) -> dict[tuple[str, int], KafkaError | None]:
    """ElectLeaders, on the controller: per partition None (elected) or the error why not —
    ELECTION_NOT_NEEDED when the wanted leader already leads. With `partitions` None every
    partition is asked for, and only those that needed an election are answered. Raises
    NOT_CONTROLLER when the broker is not the controller."""
    version = conn.version_for(ElectLeadersRequest)
    if version == 0 and election_type != PREFERRED_ELECTION:
        raise KafkaError(error_codes.UNSUPPORTED_VERSION, "the broker has preferred elections only")
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        topics = [
            ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps)
            for t, ps in by_topic.items()
        ]
    request = ElectLeadersRequest(
        election_type=election_type, topic_partitions=topics, timeout_ms=timeout_ms
    )
    response = await conn.send(request, version)
    assert isinstance(response, ElectLeadersResponse)
    if version >= 1:
        _check(response.error_code)
    out: dict[tuple[str, int], KafkaError | None] = {}
    for result in response.replica_election_results:
        for p in result.partition_result:
            if p.error_code == error_codes.NOT_CONTROLLER.code:
                _check(p.error_code)
            out[(result.topic, p.partition_id)] = (
                None if p.error_code == 0 else KafkaError(for_code(p.error_code), p.error_message)
            )
    return out


@dataclass(frozen=True)
class PartitionReassignment:
    """A partition being moved: all its replicas now, and those being added and removed."""

    replicas: list[int]
    adding: list[int]
    removing: list[int]


async def alter_partition_reassignments(
    conn: Connection, targets: Mapping[tuple[str, int], list[int] | None]
) -> dict[tuple[str, int], KafkaError | None]:
    """Start (replicas) or cancel (None) partition moves; each partition's error or None."""
    by_topic: dict[str, list[AlterPartitionReassignmentsRequest.ReassignablePartition]] = {}
    for (topic, index), replicas in targets.items():
        by_topic.setdefault(topic, []).append(
            AlterPartitionReassignmentsRequest.ReassignablePartition(
                partition_index=index, replicas=None if replicas is None else list(replicas)
            )
        )
    request = AlterPartitionReassignmentsRequest(
        timeout_ms=30_000,
        topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
    )
    response = await conn.send(request)
    assert isinstance(response, AlterPartitionReassignmentsResponse)
    _check(response.error_code, response.error_message)
    return {
        (t.name, p.partition_index): (
            KafkaError(error_codes.for_code(p.error_code), p.error_message)
            if p.error_code
            else None
        )
        for t in response.responses
        for p in t.partitions
    }


async def list_partition_reassignments(
    conn: Connection, partitions: Iterable[tuple[str, int]] | None = None
) -> dict[tuple[str, int], PartitionReassignment]:
    """The moves in progress (of `partitions`; None: all)."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        topics = [
            ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(
                name=t, partition_indexes=ps
            )
            for t, ps in by_topic.items()
        ]
    response = await conn.send(ListPartitionReassignmentsRequest(timeout_ms=30_000, topics=topics))
    assert isinstance(response, ListPartitionReassignmentsResponse)
    _check(response.error_code, response.error_message)
    return {
        (t.name, p.partition_index): PartitionReassignment(
            list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)
        )
        for t in response.topics
        for p in t.partitions
    }
