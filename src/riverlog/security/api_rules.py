"""Kafka's authorization rule of each API (KafkaApis): the resource, the operation, the
error, and how denied entries are answered (security/authorization.py applies them).

Invariant: every API the broker serves has an entry in `RULES` (the transaction APIs' come
from security/txn_rules.py) or is named in `HANDLER_CHECKED`; `authorization.wrap` refuses
to start a broker serving any other API (tests/security/test_every_api_is_guarded.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from riverlog.protocol import messages as m
from riverlog.protocol.api import ApiMessage
from riverlog.security.acl import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_NAME,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    IDEMPOTENT_WRITE,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
)
from riverlog.security.rules import (
    ALL_ALLOWED,
    CLUSTER_DENIED,
    CONFIG_BROKER,
    CONFIG_BROKER_LOGGER,
    CONFIG_TOPIC,
    GROUP_DENIED,
    TOPIC_DENIED,
    TXN_DENIED,
    Answer,
    Rule,
    Split,
    Subject,
    group_of,
    split_list,
    topic_split,
    whole_rule,
)
from riverlog.security.txn_rules import TXN_RULES

# --- per-API error entries -------------------------------------------------------------


def _produce_denied(t: Any, error: int) -> Any:
    return m.ProduceResponse.TopicProduceResponse(
        name=t.name,
        topic_id=t.topic_id,
        partition_responses=[
            m.ProduceResponse.PartitionProduceResponse(
                index=p.index, error_code=error, base_offset=-1
            )
            for p in t.partition_data
        ],
    )


def _fetch_denied(t: Any, error: int) -> Any:
    return m.FetchResponse.FetchableTopicResponse(
        topic=t.topic,
        topic_id=t.topic_id,
        partitions=[
            m.FetchResponse.PartitionData(
                partition_index=p.partition, error_code=error, high_watermark=-1, records=None
            )
            for p in t.partitions
        ],
    )


def _list_offsets_denied(t: Any, error: int) -> Any:
    return m.ListOffsetsResponse.ListOffsetsTopicResponse(
        name=t.name,
        partitions=[
            m.ListOffsetsResponse.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=error, offset=-1, timestamp=-1
            )
            for p in t.partitions
        ],
    )


def _epoch_denied(t: Any, error: int) -> Any:
    return m.OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
        topic=t.topic,
        partitions=[
            m.OffsetForLeaderEpochResponse.EpochEndOffset(
                error_code=error, partition=p.partition, leader_epoch=-1, end_offset=-1
            )
            for p in t.partitions
        ],
    )


def _delete_records_denied(t: Any, error: int) -> Any:
    return m.DeleteRecordsResponse.DeleteRecordsTopicResult(
        name=t.name,
        partitions=[
            m.DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1, error_code=error
            )
            for p in t.partitions
        ],
    )


def _create_topic_denied(t: Any, error: int) -> Any:
    return m.CreateTopicsResponse.CreatableTopicResult(
        name=t.name,
        error_code=error,
        error_message="Authorization failed.",
        num_partitions=-1,
        replication_factor=-1,
    )


def _delete_topic_denied(t: Any, error: int) -> Any:
    if isinstance(t, str):
        return m.DeleteTopicsResponse.DeletableTopicResult(
            name=t, error_code=error, error_message="Authorization failed."
        )
    return m.DeleteTopicsResponse.DeletableTopicResult(
        name=t.name, topic_id=t.topic_id, error_code=error, error_message="Authorization failed."
    )


def _create_partitions_denied(t: Any, error: int) -> Any:
    return m.CreatePartitionsResponse.CreatePartitionsTopicResult(
        name=t.name, error_code=error, error_message="Authorization failed."
    )


def _commit_denied(t: Any, error: int) -> Any:
    return m.OffsetCommitResponse.OffsetCommitResponseTopic(
        name=t.name,
        topic_id=t.topic_id,
        partitions=[
            m.OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=error
            )
            for p in t.partitions
        ],
    )


def _offset_delete_denied(t: Any, error: int) -> Any:
    return m.OffsetDeleteResponse.OffsetDeleteResponseTopic(
        name=t.name,
        partitions=[
            m.OffsetDeleteResponse.OffsetDeleteResponsePartition(
                partition_index=p.partition_index, error_code=error
            )
            for p in t.partitions
        ],
    )


# --- special rules ---------------------------------------------------------------------


def _replica(subject: Subject, request: Any) -> int | None:
    """Replicas (replica_id >= 0) need ClusterAction, and then nothing per topic (0)."""
    replica = request.replica_id
    state = getattr(request, "replica_state", None)
    if state is not None and state.replica_id >= 0:
        replica = state.replica_id
    if replica < 0:
        return None
    return ALL_ALLOWED if subject.on_cluster(CLUSTER_ACTION) else TOPIC_DENIED


def _produce_whole(subject: Subject, request: Any) -> int | None:
    txn = request.transactional_id
    if txn is not None and not subject.may(WRITE, TRANSACTIONAL_ID, txn):
        return TXN_DENIED
    return None


def _group_read(subject: Subject, request: Any) -> int | None:
    return None if subject.may(READ, GROUP, request.group_id) else GROUP_DENIED


def _create_topics(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
    if subject.on_cluster(CREATE):
        return None
    return topic_split("topics", "name", CREATE, "topics", _create_topic_denied)(
        subject, request, version
    )


def _delete_topics(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
    attr = "topic_names" if version < 6 else "topics"
    entries = getattr(request, attr) or []

    def allowed(entry: Any) -> bool:  # v0-5: names; v6+: states with a name or an id
        if isinstance(entry, str):
            return subject.may(DELETE, TOPIC, entry)
        return subject.may_topic(DELETE, entry)

    ok, denied = split_list(entries, allowed)
    if not denied:
        return None
    setattr(request, attr, ok)
    answers = [_delete_topic_denied(t, TOPIC_DENIED) for t in denied]
    return lambda response: response.responses.extend(answers)


def _config_resource_ok(subject: Subject, operation: str, resource: Any) -> int | None:
    if resource.resource_type == CONFIG_TOPIC:
        return None if subject.may(operation, TOPIC, resource.resource_name) else TOPIC_DENIED
    if resource.resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER):
        return None if subject.on_cluster(operation) else CLUSTER_DENIED
    return None


def _configs(operation: str, response_attr: str, entry_cls: Any) -> Split:
    def split(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
        ok, answers = [], []
        for resource in request.resources:
            error = _config_resource_ok(subject, operation, resource)
            if error is None:
                ok.append(resource)
            else:
                answers.append(
                    entry_cls(
                        error_code=error,
                        error_message="Authorization failed.",
                        resource_type=resource.resource_type,
                        resource_name=resource.resource_name,
                    )
                )
        if not answers:
            return None
        request.resources = ok
        return lambda response: getattr(response, response_attr).extend(answers)

    return split


def _describe_groups(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
    ok, denied = split_list(request.groups, lambda g: subject.may(DESCRIBE, GROUP, g))
    if not denied:
        return None
    request.groups = ok
    answers = [
        m.DescribeGroupsResponse.DescribedGroup(
            error_code=GROUP_DENIED, group_id=g, group_state="", protocol_type="", protocol_data=""
        )
        for g in denied
    ]
    return lambda response: response.groups.extend(answers)


def _delete_groups(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
    ok, denied = split_list(request.groups_names, lambda g: subject.may(DELETE, GROUP, g))
    if not denied:
        return None
    request.groups_names = ok
    answers = [
        m.DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=GROUP_DENIED)
        for g in denied
    ]
    return lambda response: response.results.extend(answers)


def _coordinator_resource(key_type: int) -> str:
    return TRANSACTIONAL_ID if key_type == 1 else GROUP


def _find_coordinator(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
    kind = _coordinator_resource(request.key_type)
    error = TXN_DENIED if kind == TRANSACTIONAL_ID else GROUP_DENIED
    if version < 4:
        if subject.may(DESCRIBE, kind, request.key):
            return None
        denied = m.FindCoordinatorResponse(
            error_code=error, error_message="Authorization failed.", node_id=-1, host="", port=-1
        )
        raise Answer(denied)
    ok, denied_keys = split_list(request.coordinator_keys, lambda k: subject.may(DESCRIBE, kind, k))
    if not denied_keys:
        return None
    request.coordinator_keys = ok
    answers = [
        m.FindCoordinatorResponse.Coordinator(
            key=k,
            node_id=-1,
            host="",
            port=-1,
            error_code=error,
            error_message="Authorization failed.",
        )
        for k in denied_keys
    ]
    return lambda response: response.coordinators.extend(answers)


def _init_producer_id(subject: Subject, request: Any) -> ApiMessage | None:
    txn = request.transactional_id
    if txn is not None:
        ok, error = subject.may(WRITE, TRANSACTIONAL_ID, txn), TXN_DENIED
    else:
        # KIP-679: IdempotentWrite on the cluster, or Write on any topic
        ok = subject.on_cluster(IDEMPOTENT_WRITE) or subject.may_on_any(WRITE, TOPIC)
        error = CLUSTER_DENIED
    return (
        None
        if ok
        else m.InitProducerIdResponse(error_code=error, producer_id=-1, producer_epoch=-1)
    )


def _offset_fetch_check(subject: Subject, request: Any) -> ApiMessage | None:
    groups = [g.group_id for g in request.groups] if request.groups else [request.group_id]
    denied = [g for g in groups if not subject.may(DESCRIBE, GROUP, g)]
    if not denied:
        return None
    if request.groups:
        return m.OffsetFetchResponse(
            groups=[
                m.OffsetFetchResponse.OffsetFetchResponseGroup(group_id=g, error_code=GROUP_DENIED)
                for g in groups
            ]
        )
    return m.OffsetFetchResponse(error_code=GROUP_DENIED)


# --- hiding ----------------------------------------------------------------------------


def _hide_metadata(subject: Subject, request: Any, response: Any) -> None:
    if not request.topics:  # all topics (or all that were asked were denied): hide
        response.topics = [
            t
            for t in response.topics
            if t.error_code == TOPIC_DENIED or subject.may(DESCRIBE, TOPIC, t.name)
        ]
    for topic in response.topics:
        if getattr(request, "include_topic_authorized_operations", False) and topic.name:
            topic.topic_authorized_operations = subject.authorizer.operations(
                subject.principal, subject.host, TOPIC, topic.name
            )
    if getattr(request, "include_cluster_authorized_operations", False):
        response.cluster_authorized_operations = subject.authorizer.operations(
            subject.principal, subject.host, CLUSTER, CLUSTER_NAME
        )


def _metadata_split(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
    if not request.topics:
        return None
    creates = version < 4 or request.allow_auto_topic_creation
    may_create = not creates or subject.on_cluster(CREATE)

    def allowed(t: Any) -> bool:
        if not subject.may_topic(DESCRIBE, t):
            return False
        # Kafka: a topic auto-created by this request needs Create (on the cluster or it)
        name = t.name
        return (
            may_create or not name or subject.topic_exists(name) or subject.may(CREATE, TOPIC, name)
        )

    ok, denied = split_list(request.topics, allowed)
    if not denied:
        return None
    request.topics = ok
    answers = [
        m.MetadataResponse.MetadataResponseTopic(
            error_code=TOPIC_DENIED, name=t.name, partitions=[]
        )
        for t in denied
    ]
    if not ok and version == 0:  # an empty v0 list means every topic: answer the denied only
        return lambda response: setattr(response, "topics", answers)
    return lambda response: response.topics.extend(answers)


def _hide_groups(subject: Subject, request: Any, response: Any) -> None:
    if not subject.on_cluster(DESCRIBE):
        response.groups = [g for g in response.groups if subject.may(DESCRIBE, GROUP, g.group_id)]


def _offsets_seen(subject: Subject, topics: list[Any], asked: bool) -> list[Any]:
    """OffsetFetch's topics as the principal may see them: a topic asked for by name but
    not describable answers TOPIC_AUTHORIZATION_FAILED per partition; one listed because all
    were asked for is left out (Kafka's rule)."""
    seen = []
    for topic in topics:
        if subject.may(DESCRIBE, TOPIC, topic.name):
            seen.append(topic)
        elif asked:
            for partition in topic.partitions:
                partition.error_code = TOPIC_DENIED
                partition.committed_offset = -1
                partition.metadata = None
            seen.append(topic)
    return seen


def _hide_offsets(subject: Subject, request: Any, response: Any) -> None:
    response.topics = _offsets_seen(subject, response.topics, request.topics is not None)
    asked = {g.group_id: g.topics is not None for g in request.groups or []}
    for group in response.groups:
        group.topics = _offsets_seen(subject, group.topics, asked.get(group.group_id, False))


def _describe_groups_ops(subject: Subject, request: Any, response: Any) -> None:
    if request.include_authorized_operations:
        for group in response.groups:
            if group.error_code == 0:
                group.authorized_operations = subject.authorizer.operations(
                    subject.principal, subject.host, GROUP, group.group_id
                )


def _describe_cluster_ops(subject: Subject, request: Any, response: Any) -> None:
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = subject.authorizer.operations(
            subject.principal, subject.host, CLUSTER, CLUSTER_NAME
        )


def _alter_replica_log_dirs(subject: Subject, request: Any) -> ApiMessage | None:
    """Cluster ALTER, or CLUSTER_AUTHORIZATION_FAILED for every partition (Kafka's)."""
    if subject.may(ALTER, CLUSTER, CLUSTER_NAME):
        return None
    results: dict[str, list[int]] = {}
    for target in request.dirs:
        for topic in target.topics:
            results.setdefault(topic.name, []).extend(topic.partitions)
    return m.AlterReplicaLogDirsResponse(
        results=[
            m.AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult(
                topic_name=name,
                partitions=[
                    m.AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult(
                        partition_index=p, error_code=CLUSTER_DENIED
                    )
                    for p in partitions
                ],
            )
            for name, partitions in results.items()
        ]
    )


def _cluster(operation: str, response: type[ApiMessage]) -> Rule:
    return Rule(check=whole_rule(operation, CLUSTER_DENIED, response))


def _group(response: type[ApiMessage]) -> Rule:
    return Rule(check=whole_rule(READ, GROUP_DENIED, response, group_of))


RULES: dict[int, Rule] = {
    m.ProduceRequest.API_KEY: Rule(
        split=topic_split(
            "topic_data", "name", WRITE, "responses", _produce_denied, whole=_produce_whole
        )
    ),
    m.FetchRequest.API_KEY: Rule(
        split=topic_split("topics", "topic", READ, "responses", _fetch_denied, whole=_replica)
    ),
    m.ListOffsetsRequest.API_KEY: Rule(
        split=topic_split("topics", "name", DESCRIBE, "topics", _list_offsets_denied)
    ),
    m.OffsetForLeaderEpochRequest.API_KEY: Rule(
        split=topic_split("topics", "topic", DESCRIBE, "topics", _epoch_denied, whole=_replica)
    ),
    m.DeleteRecordsRequest.API_KEY: Rule(
        split=topic_split("topics", "name", DELETE, "topics", _delete_records_denied)
    ),
    m.MetadataRequest.API_KEY: Rule(split=_metadata_split, after=_hide_metadata),
    m.CreateTopicsRequest.API_KEY: Rule(split=_create_topics),
    m.DeleteTopicsRequest.API_KEY: Rule(split=_delete_topics),
    m.CreatePartitionsRequest.API_KEY: Rule(
        split=topic_split("topics", "name", ALTER, "results", _create_partitions_denied)
    ),
    m.DescribeConfigsRequest.API_KEY: Rule(
        split=_configs(DESCRIBE_CONFIGS, "results", m.DescribeConfigsResponse.DescribeConfigsResult)
    ),
    m.AlterConfigsRequest.API_KEY: Rule(
        split=_configs(
            ALTER_CONFIGS, "responses", m.AlterConfigsResponse.AlterConfigsResourceResponse
        )
    ),
    m.IncrementalAlterConfigsRequest.API_KEY: Rule(
        split=_configs(
            ALTER_CONFIGS,
            "responses",
            m.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
        )
    ),
    m.OffsetCommitRequest.API_KEY: Rule(
        split=topic_split("topics", "name", READ, "topics", _commit_denied, whole=_group_read)
    ),
    m.OffsetFetchRequest.API_KEY: Rule(check=_offset_fetch_check, after=_hide_offsets),
    m.OffsetDeleteRequest.API_KEY: Rule(
        check=whole_rule(DELETE, GROUP_DENIED, m.OffsetDeleteResponse, group_of),
        split=topic_split("topics", "name", READ, "topics", _offset_delete_denied),
    ),
    m.JoinGroupRequest.API_KEY: _group(m.JoinGroupResponse),
    m.SyncGroupRequest.API_KEY: _group(m.SyncGroupResponse),
    m.HeartbeatRequest.API_KEY: _group(m.HeartbeatResponse),
    m.LeaveGroupRequest.API_KEY: _group(m.LeaveGroupResponse),
    m.DescribeGroupsRequest.API_KEY: Rule(split=_describe_groups, after=_describe_groups_ops),
    m.DeleteGroupsRequest.API_KEY: Rule(split=_delete_groups),
    m.ListGroupsRequest.API_KEY: Rule(after=_hide_groups),
    m.FindCoordinatorRequest.API_KEY: Rule(split=_find_coordinator),
    m.InitProducerIdRequest.API_KEY: Rule(check=_init_producer_id),
    m.DescribeClusterRequest.API_KEY: Rule(after=_describe_cluster_ops),
    m.DescribeLogDirsRequest.API_KEY: _cluster(DESCRIBE, m.DescribeLogDirsResponse),
    m.AlterReplicaLogDirsRequest.API_KEY: Rule(check=_alter_replica_log_dirs),
    m.ElectLeadersRequest.API_KEY: _cluster(ALTER, m.ElectLeadersResponse),
    m.AlterPartitionReassignmentsRequest.API_KEY: _cluster(
        ALTER, m.AlterPartitionReassignmentsResponse
    ),
    m.ListPartitionReassignmentsRequest.API_KEY: _cluster(
        DESCRIBE, m.ListPartitionReassignmentsResponse
    ),
    m.LeaderAndIsrRequest.API_KEY: _cluster(CLUSTER_ACTION, m.LeaderAndIsrResponse),
    m.UpdateMetadataRequest.API_KEY: _cluster(CLUSTER_ACTION, m.UpdateMetadataResponse),
    m.StopReplicaRequest.API_KEY: _cluster(CLUSTER_ACTION, m.StopReplicaResponse),
    m.ControlledShutdownRequest.API_KEY: _cluster(CLUSTER_ACTION, m.ControlledShutdownResponse),
    m.DescribeAclsRequest.API_KEY: _cluster(DESCRIBE, m.DescribeAclsResponse),
    m.DescribeUserScramCredentialsRequest.API_KEY: _cluster(
        DESCRIBE, m.DescribeUserScramCredentialsResponse
    ),
    **TXN_RULES,
}

HANDLER_CHECKED: frozenset[int] = frozenset(
    {
        # before or during authentication: nothing to authorize (Kafka's too)
        m.ApiVersionsRequest.API_KEY,
        m.SaslHandshakeRequest.API_KEY,
        m.SaslAuthenticateRequest.API_KEY,
        # Alter on the cluster, checked per entry in their handlers (handlers/acls.py),
        # as Kafka answers them
        m.CreateAclsRequest.API_KEY,
        m.DeleteAclsRequest.API_KEY,
        m.AlterUserScramCredentialsRequest.API_KEY,
        # DescribeConfigs / AlterConfigs on the cluster, checked in handlers/client_quotas.py
        m.DescribeClientQuotasRequest.API_KEY,
        m.AlterClientQuotasRequest.API_KEY,
    }
)
"""The APIs with no rule here because their handlers authorize (or there is nothing to
authorize). Adding an API to the broker means adding it to `RULES` or, with a reason,
here."""
