"""The client's view of the cluster: brokers, partition leaders, one connection per broker.

`Cluster.refresh` reads Metadata for the topics in use; `leader_connection` opens (once) and
returns the connection to a partition's leader. Callers refresh after NOT_LEADER_OR_FOLLOWER
or UNKNOWN_TOPIC_OR_PARTITION and retry — the usual Kafka client loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from riverlog.client.connection import Connection, connect_any
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import MetadataRequest, MetadataResponse


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


class Cluster:
    def __init__(self, bootstrap_servers: str, client_id: str = "riverlog") -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.brokers: dict[int, BrokerAddress] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.partition_counts: dict[str, int] = {}
        self._connections: dict[int, Connection] = {}
        self._bootstrap: Connection | None = None

    async def any_connection(self) -> Connection:
        if self._bootstrap is None or self._bootstrap.closed:
            self._bootstrap = await connect_any(self.bootstrap_servers, self.client_id)
        return self._bootstrap

    async def refresh(self, topics: list[str], *, allow_auto_create: bool = True) -> None:
        conn = await self.any_connection()
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=allow_auto_create,
        )
        response = await conn.send(request)
        assert isinstance(response, MetadataResponse)
        self.brokers = {
            b.node_id: BrokerAddress(b.node_id, b.host, b.port) for b in response.brokers
        }
        for t in response.topics:
            if t.error_code != 0 or t.name is None:
                continue
            self.partition_counts[t.name] = len(t.partitions)
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = p.leader_id

    async def partitions_of(self, topic: str, *, allow_auto_create: bool = True) -> int:
        """The topic's partition count, asking (and retrying while it is being created)."""
        for _ in range(20):
            if self.partition_counts.get(topic):
                return self.partition_counts[topic]
            await self.refresh([topic], allow_auto_create=allow_auto_create)
            if not self.partition_counts.get(topic):
                await asyncio.sleep(0.1)
        raise KafkaError(for_code(3), f"Topic '{topic}' does not exist.")

    async def leader_connection(self, topic: str, partition: int) -> Connection:
        leader = self.leaders.get((topic, partition), -1)
        if leader < 0 or leader not in self.brokers:
            await self.refresh([topic])
            leader = self.leaders.get((topic, partition), -1)
            if leader < 0 or leader not in self.brokers:
                raise KafkaError(for_code(5), f"No leader for {topic}-{partition}.")
        conn = self._connections.get(leader)
        if conn is None or conn.closed:
            address = self.brokers[leader]
            conn = await Connection.open(address.host, address.port, client_id=self.client_id)
            self._connections[leader] = conn
        return conn

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await conn.close()
        if self._bootstrap is not None:
            await self._bootstrap.close()
