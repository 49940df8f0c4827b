"""The group and offset APIs at every version, through raw requests to an embedded broker:
FindCoordinator (single and batched), OffsetCommit/OffsetFetch round trips, ListGroups,
DescribeGroups, DeleteGroups, OffsetDelete, and group state surviving a restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from riverlog.client.connection import Connection, parse_bootstrap
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.api import ApiMessage
from riverlog.server.dispatch import KAFKA_RELEASE_MAX_VERSIONS

OFFSETS_TOPIC = "__consumer_offsets"


def max_version(cls: type[ApiMessage]) -> int:
    return min(cls.MAX_VERSION, KAFKA_RELEASE_MAX_VERSIONS[cls.API_KEY])


def call(bootstrap: str, *requests: tuple[ApiMessage, int]) -> list[ApiMessage]:
    """Send requests one after another on one connection; their responses."""

    async def run() -> list[ApiMessage]:
        host, port = parse_bootstrap(bootstrap)[0]
        conn = await Connection.open(host, port)
        try:
            return [await conn.send(request, version) for request, version in requests]
        finally:
            await conn.close()

    return asyncio.run(run())


def one(bootstrap: str, request: ApiMessage, version: int) -> ApiMessage:
    return call(bootstrap, (request, version))[0]


def loaded(bootstrap: str, group: str) -> None:
    """Wait until the group's coordinator has loaded its offsets partition: a fresh broker's
    first FindCoordinator creates `__consumer_offsets`, whose load then takes a moment
    (COORDINATOR_LOAD_IN_PROGRESS meanwhile, which Kafka's clients retry)."""
    deadline = time.monotonic() + 20
    while True:
        found, described = call(
            bootstrap,
            (m.FindCoordinatorRequest(key=group), 0),
            (m.DescribeGroupsRequest(groups=[group]), 0),
        )
        assert isinstance(found, m.FindCoordinatorResponse)
        assert isinstance(described, m.DescribeGroupsResponse)
        loading = (
            error_codes.COORDINATOR_LOAD_IN_PROGRESS.code,
            error_codes.COORDINATOR_NOT_AVAILABLE.code,
        )
        if found.error_code == 0 and described.groups[0].error_code not in loading:
            return
        assert time.monotonic() < deadline, f"{group}'s coordinator never loaded"
        time.sleep(0.05)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    topic = m.CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1
    )
    response = one(bootstrap, m.CreateTopicsRequest(topics=[topic], timeout_ms=5000), 5)
    assert isinstance(response, m.CreateTopicsResponse)
    assert response.topics[0].error_code == 0


def commit(
    group: str, offsets: dict[tuple[str, int], int], *, metadata: str = "m", epoch: int = -1
) -> m.OffsetCommitRequest:
    by_topic: dict[str, list[m.OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            m.OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=index,
                committed_offset=offset,
                committed_leader_epoch=epoch,
                committed_metadata=metadata,
            )
        )
    return m.OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            m.OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=p)
            for t, p in by_topic.items()
        ],
    )


def commit_errors(response: ApiMessage) -> dict[tuple[str, int], int]:
    assert isinstance(response, m.OffsetCommitResponse)
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


def fetch_request(group: str, topics: dict[str, list[int]] | None, version: int) -> ApiMessage:
    if version >= 8:
        return m.OffsetFetchRequest(
            groups=[
                m.OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group,
                    topics=None
                    if topics is None
                    else [
                        m.OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                        for t, ps in topics.items()
                    ],
                )
            ]
        )
    return m.OffsetFetchRequest(
        group_id=group,
        topics=None
        if topics is None
        else [
            m.OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
            for t, ps in topics.items()
        ],
    )


def fetched(response: ApiMessage, version: int) -> dict[tuple[str, int], tuple[int, int, str]]:
    """(topic, partition) → (offset, leader epoch, metadata)."""
    assert isinstance(response, m.OffsetFetchResponse)
    if version >= 8:
        assert response.groups[0].error_code == 0
        topics: (
            list[m.OffsetFetchResponse.OffsetFetchResponseTopics]
            | list[m.OffsetFetchResponse.OffsetFetchResponseTopic]
        ) = response.groups[0].topics
    else:
        assert response.error_code == 0
        topics = response.topics
    return {
        (t.name, p.partition_index): (
            p.committed_offset,
            p.committed_leader_epoch,
            p.metadata or "",
        )
        for t in topics
        for p in t.partitions
        if p.error_code == 0
    }


