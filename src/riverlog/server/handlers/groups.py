"""Consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
ListGroups, DescribeGroups, DeleteGroups — request and response mapping only.

The rules live in `coordinator/` and the waiting in `server/group_coordinator.py`; these
handlers translate between wire versions (v0 JoinGroup has no rebalance timeout; v4+ asks for
a member id first; v5+ carries group.instance.id; LeaveGroup v3+ batches members; non-nullable
strings before the versions that made them nullable) and check first that this broker is the
group's coordinator (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS otherwise).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from riverlog.coordinator.group_manager import JoinRequest
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.error_codes import KafkaError
from riverlog.server.authorized_operations import ResourceType, authorized_operations
from riverlog.server.dispatch import RequestContext
from riverlog.server.group_coordinator import OFFSETS_TOPIC
from riverlog.server.transaction_coordinator import TRANSACTION_TOPIC

if TYPE_CHECKING:
    from riverlog.server.broker import Broker
    from riverlog.server.group_coordinator import GroupCoordinator

GROUP_KEY = 0
TRANSACTION_KEY = 1
OFFSETS_TOPIC_WAIT_S = 5.0


def _client_host(ctx: RequestContext) -> str:
    """Kafka's form of the client address: "/" + IP."""
    peer = ctx.connection.peer if ctx.connection is not None else "?"
    return "/" + peer.rpartition(":")[0] if ":" in peer else peer


# --- FindCoordinator ---------------------------------------------------------------------


def _coordinator(
    broker: Broker, key: str, key_type: int, listener: str | None = None
) -> tuple[error_codes.ErrorCode, str | None, int, str, int]:
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return error_codes.INVALID_REQUEST, f"Unknown coordinator key type {key_type}", -1, "", -1
    # The leader of the group's __consumer_offsets partition, or of the transactional id's
    # __transaction_state partition.
    try:
        topic, partition = _coordinator_partition(broker, key, key_type)
    except KafkaError as e:
        return error_codes.COORDINATOR_NOT_AVAILABLE, e.message, -1, "", -1
    leader = broker.metadata.leader_of(topic, partition)
    info = broker.metadata.brokers.get(leader)
    info = info.on(listener) if info is not None else None  # the client's listener
    if info is None:
        return error_codes.COORDINATOR_NOT_AVAILABLE, None, -1, "", -1
    return error_codes.NONE, None, leader, info.host, info.port


def _coordinator_partition(broker: Broker, key: str, key_type: int) -> tuple[str, int]:
    if key_type == TRANSACTION_KEY:
        broker.transactions.ensure_topic()
        return TRANSACTION_TOPIC, broker.transactions.partition_of(key)
    broker.groups.ensure_offsets_topic()
    return OFFSETS_TOPIC, broker.groups.partition_of(key)


def handle_find_coordinator(
    broker: Broker, ctx: RequestContext
) -> m.FindCoordinatorResponse | Awaitable[m.FindCoordinatorResponse]:
    """The first group request creates `__consumer_offsets`; the answer then waits (at
    most `OFFSETS_TOPIC_WAIT_S`) for its leaders, rather than sending every new client
    into a COORDINATOR_NOT_AVAILABLE retry."""
    request = ctx.request.body
    assert isinstance(request, m.FindCoordinatorRequest)
    topic = {GROUP_KEY: OFFSETS_TOPIC, TRANSACTION_KEY: TRANSACTION_TOPIC}.get(request.key_type)
    if topic is not None and broker.topics.get(topic) is None:
        try:
            _coordinator_partition(broker, "", request.key_type)
        except KafkaError:
            pass  # each key is answered with the error below
        else:
            return _find_coordinator_when_led(broker, ctx, topic)
    return _find_coordinator(broker, ctx)


async def _find_coordinator_when_led(
    broker: Broker, ctx: RequestContext, topic: str
) -> m.FindCoordinatorResponse:
    await broker.wait_for_topic(topic, exists=True, timeout_s=OFFSETS_TOPIC_WAIT_S)
    return _find_coordinator(broker, ctx)


def _find_coordinator(broker: Broker, ctx: RequestContext) -> m.FindCoordinatorResponse:
    listener = ctx.connection.listener if ctx.connection is not None else None
    request = ctx.request.body
    assert isinstance(request, m.FindCoordinatorRequest)
    if ctx.version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node, host, port = _coordinator(broker, key, request.key_type, listener)
            coordinators.append(
                m.FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=node,
                    host=host,
                    port=port,
                    error_code=error.code,
                    error_message=message,
                )
            )
        return m.FindCoordinatorResponse(coordinators=coordinators)
    error, message, node, host, port = _coordinator(broker, request.key, request.key_type, listener)
    return m.FindCoordinatorResponse(
        error_code=error.code, error_message=message, node_id=node, host=host, port=port
    )


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ---------------------------------------


def _serving_error(groups: GroupCoordinator, group_id: str) -> error_codes.ErrorCode | None:
    if not group_id:
        return error_codes.INVALID_GROUP_ID
    return groups.coordinator_error(group_id)


