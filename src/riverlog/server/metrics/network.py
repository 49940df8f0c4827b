"""The network layer's gauges, read at scrape time from the listeners and the request memory
pool (`server/listener.py`, `server/admission.py`); nothing is counted per request. Names
are those Kafka's MBeans get from the JMX exporter's rules (Strimzi's, for the connection
count, which the Strimzi and MSK dashboards read):

- `kafka_server_socket_server_metrics_connection_count{listener,networkProcessor}`: open
  client connections per listener (Kafka's socket-server-metrics connection-count; riverlog
  has one network "processor", the event loop: `networkProcessor="0"`);
- `kafka_network_socketserver_memorypoolavailable`, `..._memorypoolused`: the
  `queued.max.request.bytes` pool — bytes reserved by requests read and not yet answered,
  and what is left (capacity minus used; negative while a request larger than what was
  left is served, as Kafka's non-strict pool allows). Unbounded (-1, the default), requests
  reserve nothing: used 0 and available Long.MAX_VALUE, as Kafka's `MemoryPool.NONE`;
- `kafka_network_requestchannel_requestqueuesize`: requests received that wait to be
  handled. riverlog hands a request to its handler on the event loop as soon as its frame
  is whole (there is no queue between network and handler threads), so the requests that
  wait are those the memory pool holds back — one per connection stopped on it.

Invariant: read on the event loop thread, which is the only writer of what is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

LONG_MAX = 2**63 - 1
"""Java's Long.MAX_VALUE: Kafka's unbounded pool reports it as available."""


class NetworkGauges:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        networks = self.broker.networks
        connections = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Open client connections, per listener",
            labels=["listener", "networkProcessor"],
        )
        for network in networks:
            connections.add_metric([network.listener_name, "0"], len(network.connections))
        yield connections
        pool = networks[0].memory  # one pool, shared by every listener
        used = pool.used if pool.bounded else 0
        available = pool.capacity - used if pool.bounded else LONG_MAX
        yield GaugeMetricFamily(
            "kafka_network_socketserver_memorypoolavailable",
            "Bytes of queued.max.request.bytes not reserved by requests in flight",
            value=available,
        )
        yield GaugeMetricFamily(
            "kafka_network_socketserver_memorypoolused",
            "Bytes reserved by requests read and not yet answered",
            value=used,
        )
        yield GaugeMetricFamily(
            "kafka_network_requestchannel_requestqueuesize",
            "Requests received and waiting to be handled (held back by the memory pool)",
            value=pool.waiting,
        )