def test_find_coordinator_at_every_version_creates_the_offsets_topic(
    riverlog_broker: EmbeddedBroker,
) -> None:
    bootstrap = riverlog_broker.bootstrap_servers
    host, port = parse_bootstrap(bootstrap)[0]
    for version in range(max_version(m.FindCoordinatorRequest) + 1):
        if version >= 4:
            request = m.FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"])
            response = one(bootstrap, request, version)
            assert isinstance(response, m.FindCoordinatorResponse)
            assert [
                (c.key, c.error_code, c.node_id, c.host, c.port) for c in response.coordinators
            ] == [
                ("a", 0, 0, host, port),
                ("b", 0, 0, host, port),
            ]
        else:
            response = one(bootstrap, m.FindCoordinatorRequest(key="a"), version)
            assert isinstance(response, m.FindCoordinatorResponse)
            assert (response.error_code, response.node_id, response.host, response.port) == (
                0,
                0,
                host,
                port,
            )
    broker_side = riverlog_broker.broker
    assert broker_side is not None
    topic = broker_side.topics.get(OFFSETS_TOPIC)
    assert topic is not None and topic.is_internal and len(topic.partitions) == 50
    assert topic.config["cleanup.policy"] == "compact"
    txn = one(bootstrap, m.FindCoordinatorRequest(key="t", key_type=1), 3)
    assert isinstance(txn, m.FindCoordinatorResponse)  # creates __transaction_state
    assert (txn.error_code, txn.node_id, txn.host, txn.port) == (0, 0, host, port)
    state = broker_side.topics.get("__transaction_state")
    assert state is not None and state.is_internal and len(state.partitions) == 50
    assert state.config["cleanup.policy"] == "compact"
    odd = one(bootstrap, m.FindCoordinatorRequest(key="t", key_type=9), 3)
    assert isinstance(odd, m.FindCoordinatorResponse)
    assert odd.error_code == error_codes.INVALID_REQUEST.code


@pytest.mark.parametrize("version", range(max_version(m.OffsetCommitRequest) + 1))
def test_offset_commit_and_fetch_round_trip(riverlog_broker: EmbeddedBroker, version: int) -> None:
    bootstrap = riverlog_broker.bootstrap_servers
    topic, group = f"t{version}", f"simple-{version}"
    create_topic(bootstrap, topic, 3)
    fetch_version = min(version, max_version(m.OffsetFetchRequest))
    loaded(bootstrap, group)
    commit_response, fetch_response, missing = call(
        bootstrap,
        (m.FindCoordinatorRequest(key=group), 0),
        (commit(group, {(topic, 0): 10, (topic, 2): 12}, epoch=4), version),
        (fetch_request(group, {topic: [0, 1, 2]}, fetch_version), fetch_version),
        (fetch_request("nobody", {topic: [0]}, fetch_version), fetch_version),
    )[1:]
    assert commit_errors(commit_response) == {(topic, 0): 0, (topic, 2): 0}
    epoch = 4 if version >= 6 and fetch_version >= 5 else -1
    assert fetched(fetch_response, fetch_version) == {
        (topic, 0): (10, epoch, "m"),
        (topic, 1): (-1, -1, ""),
        (topic, 2): (12, epoch, "m"),
    }
    assert fetched(missing, fetch_version) == {(topic, 0): (-1, -1, "")}
    if fetch_version >= 2:
        everything = one(bootstrap, fetch_request(group, None, fetch_version), fetch_version)
        assert set(fetched(everything, fetch_version)) == {(topic, 0), (topic, 2)}


