"""Consumer group administration: find the coordinator, list and describe groups, read,
commit and delete committed offsets, delete groups. Errors are `KafkaError`s.

Group requests go to the group's coordinator (FindCoordinator), which may be another broker
than the one the caller connected to; `GroupAdmin` opens that connection when needed.
Commits made here are "simple" commits (generation -1, no member id) as Kafka's admin
client makes them: the broker accepts them only while the group has no active members.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from riverlog.client.cluster import Cluster
from riverlog.client.connection import Connection
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.messages import (
    ConsumerProtocolAssignment,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

RETRIABLE_LOOKUP = (error_codes.COORDINATOR_NOT_AVAILABLE, error_codes.COORDINATOR_LOAD_IN_PROGRESS)


def _raise_for(code: int, message: str | None = None) -> None:
    if code != 0:
        raise KafkaError(for_code(code), message)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: dict[str, list[int]]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription] = field(default_factory=list)


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """A consumer-protocol member assignment; empty for other protocols or bad bytes."""
    if len(data) < 2:
        return {}
    view = memoryview(data)
    version = min(
        int.from_bytes(view[:2], "big", signed=True), ConsumerProtocolAssignment.MAX_VERSION
    )
    try:
        assignment, _ = ConsumerProtocolAssignment.read_from(view, 2, max(version, 0))
    except ProtocolError:
        return {}
    return {tp.topic: sorted(tp.partitions) for tp in assignment.assigned_partitions}


class GroupAdmin:
    """Group operations for one group at a time, through the group's coordinator.

    `bootstrap` is a connection to any broker, or a `Cluster` to take one from (then a lost
    bootstrap connection is replaced). Connections to coordinators are this object's own and
    get the bootstrap's request timeout (`request.timeout.ms` for a Cluster's): a broker silent
    that long fails the call with a ConnectionError and loses its connection."""

    def __init__(self, bootstrap: Connection | Cluster) -> None:
        self._source = bootstrap
        self._timeout_s = bootstrap.request_timeout_s
        self._by_address: dict[tuple[str, int], Connection] = {}
        if isinstance(bootstrap, Connection):
            self._by_address[bootstrap.address] = bootstrap
        self._by_group: dict[str, Connection] = {}

    async def _bootstrap(self) -> Connection:
        if isinstance(self._source, Connection):
            return self._source
        return await self._source.any_connection()

    def forget(self, group: str) -> None:
        """The coordinator moved (NOT_COORDINATOR, a lost connection): find it again."""
        self._by_group.pop(group, None)

    async def close(self) -> None:
        for conn in self._by_address.values():
            if conn is not self._source:
                await conn.close()

    async def find_coordinator(self, group: str) -> tuple[int, str, int]:
        """(node id, host, port) of the group's coordinator, retrying while it is being
        created or loaded."""
        conn = await self._bootstrap()
        version = conn.version_for(FindCoordinatorRequest)
        for attempt in range(20):
            if version >= 4:
                request = FindCoordinatorRequest(key_type=0, coordinator_keys=[group])
            else:
                request = FindCoordinatorRequest(key=group, key_type=0)
            response = await conn.send(request, version)
            assert isinstance(response, FindCoordinatorResponse)
            if version >= 4:
                c = response.coordinators[0]
                code, message, node, host, port = (
                    c.error_code,
                    c.error_message,
                    c.node_id,
                    c.host,
                    c.port,
                )
            else:
                code, message = response.error_code, response.error_message
                node, host, port = response.node_id, response.host, response.port
            if code == 0:
                return node, host, port
            if for_code(code) not in RETRIABLE_LOOKUP or attempt == 19:
                _raise_for(code, message)
            await asyncio.sleep(0.1)
        raise AssertionError("unreachable")

    async def coordinator(self, group: str) -> Connection:
        """A connection to the group's coordinator (the bootstrap one when it is the same)."""
        conn = self._by_group.get(group)
        if conn is None or conn.closed:
            _, host, port = await self.find_coordinator(group)
            conn = self._by_address.get((host, port))
            if conn is None or conn.closed:
                bootstrap = await self._bootstrap()
                conn = await Connection.open(
                    host, port, client_id=bootstrap.client_id, security=bootstrap.security
                )
                conn.request_timeout_s = self._timeout_s
                self._by_address[(host, port)] = conn
            self._by_group[group] = conn
        return conn

    async def list_groups(self) -> list[GroupListing]:
        """Groups of the broker this admin is connected to (one broker's view)."""
        response = await (await self._bootstrap()).send(ListGroupsRequest())
        assert isinstance(response, ListGroupsResponse)
        _raise_for(response.error_code)
        return sorted(
            (GroupListing(g.group_id, g.protocol_type, g.group_state) for g in response.groups),
            key=lambda g: g.group_id,
        )

    async def describe_group(self, group: str) -> GroupDescription:
        conn = await self.coordinator(group)
        response = await conn.send(DescribeGroupsRequest(groups=[group]))
        assert isinstance(response, DescribeGroupsResponse)
        g = response.groups[0]
        _raise_for(g.error_code, g.error_message)
        return GroupDescription(
            g.group_id,
            g.group_state,
            g.protocol_type,
            g.protocol_data,
            [
                MemberDescription(
                    x.member_id,
                    x.group_instance_id,
                    x.client_id,
                    x.client_host,
                    decode_assignment(bytes(x.member_assignment)),
                )
                for x in g.members
            ],
        )

    async def fetch_offsets(
        self,
        group: str,
        partitions: list[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, int]:
        """Committed offsets (only partitions that have one); all of them for None. With
        `require_stable` (OffsetFetch v7+, as Kafka's consumer asks), a partition whose
        commit is still being written raises UNSTABLE_OFFSET_COMMIT (retriable)."""
        found = await self.fetch_offsets_and_metadata(
            group, partitions, require_stable=require_stable
        )
        return {tp: offset for tp, (offset, _) in found.items()}

    async def fetch_offsets_and_metadata(
        self,
        group: str,
        partitions: list[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, tuple[int, str]]:
        """Committed offsets with their metadata strings (only partitions that have one)."""
        conn = await self.coordinator(group)
        version = conn.version_for(OffsetFetchRequest)
        wanted: dict[str, list[int]] | None = None
        if partitions is not None:
            wanted = {}
            for topic, index in partitions:
                wanted.setdefault(topic, []).append(index)
        if version >= 8:
            request = OffsetFetchRequest(
                groups=[
                    OffsetFetchRequest.OffsetFetchRequestGroup(
                        group_id=group,
                        topics=None
                        if wanted is None
                        else [
                            OffsetFetchRequest.OffsetFetchRequestTopics(
                                name=t, partition_indexes=ps
                            )
                            for t, ps in wanted.items()
                        ],
                    )
                ],
                require_stable=require_stable,
            )
        else:
            request = OffsetFetchRequest(
                group_id=group,
                topics=None
                if wanted is None
                else [
                    OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                    for t, ps in wanted.items()
                ],
                require_stable=require_stable and version >= 7,
            )
        response = await conn.send(request, version)
        assert isinstance(response, OffsetFetchResponse)
        out: dict[TopicPartition, tuple[int, str]] = {}
        if version >= 8:
            _raise_for(response.groups[0].error_code)
            rows = [
                (t.name, p.partition_index, p.committed_offset, p.metadata or "", p.error_code)
                for t in response.groups[0].topics
                for p in t.partitions
            ]
        else:
            _raise_for(response.error_code)
            rows = [
                (t.name, p.partition_index, p.committed_offset, p.metadata or "", p.error_code)
                for t in response.topics
                for p in t.partitions
            ]
        for topic, index, offset, metadata, code in rows:
            _raise_for(code)
            if offset >= 0:
                out[(topic, index)] = (offset, metadata)
        return out

    async def commit_offsets(
        self,
        group: str,
        offsets: dict[TopicPartition, int],
        *,
        generation: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
        metadata: str = "",
    ) -> None:
        """Commit `offsets` (each with `metadata`), in one request (all or none): as a member
        of `generation`, or (the defaults) as an admin while the group has no members."""
        conn = await self.coordinator(group)
        by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
        for (topic, index), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=index, committed_offset=offset, committed_metadata=metadata
                )
            )
        request = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=group_instance_id,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        response = await conn.send(request)
        assert isinstance(response, OffsetCommitResponse)
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == error_codes.NOT_COORDINATOR.code:
                    self.forget(group)  # find it again next time
                _raise_for(p.error_code)

    async def delete_offsets(
        self, group: str, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, KafkaError | None]:
        conn = await self.coordinator(group)
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = OffsetDeleteRequest(
            group_id=group,
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name=t,
                    partitions=[
                        OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=i)
                        for i in ps
                    ],
                )
                for t, ps in by_topic.items()
            ],
        )
        response = await conn.send(request)
        assert isinstance(response, OffsetDeleteResponse)
        _raise_for(response.error_code)
        return {
            (t.name, p.partition_index): (
                KafkaError(for_code(p.error_code)) if p.error_code else None
            )
            for t in response.topics
            for p in t.partitions
        }

    async def delete_group(self, group: str) -> None:
        conn = await self.coordinator(group)
        response = await conn.send(DeleteGroupsRequest(groups_names=[group]))
        assert isinstance(response, DeleteGroupsResponse)
        _raise_for(response.results[0].error_code)
