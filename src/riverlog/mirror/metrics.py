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

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from riverlog.client.consumer import AsyncConsumer, ConsumerRecord

log = logging.getLogger("riverlog.mirror")
PREFIX = "kafka_connect_mirror_mirrorsourceconnector_"
LATENCY_BUCKETS_MS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
MAX_REQUEST_HEAD = 8192
READ_TIMEOUT_S = 10.0


def parse_listener(text: str) -> tuple[str, int] | None:
    """`http://HOST:PORT` as (host, port); "" as None (no endpoint); ValueError otherwise."""
    if not text:
        return None
    scheme, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if scheme.lower() != "http" or not sep or not colon or not port.isdigit() or "/" in rest:
        raise ValueError(f"metrics.listener {text!r}: expected http://HOST:PORT")
    return host.strip("[]"), int(port)


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
    """GET /metrics on `host:port`, served on the running event loop."""

    def __init__(self, metrics: MirrorMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host, self.port = host, port
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> MetricsEndpoint:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=MAX_REQUEST_HEAD
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            parts = head.split(b"\r\n", 1)[0].split(b" ")
            if len(parts) != 3 or parts[0] != b"GET":
                status, body, kind = "400 Bad Request", b"bad request\n", "text/plain"
            elif parts[1].split(b"?", 1)[0] not in (b"/metrics", b"/"):
                status, body, kind = "404 Not Found", b"see /metrics\n", "text/plain"
            else:
                status, body, kind = "200 OK", self.metrics.scrape(), CONTENT_TYPE_LATEST
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: "
                f"{len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            pass  # the scraper went away or sent too much: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
