"""The broker's gauges, computed when Prometheus scrapes, from the broker's own state: nothing
is kept up to date on the hot path. Names are those of Kafka's JMX exporter and, for
consumer lag, of kafka_exporter:

- `kafka_server_replicamanager_{partitioncount,leadercount,underreplicatedpartitions}`;
- `kafka_controller_kafkacontroller_{activecontrollercount,offlinepartitionscount,
  globalpartitioncount,globaltopiccount}` (the last three from the active controller only,
  0 elsewhere, as Kafka reports them);
- `kafka_log_log_{size,logstartoffset,logendoffset,numlogsegments}{topic,partition}` for
  every replica this broker hosts;
- `kafka_server_replicamanager_{isrshrinks,isrexpands}_total`: ISR changes written by this
  broker as leader (counted by the replica manager);
- `kafka_server_socketservermetrics_connection_count`;
  `kafka_network_socketserver_memorypool{used,available}` (`queued.max.request.bytes`;
  available only when bounded); `kafka_network_requestchannel_requestqueuesize`: riverlog
  starts every request when it is read (no queue in front of handlers), so this is the
  requests read and not yet answered (long polls, acks=all waits and the answers behind them);
- `kafka_coordinator_group_groupmetadatamanager_{numgroups,numgroupsstable,...,numoffsets}`,
  `kafka_server_group_coordinator_metrics_group_completed_rebalance_count_total` (Kafka's
  group-completed-rebalance-count: join phases that started a generation with members);
- `kafka_consumergroup_current_offset`, `kafka_consumergroup_lag{consumergroup,topic,
  partition}` (high watermark minus committed offset, never below 0),
  `kafka_consumergroup_lag_sum{consumergroup,topic}` and `kafka_consumergroup_lag_seconds`
  (`lag.EndOffsetHistory`), for the groups this broker coordinates.

A partition's end for lag is its high watermark here if this broker leads it, else the
latest answer of its leader to ListOffsets, which `refresh_remote_ends` asks before each
scrape (bounded in time; a leader that does not answer keeps its last value). Each group is
coordinated by one broker, so summing a metric over brokers never counts a group twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from riverlog.coordinator.group import GroupState
from riverlog.model import LATEST_TIMESTAMP, NO_LEADER, TopicPartition
from riverlog.protocol.error_codes import KafkaError
from riverlog.server.metrics.lag import EndOffsetHistory

if TYPE_CHECKING:
    from riverlog.client.admin import AsyncAdmin
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)
REMOTE_TIMEOUT_S = 2.0


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class BrokerGauges:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.ends = EndOffsetHistory()
        self.remote_ends: dict[TopicPartition, int] = {}
        self._admin: AsyncAdmin | None = None
        self._failing = False

    # -- consumer lag: the partitions' ends ----------------------------------------------

    def _committed(self) -> dict[str, dict[TopicPartition, int]]:
        offsets = self.broker.groups.offsets
        return {g: {tp: o.offset for tp, o in offsets.fetch(g).items()} for g in offsets.groups()}

    def _local_ends(self) -> dict[TopicPartition, int]:
        return {h.key: h.log.high_watermark for h in self.broker.replicas if h.is_leader}

    async def refresh_remote_ends(self) -> None:
        """Ask the leaders of committed partitions this broker does not lead for their end."""
        local = self._local_ends()
        wanted = sorted({tp for c in self._committed().values() for tp in c} - set(local))
        self.remote_ends = {tp: e for tp, e in self.remote_ends.items() if tp in wanted}
        if not wanted:
            return
        if self._admin is None:
            from riverlog.client.admin import AsyncAdmin

            client_id = f"riverlog-metrics-{self.broker.broker_id}"
            self._admin = AsyncAdmin(
                {"bootstrap.servers": self.broker.bootstrap_servers, "client.id": client_id}
            )
        try:
            async with asyncio.timeout(REMOTE_TIMEOUT_S):
                self.remote_ends.update(await self._admin.list_offsets(wanted, LATEST_TIMESTAMP))
            self._failing = False
        except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
            if not self._failing:
                log.warning("metrics: end offsets of other leaders' partitions: %s", e)
            self._failing = True

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()

    # -- the scrape ----------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        yield from self._replicas()
        yield from self._controller()
        yield from self._groups()
        yield from self._lag()
        yield _gauge(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections",
            len(self.broker.network.connections),
        )
        yield from self._network()

    def _network(self) -> Iterator[Metric]:
        memory = self.broker.network.memory
        yield _gauge(
            "kafka_network_socketserver_memorypoolused",
            "Bytes of requests in flight reserved from queued.max.request.bytes",
            memory.used,
        )
        if memory.bounded:
            yield _gauge(
                "kafka_network_socketserver_memorypoolavailable",
                "Bytes left in the queued.max.request.bytes pool",
                memory.capacity - memory.used,
            )
        yield _gauge(
            "kafka_network_requestchannel_requestqueuesize",
            "Requests read and not yet answered",
            sum(c.in_flight for n in self.broker.networks for c in n.connections),
        )

    def _replicas(self) -> Iterator[Metric]:
        hosted = list(self.broker.replicas)
        leaders = [h for h in hosted if h.is_leader]
        under = sum(1 for h in leaders if len(h.isr) < len(h.replicas))
        prefix = "kafka_server_replicamanager_"
        yield _gauge(prefix + "partitioncount", "Replicas hosted", len(hosted))
        for name, value, doc in (
            ("isrshrinks", self.broker.replicas.isr_shrinks, "ISR shrinks written as leader"),
            ("isrexpands", self.broker.replicas.isr_expands, "ISR expansions written as leader"),
        ):
            yield CounterMetricFamily(prefix + name, doc, value=value)
        yield _gauge(prefix + "leadercount", "Partitions led", len(leaders))
        yield _gauge(
            prefix + "underreplicatedpartitions",
            "Partitions led whose ISR is smaller than their replicas",
            under,
        )
        families = {
            name: GaugeMetricFamily(f"kafka_log_log_{name}", doc, labels=["topic", "partition"])
            for name, doc in (
                ("size", "Bytes of the replica's log"),
                ("logstartoffset", "First offset of the replica's log"),
                ("logendoffset", "Next offset of the replica's log"),
                ("numlogsegments", "Segments of the replica's log"),
            )
        }
        for h in hosted:
            labels = [h.topic, str(h.index)]
            families["size"].add_metric(labels, h.log.size_bytes)
            families["logstartoffset"].add_metric(labels, h.log.log_start_offset)
            families["logendoffset"].add_metric(labels, h.log.log_end_offset)
            families["numlogsegments"].add_metric(labels, len(h.log.segments))
        yield from families.values()

    def _controller(self) -> Iterator[Metric]:
        active = self.broker.controller.active
        cache = self.broker.metadata
        prefix = "kafka_controller_kafkacontroller_"
        offline = sum(1 for p in cache.partitions.values() if p.leader == NO_LEADER)
        yield _gauge(prefix + "activecontrollercount", "1 on the active controller", int(active))
        yield _gauge(
            prefix + "offlinepartitionscount",
            "Partitions without a leader",
            offline if active else 0,
        )
        yield _gauge(
            prefix + "globalpartitioncount",
            "Partitions of the cluster",
            len(cache.partitions) if active else 0,
        )
        yield _gauge(
            prefix + "globaltopiccount",
            "Topics of the cluster",
            len(cache.topics()) if active else 0,
        )

    def _groups(self) -> Iterator[Metric]:
        groups = list(self.broker.groups.manager)
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield _gauge(prefix + "numgroups", "Groups this broker coordinates", len(groups))
        for state in GroupState:
            count = sum(1 for g in groups if g.state is state)
            name = prefix + "numgroups" + state.value.lower()
            yield _gauge(name, f"Groups in state {state.value}", count)
        yield CounterMetricFamily(
            "kafka_server_group_coordinator_metrics_group_completed_rebalance_count",
            "Rebalances completed by the groups this broker coordinates",
            value=self.broker.groups.completed_rebalances,
        )
        offsets = self.broker.groups.offsets
        yield _gauge(
            prefix + "numoffsets",
            "Committed offsets held",
            sum(len(offsets.fetch(g)) for g in offsets.groups()),
        )

    def _lag(self) -> Iterator[Metric]:
        now_ms = self.broker.clock.wall_ms()
        ends = {**self.remote_ends, **self._local_ends()}
        for tp, end in ends.items():
            self.ends.observe(tp, now_ms, end)
        self.ends.forget_except(set(ends))
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "Committed offset of a group", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag", "High watermark minus committed offset", labels=labels
        )
        seconds = GaugeMetricFamily(
            "kafka_consumergroup_lag_seconds",
            "Estimated age of the oldest unconsumed record",
            labels=labels,
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "A group's lag over a topic's partitions",
            labels=["consumergroup", "topic"],
        )
        for group, committed in sorted(self._committed().items()):
            sums: dict[str, int] = {}
            for (topic, index), offset in sorted(committed.items()):
                values = [group, topic, str(index)]
                current.add_metric(values, offset)
                if (topic, index) not in ends:
                    continue
                behind = max(ends[(topic, index)] - offset, 0)
                lag.add_metric(values, behind)
                seconds.add_metric(values, self.ends.seconds_behind((topic, index), offset, now_ms))
                sums[topic] = sums.get(topic, 0) + behind
            for topic, total in sorted(sums.items()):
                lag_sum.add_metric([group, topic], total)
        yield from (current, lag, lag_sum, seconds)
