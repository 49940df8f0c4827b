"""The broker's Prometheus endpoint: `metrics.listener=http://HOST:PORT` serves `GET /metrics`
in Prometheus' text format; unset (the default), there is no endpoint and no counting.

One `BrokerMetrics` per broker holds the registry that every source is registered in — the
request counters the dispatcher feeds (`requests.RequestMetrics`), the gauges computed
from the broker's state at scrape time (`gauges.BrokerGauges`, `network.NetworkGauges`) and
the ISR and rebalance counts (`membership.MembershipMetrics`) — and serves it with the small
HTTP/1.1 responder of `riverlog/metrics_http.py` on the broker's event loop, so a scrape
reads the broker's state on the thread that changes it.

Invariant: a `metrics.listener` that is not `http://HOST:PORT` stops the broker's start-up
(`parse_listener`); the endpoint binds only the host it is given.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest

from riverlog.metrics_http import MetricsServer, parse_listener
from riverlog.server.metrics.gauges import BrokerGauges
from riverlog.server.metrics.membership import MembershipMetrics
from riverlog.server.metrics.network import NetworkGauges
from riverlog.server.metrics.requests import RequestMetrics

if TYPE_CHECKING:
    from riverlog.server.broker import Broker


class BrokerMetrics:
    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        names = {
            cls.API_KEY: cls.NAME.removesuffix("Request")
            for cls in broker.dispatcher.request_classes()
        }
        self.requests = RequestMetrics(names, self._topic_name)
        self.gauges = BrokerGauges(broker)
        self.registry.register(self.requests)
        self.registry.register(self.gauges)
        self.registry.register(NetworkGauges(broker))
        self.registry.register(MembershipMetrics(broker))
        self.registry.register(broker.client_quotas)
        self._names_by_id: dict[uuid.UUID, str] = {}
        self.server = MetricsServer(self.scrape, host, port)

    @property
    def port(self) -> int:
        """The bound port (known once started, when the listener asked for port 0)."""
        return self.server.port

    def _topic_name(self, topic_id: uuid.UUID) -> str:
        name = self._names_by_id.get(topic_id)
        if name is None:
            self._names_by_id = {i: n for n, i in self.broker.metadata.topic_ids.items()}
            name = self._names_by_id.get(topic_id, str(topic_id))
        return name

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
        await self.gauges.close()

    async def scrape(self) -> bytes:
        await self.gauges.refresh_remote_ends()
        return generate_latest(self.registry)


def for_broker(broker: Broker) -> BrokerMetrics | None:
    """The broker's metrics, wired into its dispatcher; None when `metrics.listener` is unset."""
    address = parse_listener(broker.config["metrics.listener"])
    if address is None:
        return None
    metrics = BrokerMetrics(broker, *address)
    broker.dispatcher.metrics = metrics.requests
    return metrics