def test_commit_errors_per_partition(riverlog_broker: EmbeddedBroker) -> None:
    bootstrap = riverlog_broker.bootstrap_servers
    create_topic(bootstrap, "known", 1)
    loaded(bootstrap, "g")
    _, response = call(
        bootstrap,
        (m.FindCoordinatorRequest(key="g"), 0),
        (commit("g", {("known", 0): 1, ("known", 5): 1, ("unknown", 0): 1}), 8),
    )
    assert commit_errors(response) == {
        ("known", 0): 0,
        ("known", 5): error_codes.UNKNOWN_TOPIC_OR_PARTITION.code,
        ("unknown", 0): error_codes.UNKNOWN_TOPIC_OR_PARTITION.code,
    }
    large = one(bootstrap, commit("g", {("known", 0): 1}, metadata="x" * 5000), 8)
    assert commit_errors(large) == {("known", 0): error_codes.OFFSET_METADATA_TOO_LARGE.code}
    with_generation = commit("nogroup", {("known", 0): 1})
    with_generation.generation_id_or_member_epoch = 3
    with_generation.member_id = "m"
    assert commit_errors(one(bootstrap, with_generation, 8)) == {
        ("known", 0): error_codes.ILLEGAL_GENERATION.code
    }


def test_list_describe_delete_groups(riverlog_broker: EmbeddedBroker) -> None:
    bootstrap = riverlog_broker.bootstrap_servers
    create_topic(bootstrap, "lt", 1)
    loaded(bootstrap, "listed")
    call(
        bootstrap,
        (m.FindCoordinatorRequest(key="listed"), 0),
        (commit("listed", {("lt", 0): 3}), 8),
    )
    for version in range(max_version(m.ListGroupsRequest) + 1):
        response = one(bootstrap, m.ListGroupsRequest(), version)
        assert isinstance(response, m.ListGroupsResponse)
        assert [g.group_id for g in response.groups] == ["listed"]
    empty_only = one(bootstrap, m.ListGroupsRequest(states_filter=["empty"]), 4)
    stable_only = one(bootstrap, m.ListGroupsRequest(states_filter=["Stable"]), 4)
    new_protocol = one(bootstrap, m.ListGroupsRequest(types_filter=["consumer"]), 5)
    assert isinstance(empty_only, m.ListGroupsResponse)
    assert [(g.group_id, g.group_state) for g in empty_only.groups] == [("listed", "Empty")]
    assert isinstance(stable_only, m.ListGroupsResponse) and stable_only.groups == []
    assert isinstance(new_protocol, m.ListGroupsResponse) and new_protocol.groups == []

    for version in range(max_version(m.DescribeGroupsRequest) + 1):
        request = m.DescribeGroupsRequest(
            groups=["listed", "ghost"], include_authorized_operations=True
        )
        response = one(bootstrap, request, version)
        assert isinstance(response, m.DescribeGroupsResponse)
        states = [(g.group_id, g.error_code, g.group_state, g.members) for g in response.groups]
        assert states == [("listed", 0, "Empty", []), ("ghost", 0, "Dead", [])]
        if version >= 3:
            assert response.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)

    delete = one(bootstrap, m.DeleteGroupsRequest(groups_names=["listed", "ghost"]), 2)
    assert isinstance(delete, m.DeleteGroupsResponse)
    assert [(r.group_id, r.error_code) for r in delete.results] == [
        ("listed", 0),
        ("ghost", error_codes.GROUP_ID_NOT_FOUND.code),
    ]
    after = one(bootstrap, fetch_request("listed", {"lt": [0]}, 8), 8)
    assert fetched(after, 8) == {("lt", 0): (-1, -1, "")}


def test_offset_delete(riverlog_broker: EmbeddedBroker) -> None:
    bootstrap = riverlog_broker.bootstrap_servers
    create_topic(bootstrap, "od", 2)
    loaded(bootstrap, "od-group")
    call(
        bootstrap,
        (m.FindCoordinatorRequest(key="od-group"), 0),
        (commit("od-group", {("od", 0): 1, ("od", 1): 2}), 8),
    )
    request = m.OffsetDeleteRequest(
        group_id="od-group",
        topics=[
            m.OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name="od",
                partitions=[m.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)],
            )
        ],
    )
    response = one(bootstrap, request, 0)
    assert isinstance(response, m.OffsetDeleteResponse) and response.error_code == 0
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [(0, 0)]
    left = one(bootstrap, fetch_request("od-group", None, 8), 8)
    assert fetched(left, 8) == {("od", 1): (2, -1, "m")}
    request.group_id = "no-such-group"
    missing = one(bootstrap, request, 0)
    assert isinstance(missing, m.OffsetDeleteResponse)
    assert missing.error_code == error_codes.GROUP_ID_NOT_FOUND.code


