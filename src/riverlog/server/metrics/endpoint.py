"""The broker's Prometheus endpoint: `metrics.listener=http://HOST:PORT` serves `GET /metrics`
in Prometheus' text format; unset (the default), there is no endpoint and no counting.

One `BrokerMetrics` per broker holds the registry that every source is registered in — the
request counters the dispatcher feeds (`requests.RequestMetrics`), the gauges computed
from the broker's state at scrape time (`gauges.BrokerGauges`, `network.NetworkGauges`) and
the ISR and rebalance counts (`membership.MembershipMetrics`) — and serves it with a small
HTTP/1.1 responder on the broker's event loop, so a scrape reads the broker's state on the
thread that changes it. Each connection gets one answer and is closed; a request line that
is not `GET /metrics` (or `/`) is answered 404, a malformed one 400; a head over 8 KiB
or slower than 10 s closes the connection unanswered.

Invariant: a `metrics.listener` that is not `http://HOST:PORT` stops the broker's start-up
(`parse_listener`); the endpoint binds only the host it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from riverlog.server.metrics.gauges import BrokerGauges
from riverlog.server.metrics.membership import MembershipMetrics
from riverlog.server.metrics.network import NetworkGauges
from riverlog.server.metrics.requests import RequestMetrics

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)
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


class BrokerMetrics:
    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.host, self.port = host, port
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
        self._server: asyncio.Server | None = None

    def _topic_name(self, topic_id: uuid.UUID) -> str:
        name = self._names_by_id.get(topic_id)
        if name is None:
            self._names_by_id = {i: n for n, i in self.broker.metadata.topic_ids.items()}
            name = self._names_by_id.get(topic_id, str(topic_id))
        return name

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=MAX_REQUEST_HEAD
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.gauges.close()

    async def scrape(self) -> bytes:
        await self.gauges.refresh_remote_ends()
        return generate_latest(self.registry)

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
                status, body, kind = "200 OK", await self.scrape(), CONTENT_TYPE_LATEST
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


def for_broker(broker: Broker) -> BrokerMetrics | None:
    """The broker's metrics, wired into its dispatcher; None when `metrics.listener` is unset."""
    address = parse_listener(broker.config["metrics.listener"])
    if address is None:
        return None
    metrics = BrokerMetrics(broker, *address)
    broker.dispatcher.metrics = metrics.requests
    return metrics
