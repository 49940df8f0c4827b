"""`AsyncAdmin`: the admin client — topics, configs, consumer groups, records, the cluster,
partition reassignments.

Built on the request functions of `admin.py` and `groups.py`: topic changes go to the
controller (from Metadata; retried on NOT_CONTROLLER), group operations to the group's
coordinator, DeleteRecords to each partition's leader. Errors are `KafkaError`s carrying the
broker's code and message.

Invariant: the admin holds no state but connections and the metadata cache; every call asks
the cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from riverlog.client import admin_requests as admin
from riverlog.client.cluster import BrokerAddress, Cluster
from riverlog.client.config import AdminConfig
from riverlog.client.connection import Connection
from riverlog.client.group_admin import GroupAdmin, GroupDescription, GroupListing
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
)

T = TypeVar("T")
TOPIC, BROKER = admin.TOPIC_RESOURCE, admin.BROKER_RESOURCE  # config resource types


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller: int
    brokers: list[BrokerAddress]


class AsyncAdmin:
    """Kafka admin client on asyncio: `AsyncAdmin({"bootstrap.servers": "host:9092"})`."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self.config = AdminConfig.parse(config)
        c = self.config
        self.cluster = Cluster.from_config(c)
        self.cluster.auto_create_topics = False  # an admin client never creates by asking
        self.groups = GroupAdmin(self.cluster)

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.groups.close()
        await self.cluster.close()

    async def _on_controller(self, change: Callable[[Connection], Awaitable[T]]) -> T:
        """Run a change on the controller, again if the controller moved meanwhile."""
        for attempt in range(3):
            await self.cluster.refresh()
            node = self.cluster.controller_id
            conn = await (
                self.cluster.connection(node)
                if node in self.cluster.brokers
                else self.cluster.any_connection()
            )
            try:
                return await change(conn)
            except KafkaError as e:
                if e.error.code != error_codes.NOT_CONTROLLER.code or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    # -- cluster and topics --------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        await self.cluster.refresh()
        return ClusterDescription(
            self.cluster.cluster_id,
            self.cluster.controller_id,
            sorted(self.cluster.brokers.values(), key=lambda b: b.node_id),
        )

    async def list_topics(self) -> list[str]:
        return await self.cluster.all_topics()

    async def describe_topics(self, names: list[str] | None = None) -> list[admin.TopicInfo]:
        return await admin.describe_topics(await self.cluster.any_connection(), names)

    async def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
    ) -> None:
        """Create a topic (-1: the broker's `num.partitions` / `default.replication.factor`)."""
        await self._on_controller(
            lambda conn: admin.create_topic(
                conn, name, partitions, replication_factor, configs, validate_only=validate_only
            )
        )

    async def delete_topic(self, name: str) -> None:
        await self._on_controller(lambda conn: admin.delete_topic(conn, name))

    async def create_partitions(self, name: str, count: int) -> None:
        """Grow `name` to `count` partitions."""
        await self._on_controller(lambda conn: admin.create_partitions(conn, name, count))

    async def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        """Preferred (`admin.PREFERRED_ELECTION`) or unclean (`admin.UNCLEAN_ELECTION`) leader
        elections for `partitions` (None: all); per partition None (elected) or the error —
        ELECTION_NOT_NEEDED where the wanted leader already leads."""
        timeout_ms = self.config.request_timeout_ms
        return await self._on_controller(
            lambda conn: admin.elect_leaders(conn, election_type, partitions, timeout_ms)
        )

    # -- configs -------------------------------------------------------------------------

    async def describe_configs(self, resource_type: int, name: str) -> dict[str, str | None]:
        """Every config of a topic (TOPIC) or broker (BROKER, name = its id) and its value."""
        conn = await self._for_resource(resource_type, name)
        return {c.name: c.value for c in await admin.describe_configs(conn, resource_type, name)}

    async def alter_configs(
        self,
        resource_type: int,
        name: str,
        *,
        set: Mapping[str, str] | None = None,
        delete: list[str] | None = None,
    ) -> None:
        """Set and delete config overrides (IncrementalAlterConfigs); others stay."""
        conn = await self._for_resource(resource_type, name)
        await admin.alter_configs(conn, resource_type, name, set or {}, delete or [])

    async def _for_resource(self, resource_type: int, name: str) -> Connection:
        if resource_type == BROKER and name:
            await self.cluster.refresh()
            return await self.cluster.connection(int(name))
        return await self.cluster.any_connection()

    # -- partition reassignments ---------------------------------------------------------

    async def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions to new replica lists, or cancel their moves (None); the error of
        each partition (None: accepted)."""
        out: dict[TopicPartition, KafkaError | None] = {}

        async def alter(conn: Connection) -> None:
            out.update(await admin.alter_partition_reassignments(conn, targets))

        await self._on_controller(alter)
        return out

    async def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, admin.PartitionReassignment]:
        """The moves in progress (of `partitions`; None: all)."""
        out: dict[TopicPartition, admin.PartitionReassignment] = {}

        async def list_them(conn: Connection) -> None:
            out.update(await admin.list_partition_reassignments(conn, partitions))

        await self._on_controller(list_them)
        return out

    # -- records -------------------------------------------------------------------------

    async def delete_records(
        self, before: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Delete records below the given offsets (-1: the high watermark); returns each
        partition's new low watermark."""
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
        for (topic, partition), offset in before.items():
            leader = await self.cluster.leader_of(topic, partition)
            by_leader.setdefault(leader, {}).setdefault(topic, []).append((partition, offset))
        out: dict[TopicPartition, int] = {}
        for leader, topics in by_leader.items():
            response = await self.cluster.send(
                leader,
                DeleteRecordsRequest(
                    topics=[
                        DeleteRecordsRequest.DeleteRecordsTopic(
                            name=t,
                            partitions=[
                                DeleteRecordsRequest.DeleteRecordsPartition(
                                    partition_index=p, offset=o
                                )
                                for p, o in ps
                            ],
                        )
                        for t, ps in topics.items()
                    ],
                    timeout_ms=self.config.request_timeout_ms,
                ),
            )
            assert isinstance(response, DeleteRecordsResponse)
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise KafkaError(
                            for_code(p.error_code),
                            f"deleting records of {t.name}-{p.partition_index}",
                        )
                    out[(t.name, p.partition_index)] = p.low_watermark
        return out

    async def list_offsets(
        self, partitions: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """Per partition: the earliest (-2), latest (-1), or first offset at `timestamp`
        (one request per leader, retried while the errors are retriable)."""
        return await admin.leader_offsets(
            self.cluster, partitions, timestamp, self.config.retry_backoff_ms
        )

    # -- consumer groups -----------------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        """Groups of every broker."""
        await self.cluster.refresh()
        found: dict[str, GroupListing] = {}
        for node in self.cluster.brokers:
            one = GroupAdmin(await self.cluster.connection(node))
            for g in await one.list_groups():
                found[g.group_id] = g
        return sorted(found.values(), key=lambda g: g.group_id)

    async def describe_group(self, group: str) -> GroupDescription:
        return await self.groups.describe_group(group)

    async def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        return await self.groups.fetch_offsets(group)

    async def reset_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set a group's committed offsets; the group must have no active members."""
        await self.groups.commit_offsets(group, dict(offsets))

    async def delete_group(self, group: str) -> None:
        await self.groups.delete_group(group)