def join_request(member_id: str = "", instance: str | None = None) -> m.JoinGroupRequest:
    return m.JoinGroupRequest(
        group_id="persisted",
        session_timeout_ms=30_000,
        rebalance_timeout_ms=30_000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"sub")],
    )


def test_group_state_and_offsets_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with broker(data) as first:
        bootstrap = first.bootstrap_servers
        create_topic(bootstrap, "kept", 1)
        loaded(bootstrap, "persisted")
        _, needs_id = call(
            bootstrap, (m.FindCoordinatorRequest(key="persisted"), 0), (join_request(), 9)
        )
        assert isinstance(needs_id, m.JoinGroupResponse)
        assert needs_id.error_code == error_codes.MEMBER_ID_REQUIRED.code
        joined = one(bootstrap, join_request(needs_id.member_id), 9)
        assert isinstance(joined, m.JoinGroupResponse) and joined.error_code == 0
        assert joined.leader == joined.member_id and joined.generation_id == 1
        sync = m.SyncGroupRequest(
            group_id="persisted",
            generation_id=1,
            member_id=joined.member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[
                m.SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=joined.member_id, assignment=b"mine"
                )
            ],
        )
        synced = one(bootstrap, sync, 5)
        assert isinstance(synced, m.SyncGroupResponse) and synced.assignment == b"mine"
        commit_request = commit("persisted", {("kept", 0): 7})
        commit_request.generation_id_or_member_epoch = 1
        commit_request.member_id = joined.member_id
        assert commit_errors(one(bootstrap, commit_request, 8)) == {("kept", 0): 0}
    with broker(data) as second:
        bootstrap = second.bootstrap_servers
        described, offsets, beat = call(
            bootstrap,
            (m.DescribeGroupsRequest(groups=["persisted"]), 5),
            (fetch_request("persisted", {"kept": [0]}, 8), 8),
            (
                m.HeartbeatRequest(
                    group_id="persisted", generation_id=1, member_id=joined.member_id
                ),
                4,
            ),
        )
        assert isinstance(described, m.DescribeGroupsResponse)
        group = described.groups[0]
        assert (group.group_state, group.protocol_data) == ("Stable", "range")
        assert [(x.member_id, x.member_assignment) for x in group.members] == [
            (joined.member_id, b"mine")
        ]
        assert fetched(offsets, 8) == {("kept", 0): (7, -1, "m")}
        assert isinstance(beat, m.HeartbeatResponse) and beat.error_code == 0


def test_leave_group_single_and_batched(riverlog_broker: EmbeddedBroker) -> None:
    bootstrap = riverlog_broker.bootstrap_servers
    loaded(bootstrap, "persisted")
    _, joined = call(bootstrap, (m.FindCoordinatorRequest(key="persisted"), 0), (join_request(), 0))
    assert isinstance(joined, m.JoinGroupResponse) and joined.error_code == 0
    single = one(bootstrap, m.LeaveGroupRequest(group_id="persisted", member_id="ghost"), 0)
    assert isinstance(single, m.LeaveGroupResponse)
    assert single.error_code == error_codes.UNKNOWN_MEMBER_ID.code
    batched = m.LeaveGroupRequest(
        group_id="persisted",
        members=[
            m.LeaveGroupRequest.MemberIdentity(member_id=joined.member_id),
            m.LeaveGroupRequest.MemberIdentity(member_id="ghost"),
        ],
    )
    response = one(bootstrap, batched, 5)
    assert isinstance(response, m.LeaveGroupResponse) and response.error_code == 0
    assert [(x.member_id, x.error_code) for x in response.members] == [
        (joined.member_id, 0),
        ("ghost", error_codes.UNKNOWN_MEMBER_ID.code),
    ]
    state = one(bootstrap, m.DescribeGroupsRequest(groups=["persisted"]), 0)
    assert isinstance(state, m.DescribeGroupsResponse)
    assert state.groups[0].group_state == "Empty"


