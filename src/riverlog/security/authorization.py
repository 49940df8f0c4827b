"""Which operation on which resource each API needs, checked around its handler.

`wrap(request_cls, handler)` returns the handler guarded by the API's rule; APIs without a
rule (ApiVersions, SASL, DescribeCluster) pass unchecked. Rules are Kafka's (KafkaApis):

- whole-request rules: one resource per request (the cluster for inter-broker and admin
  APIs, the group for JoinGroup/SyncGroup/Heartbeat/LeaveGroup, the transactional id); a
  denied request is answered with the API's response carrying Kafka's error and the handler
  never runs (no side effect);
- per-entry rules: the request's topics (or groups, config resources, coordinator keys) are
  split into allowed and denied; the handler sees only the allowed ones and the denied ones
  are answered with TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED entries merged into its
  response — so a denied entry has no side effect and the rest of the request still works;
- hiding rules: Metadata for all topics and ListGroups leave out what the principal may
  not Describe; OffsetFetch for all topics likewise.

The principal and host come from the connection (`network.Connection.principal`,
`client_host`). Each check is one `Authorizer.allowed` call per resource, asked once per
resource per request.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from riverlog.protocol import error_codes
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
from riverlog.security.authorizer import Authorizer

if TYPE_CHECKING:
    from riverlog.server.dispatch import Handler, RequestContext, Response

TOPIC_DENIED = error_codes.TOPIC_AUTHORIZATION_FAILED.code
GROUP_DENIED = error_codes.GROUP_AUTHORIZATION_FAILED.code
CLUSTER_DENIED = error_codes.CLUSTER_AUTHORIZATION_FAILED.code
TXN_DENIED = error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8
ALL_ALLOWED = 0


class Subject:
    """Who asks, as the authorizer needs it (`topic_name`: a topic's name from its id, as
    Fetch v13+, Metadata and DeleteTopics v6 may name topics)."""

    __slots__ = ("authorizer", "host", "principal", "topic_name")

    def __init__(
        self,
        principal: str,
        host: str,
        authorizer: Authorizer,
        topic_name: Callable[[uuid.UUID], str | None],
    ) -> None:
        self.principal = principal
        self.host = host
        self.authorizer = authorizer
        self.topic_name = topic_name

    def name_of(self, entry: Any, name_attr: str) -> str | None:
        """The topic an entry names, by name or by id; None for an unknown id (the handler
        answers UNKNOWN_TOPIC_ID)."""
        name = getattr(entry, name_attr)
        if name:
            return str(name)
        topic_id = getattr(entry, "topic_id", None)
        return self.topic_name(topic_id) if topic_id is not None else None

    def may_topic(self, operation: str, entry: Any, name_attr: str = "name") -> bool:
        name = self.name_of(entry, name_attr)
        return name is None or self.may(operation, TOPIC, name)

    def may(self, operation: str, resource_type: str, name: str) -> bool:
        return self.authorizer.allowed(self.principal, self.host, operation, resource_type, name)

    def on_cluster(self, operation: str) -> bool:
        return self.may(operation, CLUSTER, CLUSTER_NAME)


# A check: (subject, request) → None to let the handler run, or the response to answer.
Check = Callable[[Subject, Any], "ApiMessage | None"]
# A per-entry rule: (subject, request, version) → error entries to merge into the response
# (the request is left holding the allowed entries only), and the merge function.
Split = Callable[[Subject, Any, int], "Callable[[Any], None] | None"]


def _whole(
    operation: str,
    error: int,
    response: type[ApiMessage],
    resource: Callable[[Any], tuple[str, str]] | None = None,
) -> Check:
    def check(subject: Subject, request: Any) -> ApiMessage | None:
        kind, name = resource(request) if resource else (CLUSTER, CLUSTER_NAME)
        if subject.may(operation, kind, name):
            return None
        return response(error_code=error)  # type: ignore[call-arg]

    return check


def _group_of(request: Any) -> tuple[str, str]:
    return GROUP, request.group_id


def _split_list(items: list[Any], allowed: Callable[[Any], bool]) -> tuple[list[Any], list[Any]]:
    ok: list[Any] = []
    denied: list[Any] = []
    for item in items:
        (ok if allowed(item) else denied).append(item)
    return ok, denied


def _topic_split(
    list_attr: str,
    name_attr: str,
    operation: str,
    response_attr: str,
    denied_entry: Callable[[Any, int], Any],
    *,
    whole: Callable[[Subject, Any], int | None] | None = None,
) -> Split:
    """Per-topic split of `request.<list_attr>` (entries named by `<name_attr>`);
    `whole(subject, request)`, when given, may deny every entry with one error first, or
    allow every one (`ALL_ALLOWED`)."""

    def split(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
        entries = getattr(request, list_attr)
        if entries is None:
            return None
        error = whole(subject, request) if whole is not None else None
        if error == ALL_ALLOWED:
            return None
        if error is not None:
            ok: list[Any] = []
            denied = list(entries)
        else:
            may = subject.may_topic
            if all(may(operation, e, name_attr) for e in entries):
                return None  # the common case: nothing to split
            error = TOPIC_DENIED
            ok, denied = _split_list(entries, lambda e: may(operation, e, name_attr))
        setattr(request, list_attr, ok)
        answers = [denied_entry(e, error) for e in denied]

        def merge(response: Any) -> None:
            getattr(response, response_attr).extend(answers)

        return merge

    return split


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
    return _topic_split("topics", "name", CREATE, "topics", _create_topic_denied)(
        subject, request, version
    )


def _delete_topics(subject: Subject, request: Any, version: int) -> Callable[[Any], None] | None:
    attr = "topic_names" if version < 6 else "topics"
    entries = getattr(request, attr) or []

    def allowed(entry: Any) -> bool:  # v0-5: names; v6+: states with a name or an id
        if isinstance(entry, str):
            return subject.may(DELETE, TOPIC, entry)
        return subject.may_topic(DELETE, entry)

    ok, denied = _split_list(entries, allowed)
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
    ok, denied = _split_list(request.groups, lambda g: subject.may(DESCRIBE, GROUP, g))
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
    ok, denied = _split_list(request.groups_names, lambda g: subject.may(DELETE, GROUP, g))
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
        raise _Answer(denied)
    ok, denied_keys = _split_list(
        request.coordinator_keys, lambda k: subject.may(DESCRIBE, kind, k)
    )
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
        ok, error = subject.on_cluster(IDEMPOTENT_WRITE), CLUSTER_DENIED
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


class _Answer(Exception):
    """A per-entry rule that decided to answer the whole request itself."""

    def __init__(self, response: ApiMessage) -> None:
        self.response = response


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
    ok, denied = _split_list(request.topics, lambda t: subject.may_topic(DESCRIBE, t))
    if version >= 4 and request.allow_auto_topic_creation and not subject.on_cluster(CREATE):
        request.allow_auto_topic_creation = False  # Kafka: auto-creation needs Create
    if not denied:
        return None
    request.topics = ok
    answers = [
        m.MetadataResponse.MetadataResponseTopic(
            error_code=TOPIC_DENIED, name=t.name, partitions=[]
        )
        for t in denied
    ]
    return lambda response: response.topics.extend(answers)


def _hide_groups(subject: Subject, request: Any, response: Any) -> None:
    if not subject.on_cluster(DESCRIBE):
        response.groups = [g for g in response.groups if subject.may(DESCRIBE, GROUP, g.group_id)]


def _hide_offsets(subject: Subject, request: Any, response: Any) -> None:
    response.topics = [t for t in response.topics if subject.may(DESCRIBE, TOPIC, t.name)]
    for group in response.groups:
        group.topics = [t for t in group.topics if subject.may(DESCRIBE, TOPIC, t.name)]


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


@dataclass(frozen=True)
class Rule:
    check: Check | None = None
    split: Split | None = None
    after: Callable[[Subject, Any, Any], None] | None = None


def _cluster(operation: str, response: type[ApiMessage]) -> Rule:
    return Rule(check=_whole(operation, CLUSTER_DENIED, response))


def _group(response: type[ApiMessage]) -> Rule:
    return Rule(check=_whole(READ, GROUP_DENIED, response, _group_of))


RULES: dict[int, Rule] = {
    m.ProduceRequest.API_KEY: Rule(
        split=_topic_split(
            "topic_data", "name", WRITE, "responses", _produce_denied, whole=_produce_whole
        )
    ),
    m.FetchRequest.API_KEY: Rule(
        split=_topic_split("topics", "topic", READ, "responses", _fetch_denied, whole=_replica)
    ),
    m.ListOffsetsRequest.API_KEY: Rule(
        split=_topic_split("topics", "name", DESCRIBE, "topics", _list_offsets_denied)
    ),
    m.OffsetForLeaderEpochRequest.API_KEY: Rule(
        split=_topic_split("topics", "topic", DESCRIBE, "topics", _epoch_denied, whole=_replica)
    ),
    m.DeleteRecordsRequest.API_KEY: Rule(
        split=_topic_split("topics", "name", DELETE, "topics", _delete_records_denied)
    ),
    m.MetadataRequest.API_KEY: Rule(split=_metadata_split, after=_hide_metadata),
    m.CreateTopicsRequest.API_KEY: Rule(split=_create_topics),
    m.DeleteTopicsRequest.API_KEY: Rule(split=_delete_topics),
    m.CreatePartitionsRequest.API_KEY: Rule(
        split=_topic_split("topics", "name", ALTER, "results", _create_partitions_denied)
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
        split=_topic_split("topics", "name", READ, "topics", _commit_denied, whole=_group_read)
    ),
    m.OffsetFetchRequest.API_KEY: Rule(check=_offset_fetch_check, after=_hide_offsets),
    m.OffsetDeleteRequest.API_KEY: Rule(
        check=_whole(DELETE, GROUP_DENIED, m.OffsetDeleteResponse, _group_of),
        split=_topic_split("topics", "name", READ, "topics", _offset_delete_denied),
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
}
"""CreateAcls, DeleteAcls and AlterUserScramCredentials check Alter on the cluster in their
handlers (per entry, as Kafka answers them)."""


def _no_ids(topic_id: uuid.UUID) -> str | None:
    return None


def subject_of(
    ctx: RequestContext,
    authorizer: Authorizer,
    topic_name: Callable[[uuid.UUID], str | None] = _no_ids,
) -> Subject | None:
    conn = ctx.connection
    if conn is None:
        return None  # not from the network: the broker itself
    return Subject(conn.principal, conn.client_host, authorizer, topic_name)


def wrap(
    api_key: int,
    handler: Handler,
    authorizer: Authorizer,
    topic_name: Callable[[uuid.UUID], str | None],
) -> Handler:
    """`handler` guarded by the API's rule (unchanged for APIs without one)."""
    rule = RULES.get(api_key)
    if rule is None:
        return handler

    @functools.wraps(handler)
    def guarded(ctx: RequestContext) -> Response | Awaitable[Response]:
        subject = subject_of(ctx, authorizer, topic_name)
        if subject is None:
            return handler(ctx)
        request = ctx.request.body
        if rule.check is not None:
            denied = rule.check(subject, request)
            if denied is not None:
                return denied
        merge = None
        if rule.split is not None:
            try:
                merge = rule.split(subject, request, ctx.version)
            except _Answer as answer:
                return answer.response
        result = handler(ctx)
        if merge is None and rule.after is None:
            return result
        if result is None or isinstance(result, ApiMessage):
            return _finish(result, merge, rule, subject, request)
        return _finish_later(result, merge, rule, subject, request)

    return guarded


def _finish(
    result: Response,
    merge: Callable[[Any], None] | None,
    rule: Rule,
    subject: Subject,
    request: Any,
) -> Response:
    if result is not None:
        if merge is not None:
            merge(result)
        if rule.after is not None:
            rule.after(subject, request, result)
    return result


async def _finish_later(
    result: Awaitable[Response],
    merge: Callable[[Any], None] | None,
    rule: Rule,
    subject: Subject,
    request: Any,
) -> Response:
    return _finish(await result, merge, rule, subject, request)
