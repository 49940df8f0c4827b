"""The client's view of the cluster: a metadata cache and one connection per broker.

As the protocol guide's "Partitioning and bootstrapping" prescribes: the client bootstraps from
any of `bootstrap.servers`, asks Metadata for the topics in use, and talks to each partition's
leader directly. The cache is refreshed when a caller says it is stale (after
NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE or a disconnect) and
every `metadata.max.age.ms`; concurrent refreshes share one request. Broker connections are
opened on first use and reopened after a failure, no sooner than the reconnect backoff
(`reconnect.backoff.ms`, doubling up to `reconnect.backoff.max.ms`).

Invariants: `leaders` and `partition_counts` only ever hold what the latest
successful Metadata answer said for a topic; one open connection per broker at most.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass

from riverlog.client.config import CommonConfig
from riverlog.client.connection import PLAINTEXT, Connection, parse_bootstrap
from riverlog.client.security import ClientSecurity
from riverlog.model import TopicPartition
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import MetadataRequest, MetadataResponse

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


@dataclass
class _Backoff:
    failures: int = 0
    not_before: float = 0.0


class Cluster:
    def __init__(
        self,
        bootstrap_servers: str,
        client_id: str = "riverlog",
        *,
        request_timeout_ms: int = 30_000,
        metadata_max_age_ms: int = 300_000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1_000,
        connection_setup_timeout_ms: int = 10_000,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.security = security
        self.bootstrap_servers = bootstrap_servers
        self._bootstrap_addresses = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self._backoff_s = (reconnect_backoff_ms / 1000, reconnect_backoff_max_ms / 1000)
        self._setup_timeout_s = connection_setup_timeout_ms / 1000
        self.brokers: dict[int, BrokerAddress] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self.leaders: dict[TopicPartition, int] = {}
        self.partition_counts: dict[str, int] = {}
        self.topics_in_use: set[str] = set()
        self.auto_create_topics = True
        """Whether Metadata requests may create missing topics when not told either way
        (an admin client's and a browsing consumer's cluster say False: asking about a topic
        just deleted must not bring it back)."""
        self._connections: dict[int, Connection] = {}
        self._opening: dict[int, asyncio.Future[Connection]] = {}
        self._backoffs: dict[object, _Backoff] = {}
        self._bootstrap: Connection | None = None
        self._bootstrap_lock = asyncio.Lock()
        self._refreshing: asyncio.Future[None] | None = None
        self._refreshed_at = 0.0

    @classmethod
    def from_config(cls, c: CommonConfig) -> Cluster:
        return cls(
            c.bootstrap_servers,
            c.client_id,
            request_timeout_ms=c.request_timeout_ms,
            metadata_max_age_ms=c.metadata_max_age_ms,
            reconnect_backoff_ms=c.reconnect_backoff_ms,
            reconnect_backoff_max_ms=c.reconnect_backoff_max_ms,
            connection_setup_timeout_ms=c.connection_setup_timeout_ms,
            security=c.security,
        )

    # -- connections ---------------------------------------------------------------------

    async def _open(self, key: object, host: str, port: int) -> Connection:
        backoff = self._backoffs.setdefault(key, _Backoff())
        wait = backoff.not_before - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            conn = await Connection.open(
                host,
                port,
                client_id=self.client_id,
                timeout_s=self._setup_timeout_s,
                security=self.security,
            )
            conn.request_timeout_s = self.request_timeout_s  # admin calls, InitProducerId, ...
        except (OSError, TimeoutError, ConnectionError) as e:
            low, high = self._backoff_s
            backoff.not_before = time.monotonic() + min(high, low * (2**backoff.failures))
            backoff.failures += 1
            raise ConnectionError(f"cannot connect to {host}:{port}: {e}") from e
        backoff.failures = 0
        return conn

    async def any_connection(self) -> Connection:
        """A connection to some broker: a known one that is open, else a bootstrap server."""
        for conn in self._connections.values():
            if not conn.closed:
                return conn
        async with self._bootstrap_lock:  # one bootstrap connection, not one per caller
            if self._bootstrap is not None and not self._bootstrap.closed:
                return self._bootstrap
            self._bootstrap = await self._open_bootstrap()
            return self._bootstrap

    async def _open_bootstrap(self) -> Connection:
        last: Exception | None = None
        addresses = [(b.host, b.port) for b in self.brokers.values()]
        addresses += [a for a in self._bootstrap_addresses if a not in addresses]
        for host, port in addresses:
            try:
                return await self._open((host, port), host, port)
            except ConnectionError as e:
                last = e
        raise ConnectionError(f"no broker of {self.bootstrap_servers} answered: {last}")

    async def connection(self, node_id: int) -> Connection:
        """The connection to broker `node_id`, opened if needed."""
        conn = self._connections.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        address = self.brokers.get(node_id)
        if address is None:
            await self.refresh()
            address = self.brokers.get(node_id)
            if address is None:
                raise ConnectionError(f"broker {node_id} is not in the cluster metadata")
        opening = self._opening.get(node_id)
        if opening is None:  # one attempt at a time per broker; others wait for it
            opening = asyncio.ensure_future(self._open(node_id, address.host, address.port))
            self._opening[node_id] = opening
            opening.add_done_callback(functools.partial(self._opened, node_id))
        conn = await asyncio.shield(opening)
        self._connections[node_id] = conn
        return conn

    def _opened(self, node_id: int, _: object) -> None:
        self._opening.pop(node_id, None)

    async def send(
        self, node_id: int, request: ApiMessage, version: int | None = None
    ) -> ApiMessage:
        """Send to broker `node_id` within `request.timeout.ms` (the timeout of every
        connection of this cluster: it closes the connection, ConnectionError)."""
        conn = await self.connection(node_id)
        return await conn.send(request, version)

    # -- metadata ------------------------------------------------------------------------

    async def refresh(
        self, topics: list[str] | None = None, *, allow_auto_create: bool | None = None
    ) -> None:
        """Read Metadata for the topics in use (plus `topics`, which become in use); may
        create missing ones if `allow_auto_create` (None: `auto_create_topics`)."""
        if allow_auto_create is None:
            allow_auto_create = self.auto_create_topics
        if topics:
            self.topics_in_use.update(topics)
        if self._refreshing is not None:
            await asyncio.shield(self._refreshing)
            if not topics or all(t in self.partition_counts for t in topics):
                return
        future = self._refreshing = asyncio.get_running_loop().create_future()
        try:
            await self._refresh(sorted(self.topics_in_use), allow_auto_create)
            future.set_result(None)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: waiters get it, nobody else must
            raise
        finally:
            self._refreshing = None

    async def _refresh(self, topics: list[str], allow_auto_create: bool) -> None:
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
        self.controller_id = response.controller_id
        self.cluster_id = response.cluster_id
        for t in response.topics:
            if t.name is None:
                continue
            if t.error_code != 0:
                if t.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                    self._forget(t.name)
                continue
            self.partition_counts[t.name] = len(t.partitions)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                self.leaders[tp] = p.leader_id if p.error_code != LEADER_NOT_AVAILABLE else -1
        self._refreshed_at = time.monotonic()

    def _forget(self, topic: str) -> None:
        count = self.partition_counts.pop(topic, 0)
        for p in range(count):
            self.leaders.pop((topic, p), None)

    async def all_topics(self) -> list[str]:
        """Every topic of the cluster but the internal ones (`__consumer_offsets`)."""
        conn = await self.any_connection()
        response = await conn.send(MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert isinstance(response, MetadataResponse)
        return sorted(
            t.name for t in response.topics if t.name and t.error_code == 0 and not t.is_internal
        )

    def metadata_is_old(self) -> bool:
        """Older than `metadata.max.age.ms`: refresh even without an error asking for it."""
        return time.monotonic() - self._refreshed_at > self.metadata_max_age_s

    async def refresh_if_old(self) -> None:
        if self.metadata_is_old():
            await self.refresh()

    def mark_stale(self, tp: TopicPartition) -> None:
        """Forget a partition's leader (after an error saying it moved); the next lookup
        refreshes."""
        self.leaders[tp] = -1

    async def partitions_of(
        self, topic: str, *, allow_auto_create: bool = True, timeout_s: float = 2.0
    ) -> int:
        """The topic's partition count, asking (and retrying while it is being created)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.partition_counts.get(topic):
                return self.partition_counts[topic]
            await self.refresh([topic], allow_auto_create=allow_auto_create)
            if self.partition_counts.get(topic):
                continue
            if time.monotonic() >= deadline:
                raise KafkaError(for_code(3), f"Topic '{topic}' does not exist.")
            await asyncio.sleep(0.1)

    async def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader, refreshing once if unknown; KafkaError if it has none."""
        leader = self.leaders.get((topic, partition), -1)
        if leader < 0 or leader not in self.brokers:
            await self.refresh([topic])
            leader = self.leaders.get((topic, partition), -1)
            if leader < 0 or leader not in self.brokers:
                raise KafkaError(
                    for_code(LEADER_NOT_AVAILABLE), f"No leader for {topic}-{partition}."
                )
        return leader

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of `topic` with a known leader."""
        count = self.partition_counts.get(topic, 0)
        return [p for p in range(count) if self.leaders.get((topic, p), -1) in self.brokers]

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await conn.close()
        self._connections.clear()
        if self._bootstrap is not None:
            await self._bootstrap.close()