def test_offsets_of_a_standalone_group_expire_and_stay_expired(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with broker(data) as first:
        bootstrap = first.bootstrap_servers
        create_topic(bootstrap, "ret", 1)
        loaded(bootstrap, "old")
        call(
            bootstrap,
            (m.FindCoordinatorRequest(key="old"), 0),
            (commit("old", {("ret", 0): 4}), 8),
        )
        coordinator = first.broker.groups  # type: ignore[union-attr]
        retention = coordinator.retention_ms

        async def expire(after_ms: int) -> int:
            return coordinator.expire_offsets(coordinator.clock.wall_ms() + after_ms)

        def expire_on_broker(after_ms: int) -> int:
            return asyncio.run_coroutine_threadsafe(expire(after_ms), first.loop).result(10)

        assert expire_on_broker(retention - 60_000) == 0
        assert expire_on_broker(retention + 1) == 1
        listed = one(bootstrap, m.ListGroupsRequest(), 5)
        assert isinstance(listed, m.ListGroupsResponse) and listed.groups == []
    with broker(data) as second:
        bootstrap = second.bootstrap_servers
        after = one(bootstrap, fetch_request("old", {"ret": [0]}, 8), 8)
        assert fetched(after, 8) == {("ret", 0): (-1, -1, "")}


def test_bad_joins_and_stale_members_get_kafkas_error_codes(
    riverlog_broker: EmbeddedBroker,
) -> None:
    bootstrap = riverlog_broker.bootstrap_servers

    def join(**changes: object) -> m.JoinGroupRequest:
        request = join_request()
        request.group_id = "strict"
        for name, value in changes.items():
            setattr(request, name, value)
        return request

    loaded(bootstrap, "strict")
    first = call(bootstrap, (m.FindCoordinatorRequest(key="strict"), 0), (join(), 3))[1]
    assert isinstance(first, m.JoinGroupResponse) and first.error_code == 0
    other = [m.JoinGroupRequest.JoinGroupRequestProtocol(name="sticky", metadata=b"")]
    cases = [
        (join(group_id=""), error_codes.INVALID_GROUP_ID),
        (join(protocol_type="connect"), error_codes.INCONSISTENT_GROUP_PROTOCOL),
        (join(protocols=other), error_codes.INCONSISTENT_GROUP_PROTOCOL),
        (join(protocols=[]), error_codes.INCONSISTENT_GROUP_PROTOCOL),
        (join(session_timeout_ms=10), error_codes.INVALID_SESSION_TIMEOUT),
        (join(session_timeout_ms=1_800_001), error_codes.INVALID_SESSION_TIMEOUT),
        (join(member_id="not-a-member"), error_codes.UNKNOWN_MEMBER_ID),
    ]
    for request, expected in cases:
        response = one(bootstrap, request, 5)
        assert isinstance(response, m.JoinGroupResponse)
        assert response.error_code == expected.code, (request, expected.name)
    beat = m.HeartbeatRequest(group_id="strict", generation_id=7, member_id=first.member_id)
    stale, stranger = call(
        bootstrap,
        (beat, 4),
        (m.HeartbeatRequest(group_id="strict", generation_id=1, member_id="x"), 4),
    )
    assert isinstance(stale, m.HeartbeatResponse) and isinstance(stranger, m.HeartbeatResponse)
    assert stale.error_code == error_codes.ILLEGAL_GENERATION.code
    assert stranger.error_code == error_codes.UNKNOWN_MEMBER_ID.code


def test_a_load_that_ends_after_its_partition_was_unloaded_serves_nothing() -> None:
    """Leadership of an offsets partition left while it was being replayed: the replay's end
    must not make the broker the group's coordinator again (it would answer stale offsets)."""
    with broker(overrides={"offsets.topic.num.partitions": "1"}) as running:
        bootstrap = running.bootstrap_servers
        create_topic(bootstrap, "kept", 1)
        one(bootstrap, m.FindCoordinatorRequest(key="moving"), 0)
        assert commit_errors(one(bootstrap, commit("moving", {("kept", 0): 7}), 8)) == {
            ("kept", 0): 0
        }
        assert running.broker is not None
        groups = running.broker.groups

        def reload_then_lose_leadership() -> None:
            groups.unload_partition(0)
            groups.load_partition(0)  # the replay is a task: it runs after this returns
            groups.unload_partition(0)

        running.call(reload_then_lose_leadership)
        replays: list[int] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            running.call(lambda: replays.append(len(groups._load_tasks)))
            if replays[-1] == 0:
                break
        assert replays[-1] == 0, "the replay did not end"
        response = one(bootstrap, fetch_request("moving", None, 5), 5)
        assert isinstance(response, m.OffsetFetchResponse)
        assert response.error_code == error_codes.NOT_COORDINATOR.code
