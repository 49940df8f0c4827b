"""What the web console asks the cluster, through riverlog's client only (`AsyncAdmin`,
`AsyncConsumer`, Kafka requests on the client's connections), so it works against any Kafka.

`ConsoleClient` owns one `AsyncAdmin` built from the client config the console was given
(bootstrap servers plus the `--command-config` properties); every page's data comes from
here. Nothing is cached except the admin's metadata and connections: each call asks the
cluster, so a page shows the cluster as it is when the page is loaded.

Invariants: a broker that cannot be reached is reported as such (never raises out of
`brokers()`); sizes come from DescribeLogDirs and count each partition's leader replica once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from riverlog.client import admin_requests as admin
from riverlog.client.admin import AsyncAdmin
from riverlog.client.consumer import AsyncConsumer
from riverlog.client.fetcher import ConsumerRecord
from riverlog.client.group_admin import GroupDescription
from riverlog.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
)

EARLIEST, LATEST = EARLIEST_TIMESTAMP, LATEST_TIMESTAMP


@dataclass
class LogDir:
    path: str
    error_code: int
    size: int
    total_bytes: int
    usable_bytes: int


@dataclass
class BrokerRow:
    node_id: int
    host: str
    port: int
    rack: str | None
    is_controller: bool
    reachable: bool
    error: str = ""
    rtt_ms: float = 0.0
    leaders: int = 0
    replicas: int = 0
    out_of_isr: int = 0
    log_dirs: list[LogDir] = field(default_factory=list)
    api_count: int = 0
    versions: dict[str, int] = field(default_factory=dict)

    @property
    def disk_used(self) -> int:
        return sum(d.size for d in self.log_dirs)


@dataclass
class TopicRow:
    name: str
    internal: bool
    partitions: list[admin.PartitionInfo]
    size: int

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if len(p.isr) < len(p.replicas))

    @property
    def offline(self) -> int:
        return sum(1 for p in self.partitions if p.leader < 0)

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclass
class PartitionOffsets:
    partition: admin.PartitionInfo
    start: int
    end: int
    size: int


@dataclass
class LagRow:
    topic: str
    partition: int
    committed: int | None
    end: int
    owner: str

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(self.end - self.committed, 0)


@dataclass
class GroupView:
    description: GroupDescription
    coordinator: int
    rows: list[LagRow]

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.rows)


class ConsoleClient:
    """The console's window on the cluster (one per console process)."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self.config = dict(config)
        self.admin = AsyncAdmin(self.config)

    async def close(self) -> None:
        await self.admin.close()

    # -- brokers and topics --------------------------------------------------------------

    async def view(self) -> admin.ClusterView:
        """Brokers, controller and every topic from one Metadata answer."""
        return await admin.describe_cluster(await self.admin.cluster.any_connection())

    async def log_dirs(self, node: int) -> list[LogDir]:
        """The broker's log directories with their partitions' sizes (DescribeLogDirs)."""
        conn = await self.admin.cluster.connection(node)
        response = await conn.send(DescribeLogDirsRequest(topics=None))
        assert isinstance(response, DescribeLogDirsResponse)
        return [
            LogDir(
                r.log_dir,
                r.error_code,
                sum(p.partition_size for t in r.topics for p in t.partitions),
                r.total_bytes,
                r.usable_bytes,
            )
            for r in response.results
        ]

    async def replica_sizes(self, node: int) -> dict[TopicPartition, int]:
        conn = await self.admin.cluster.connection(node)
        response = await conn.send(DescribeLogDirsRequest(topics=None))
        assert isinstance(response, DescribeLogDirsResponse)
        return {
            (t.name, p.partition_index): p.partition_size
            for r in response.results
            if r.error_code == 0
            for t in r.topics
            for p in t.partitions
            if not p.is_future_key
        }

    async def partition_sizes(self, view: admin.ClusterView) -> dict[TopicPartition, int]:
        """Each partition's size on its leader (brokers that cannot answer are skipped)."""
        per_broker = await asyncio.gather(
            *(self.replica_sizes(b.node_id) for b in view.brokers), return_exceptions=True
        )
        sizes: dict[int, dict[TopicPartition, int]] = {
            b.node_id: s
            for b, s in zip(view.brokers, per_broker, strict=True)
            if isinstance(s, dict)
        }
        out: dict[TopicPartition, int] = {}
        for t in view.topics:
            for p in t.partitions:
                out[(t.name, p.partition)] = sizes.get(p.leader, {}).get((t.name, p.partition), 0)
        return out

    async def _probe(self, row: BrokerRow) -> None:
        try:
            conn = await self.admin.cluster.connection(row.node_id)
            started = time.perf_counter()
            await conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
            row.rtt_ms = (time.perf_counter() - started) * 1000
            row.api_count = len(conn.broker_versions)
            for cls in (ProduceRequest, FetchRequest, MetadataRequest):
                if (span := conn.broker_versions.get(cls.API_KEY)) is not None:
                    row.versions[cls.NAME.removesuffix("Request")] = span[1]
            row.log_dirs = await self.log_dirs(row.node_id)
        except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
            row.reachable = False
            row.error = str(e) or type(e).__name__

    async def brokers(self) -> tuple[admin.ClusterView, list[BrokerRow]]:
        view = await self.view()
        rows = {
            b.node_id: BrokerRow(
                b.node_id, b.host, b.port, b.rack, b.node_id == view.controller, True
            )
            for b in view.brokers
        }
        for t in view.topics:
            for p in t.partitions:
                if p.leader in rows:
                    rows[p.leader].leaders += 1
                for r in p.replicas:
                    if r in rows:
                        rows[r].replicas += 1
                        if r not in p.isr:
                            rows[r].out_of_isr += 1
        await asyncio.gather(*(self._probe(r) for r in rows.values()))
        return view, sorted(rows.values(), key=lambda r: r.node_id)

    async def topics(self) -> list[TopicRow]:
        view = await self.view()
        sizes = await self.partition_sizes(view)
        return [
            TopicRow(
                t.name,
                t.is_internal,
                t.partitions,
                sum(sizes.get((t.name, p.partition), 0) for p in t.partitions),
            )
            for t in view.topics
        ]

    async def offsets(
        self, partitions: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        return await self.admin.list_offsets(partitions, timestamp)

    async def topic(self, name: str) -> tuple[TopicRow, list[PartitionOffsets], dict[str, str]]:
        """A topic's partitions with their offsets and sizes, and its own config overrides."""
        (info,) = await self.admin.describe_topics([name])
        view = await self.view()
        sizes = await self.partition_sizes(view)
        tps = [(name, p.partition) for p in info.partitions]
        starts, ends = await asyncio.gather(self.offsets(tps, EARLIEST), self.offsets(tps, LATEST))
        row = TopicRow(name, info.is_internal, info.partitions, sum(sizes.get(tp, 0) for tp in tps))
        parts = [
            PartitionOffsets(
                p,
                starts[(name, p.partition)],
                ends[(name, p.partition)],
                sizes.get((name, p.partition), 0),
            )
            for p in info.partitions
        ]
        overrides = await admin.topic_config_overrides(
            await self.admin.cluster.any_connection(), name
        )
        return row, parts, overrides

    # -- consumer groups -----------------------------------------------------------------

    async def group(self, group: str) -> GroupView:
        """State, members, and per partition the committed offset, log end and lag."""
        description = await self.admin.describe_group(group)
        coordinator, _, _ = await self.admin.groups.find_coordinator(group)
        committed = await self.admin.group_offsets(group)
        owners = {
            (t, p): m.client_id + " " + m.member_id
            for m in description.members
            for t, ps in m.assignment.items()
            for p in ps
        }
        tps = sorted(set(committed) | set(owners))
        ends = await self.offsets(tps, LATEST)
        rows = [
            LagRow(t, p, committed.get((t, p)), ends.get((t, p), 0), owners.get((t, p), "-"))
            for t, p in tps
        ]
        return GroupView(description, coordinator, rows)

    # -- records -------------------------------------------------------------------------

    async def read(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        limit: int,
        key_filter: bytes | None = None,
        scan_limit: int = 10_000,
        timeout_s: float = 5.0,
    ) -> tuple[list[ConsumerRecord], int]:
        """Up to `limit` records of `tp` from offset `start` (below `end`); with
        `key_filter`, only records whose key contains it, scanning at most `scan_limit`
        records. Returns the records and the offset the scan stopped at."""
        consumer = AsyncConsumer(
            {
                **self.config,
                "enable.auto.commit": False,
                "max.poll.records": min(max(limit, 1), 500),
                "auto.offset.reset": "none",
            }
        )
        consumer.cluster.auto_create_topics = False  # browsing never creates a topic
        found: list[ConsumerRecord] = []
        position = start
        deadline = time.monotonic() + timeout_s
        try:
            consumer.assign([tp])
            consumer.seek(tp, start)
            while position < end and len(found) < limit and position - start < scan_limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                polled = await consumer.poll(int(min(left, 0.5) * 1000))
                if not polled and await consumer.position(tp) >= end:
                    break  # only control records (transaction markers) were left
                for record in polled:
                    position = record.offset + 1
                    if record.offset >= end or len(found) >= limit:
                        break
                    if key_filter is None or (record.key is not None and key_filter in record.key):
                        found.append(record)
        finally:
            await consumer.close()
        return found, position