async def handle_join_group(broker: Broker, ctx: RequestContext) -> m.JoinGroupResponse:
    request = ctx.request.body
    assert isinstance(request, m.JoinGroupRequest)
    version = ctx.version
    no_name = None if version >= 7 else ""
    error = _serving_error(broker.groups, request.group_id)
    if error is not None:
        return m.JoinGroupResponse(
            error_code=error.code,
            generation_id=-1,
            protocol_name=no_name,
            member_id=request.member_id,
        )
    rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
    result = await broker.groups.join(
        JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 5 else None,
            client_id=ctx.client_id or "",
            client_host=_client_host(ctx),
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout,
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            require_known_member_id=version >= 4,
        )
    )
    return m.JoinGroupResponse(
        error_code=result.error.code,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if result.protocol_name is not None else no_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            m.JoinGroupResponse.JoinGroupResponseMember(
                member_id=j.member_id, group_instance_id=j.group_instance_id, metadata=j.metadata
            )
            for j in result.members
        ],
    )


async def handle_sync_group(broker: Broker, ctx: RequestContext) -> m.SyncGroupResponse:
    request = ctx.request.body
    assert isinstance(request, m.SyncGroupRequest)
    error = _serving_error(broker.groups, request.group_id)
    if error is not None:
        return m.SyncGroupResponse(error_code=error.code)
    v5 = ctx.version >= 5
    result = await broker.groups.sync(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if ctx.version >= 3 else None,
        (request.protocol_type if v5 else None, request.protocol_name if v5 else None),
        {a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return m.SyncGroupResponse(
        error_code=result.error.code,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


def handle_heartbeat(broker: Broker, ctx: RequestContext) -> m.HeartbeatResponse:
    request = ctx.request.body
    assert isinstance(request, m.HeartbeatRequest)
    error = _serving_error(broker.groups, request.group_id) or broker.groups.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if ctx.version >= 3 else None,
    )
    return m.HeartbeatResponse(error_code=error.code)


def handle_leave_group(broker: Broker, ctx: RequestContext) -> m.LeaveGroupResponse:
    request = ctx.request.body
    assert isinstance(request, m.LeaveGroupRequest)
    batched = ctx.version >= 3
    if batched:
        identities = [(x.member_id, x.group_instance_id) for x in request.members]
    else:
        identities = [(request.member_id, None)]
    error = _serving_error(broker.groups, request.group_id)
    if error is not None:
        return m.LeaveGroupResponse(error_code=error.code)
    errors = broker.groups.leave(request.group_id, identities)
    if not batched:
        return m.LeaveGroupResponse(error_code=errors[0].code)
    return m.LeaveGroupResponse(
        members=[
            m.LeaveGroupResponse.MemberResponse(
                member_id=member_id, group_instance_id=instance_id, error_code=e.code
            )
            for (member_id, instance_id), e in zip(identities, errors, strict=True)
        ]
    )


# --- ListGroups / DescribeGroups / DeleteGroups --------------------------------------------


def handle_list_groups(broker: Broker, ctx: RequestContext) -> m.ListGroupsResponse:
    request = ctx.request.body
    assert isinstance(request, m.ListGroupsRequest)
    groups = broker.groups
    states = {s.lower() for s in request.states_filter or []} if ctx.version >= 4 else set()
    types = {t.lower() for t in request.types_filter or []} if ctx.version >= 5 else set()
    listed = []
    if not types or "classic" in types:
        for group in groups.manager:
            if groups.coordinator_error(group.group_id) is not None:
                continue
            if states and group.state.value.lower() not in states:
                continue
            listed.append(
                m.ListGroupsResponse.ListedGroup(
                    group_id=group.group_id,
                    protocol_type=group.protocol_type or "",
                    group_state=group.state.value,
                    group_type="classic",
                )
            )
    error = error_codes.COORDINATOR_LOAD_IN_PROGRESS if groups.loading() else error_codes.NONE
    return m.ListGroupsResponse(error_code=error.code, groups=listed)


def handle_describe_groups(broker: Broker, ctx: RequestContext) -> m.DescribeGroupsResponse:
    request = ctx.request.body
    assert isinstance(request, m.DescribeGroupsRequest)
    groups = broker.groups
    asked = ctx.version >= 3 and request.include_authorized_operations
    described = []
    for group_id in request.groups:
        operations = authorized_operations(ResourceType.GROUP, group_id, asked)
        error = groups.coordinator_error(group_id)
        summary = groups.manager.summary(group_id) if error is None else None
        if summary is None:
            described.append(
                m.DescribeGroupsResponse.DescribedGroup(
                    error_code=(error or error_codes.NONE).code,
                    group_id=group_id,
                    group_state="Dead",
                    authorized_operations=operations,
                )
            )
            continue
        described.append(
            m.DescribeGroupsResponse.DescribedGroup(
                group_id=group_id,
                group_state=summary.state.value,
                protocol_type=summary.protocol_type,
                protocol_data=summary.protocol,
                members=[
                    m.DescribeGroupsResponse.DescribedGroupMember(
                        member_id=s.member_id,
                        group_instance_id=s.group_instance_id,
                        client_id=s.client_id,
                        client_host=s.client_host,
                        member_metadata=s.metadata,
                        member_assignment=s.assignment,
                    )
                    for s in summary.members
                ],
                authorized_operations=operations,
            )
        )
    return m.DescribeGroupsResponse(groups=described)


def handle_delete_groups(broker: Broker, ctx: RequestContext) -> m.DeleteGroupsResponse:
    request = ctx.request.body
    assert isinstance(request, m.DeleteGroupsRequest)
    groups = broker.groups
    results = []
    for group_id in request.groups_names:
        error = groups.coordinator_error(group_id) or groups.delete_group(group_id)
        results.append(
            m.DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error.code)
        )
    return m.DeleteGroupsResponse(results=results)
