"""A mirror process's Prometheus endpoint: `metrics.listener=http://HOST:PORT` (MirrorMaker 2's
properties file; `--metrics.listener` for `riverlog mirror-maker`) serves `GET /metrics`.

Names as Kafka's JMX exporter renders MirrorMaker 2's and the consumer's MBeans:

    kafka_connect_mirror_mirrorsourceconnector_record_count_total{source,target,topic,partition}
    kafka_connect_mirror_mirrorsourceconnector_byte_count_total{source,target,topic,partition}
    kafka_connect_mirror_mirrorsourceconnector_replication_latency_ms{...}   (histogram)
    kafka_consumer_consumer_fetch_manager_metrics_records_lag{client_id,topic,partition}

`topic` and `partition` are the source's; `source` and `target` are the cluster aliases
(MirrorMaker 1: "source" and "target"). Records and bytes (key + value, as Kafka counts them)
are counted as the mirror hands them to the producer — resends after an aborted transaction
or a restart count again. The latency is the target's acknowledgement time minus the source
record's timestamp, taken from the last record of each partition of each poll. The lag is the
consumer's (`AsyncConsumer.current_lag`: end offset of the last fetch minus the position),
read at scrape time on the event loop, which also serves the endpoint.

Invariant: a `metrics.listener` that is not `http://HOST:PORT` is refused (ValueError) before
anything starts; without one nothing is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from riverlog.client.consumer import AsyncConsumer, ConsumerRecord
from riverlog.metrics_http import MetricsServer

log = logging.getLogger("riverlog.mirror")
PREFIX = "kafka_connect_mirror_mirrorsourceconnector_"
LATENCY_BUCKETS_MS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


class _Lag(Collector):
    def __init__(self) -> None:
        self.consumers: list[AsyncConsumer] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kafka_consumer_consumer_fetch_manager_metrics_records_lag",
            "Records between the mirror's position and the source partition's end offset",
            labels=["client_id", "topic", "partition"],
        )
        for consumer in self.consumers:
            for topic, partition in sorted(consumer.assignment()):
                lag = consumer.current_lag((topic, partition))
                if lag is not None:
                    family.add_metric([consumer.config.client_id, topic, str(partition)], lag)
        yield family


class MirrorMetrics:
    """The counters of one process (one registry), labelled per flow."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=False)
        labels = ["source", "target", "topic", "partition"]
        self.records = Counter(
            PREFIX + "record_count",
            "Records mirrored (handed to the target's producer)",
            labels,
            registry=self.registry,
        )
        self.bytes = Counter(
            PREFIX + "byte_count",
            "Key and value bytes mirrored",
            labels,
            registry=self.registry,
        )
        self.latency = Histogram(
            PREFIX + "replication_latency_ms",
            "Target acknowledgement time minus the source record's timestamp (ms)",
            labels,
            buckets=LATENCY_BUCKETS_MS,
            registry=self.registry,
        )
        self._lag = _Lag()
        self.registry.register(self._lag)

    def flow(self, source: str, target: str) -> FlowMetrics:
        return FlowMetrics(self, source, target)

    def watch(self, consumer: AsyncConsumer) -> None:
        self._lag.consumers.append(consumer)

    def scrape(self) -> bytes:
        return generate_latest(self.registry)


class FlowMetrics:
    """What a mirror stream reports, for one source -> target."""

    def __init__(self, metrics: MirrorMetrics, source: str, target: str) -> None:
        self.metrics = metrics
        self.source, self.target = source, target
        self._children: dict[tuple[str, int], tuple[Counter, Counter, Histogram]] = {}

    def _of(self, topic: str, partition: int) -> tuple[Counter, Counter, Histogram]:
        children = self._children.get((topic, partition))
        if children is None:
            labels = (self.source, self.target, topic, str(partition))
            m = self.metrics
            children = (
                m.records.labels(*labels),
                m.bytes.labels(*labels),
                m.latency.labels(*labels),
            )
            self._children[(topic, partition)] = children
        return children

    def watch(self, consumer: AsyncConsumer) -> None:
        self.metrics.watch(consumer)

    def sent(self, records: list[ConsumerRecord]) -> None:
        counts: dict[tuple[str, int], list[int]] = {}
        for r in records:
            total = counts.get((r.topic, r.partition))
            if total is None:
                total = counts[(r.topic, r.partition)] = [0, 0]
            total[0] += 1
            total[1] += len(r.key or b"") + len(r.value or b"")
        for (topic, partition), (n, size) in counts.items():
            record_count, byte_count, _ = self._of(topic, partition)
            record_count.inc(n)
            byte_count.inc(size)

    def delivered(self, topic: str, partition: int, latency_ms: float) -> None:
        self._of(topic, partition)[2].observe(max(0.0, latency_ms))


class MetricsEndpoint:
    """GET /metrics on `host:port`, served on the running event loop while entered."""

    def __init__(self, metrics: MirrorMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.server = MetricsServer(self._scrape, host, port)

    async def _scrape(self) -> bytes:
        return self.metrics.scrape()

    async def __aenter__(self) -> MetricsEndpoint:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()
