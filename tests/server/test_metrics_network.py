"""The network gauges of the Prometheus endpoint against a real broker: raw sockets announce
frames of known sizes, so the `queued.max.request.bytes` pool, the requests it holds back
and the connections per listener are known exactly; the scrape must say the same."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.embedded import EmbeddedBroker, broker
from tests.cluster_harness import wait_until
from tests.server.test_metrics import one, scrape

POOL = 100_000
AVAILABLE = "kafka_network_socketserver_memorypoolavailable"
USED = "kafka_network_socketserver_memorypoolused"
QUEUE = "kafka_network_requestchannel_requestqueuesize"
CONNECTIONS = "kafka_server_socket_server_metrics_connection_count"


@pytest.fixture
def pooled(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    overrides = {"metrics.listener": "http://127.0.0.1:0", "queued.max.request.bytes": str(POOL)}
    with broker(tmp_path / "data", overrides=overrides) as b:
        yield b


def _announce(port: int, size: int) -> socket.socket:
    """A connection that sent a frame's size and a few of its bytes (the rest never comes)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(struct.pack(">i", size) + b"\0" * 8)
    return sock


def test_memory_pool_and_request_queue_follow_what_is_in_flight(pooled: EmbeddedBroker) -> None:
    assert pooled.broker is not None and pooled.broker.metrics is not None
    port, kafka_port = pooled.broker.metrics.port, pooled.broker.network.port

    def pool() -> tuple[float, float, float]:
        s = scrape(port)
        assert one(s, AVAILABLE) + one(s, USED) == POOL  # always the configured capacity
        return one(s, USED), one(s, AVAILABLE), one(s, QUEUE)

    def connections() -> float:
        return one(scrape(port), CONNECTIONS, listener="PLAINTEXT", networkProcessor="0")

    assert pool() == (0, POOL, 0)
    before = connections()
    first = _announce(kafka_port, 60_000)  # reserved whole when its size is read
    wait_until(lambda: pool() == (60_000, 40_000, 0), 10, "the first frame reserved")
    second = _announce(kafka_port, 60_000)  # budget was left: reserved (non-strict pool)
    wait_until(lambda: pool() == (120_000, -20_000, 0), 10, "the second frame reserved")
    third = _announce(kafka_port, 1_000)  # the pool is exhausted: held back, queued
    wait_until(lambda: pool() == (120_000, -20_000, 1), 10, "the third frame queued")
    assert connections() - before == 3
    first.close()  # its reservation is given back; the third frame gets its own
    wait_until(lambda: pool() == (61_000, 39_000, 0), 10, "the third frame reserved")
    second.close()
    third.close()
    wait_until(lambda: pool() == (0, POOL, 0), 10, "every reservation given back")
    wait_until(lambda: connections() == before, 10, "the connections gone")


def test_an_unbounded_pool_reports_as_kafkas(tmp_path: Path) -> None:
    with broker(tmp_path / "data", overrides={"metrics.listener": "http://127.0.0.1:0"}) as b:
        assert b.broker is not None and b.broker.metrics is not None
        port, kafka_port = b.broker.metrics.port, b.broker.network.port
        held = _announce(kafka_port, 60_000)  # nothing is reserved from an unbounded pool
        try:
            wait_until(
                lambda: (
                    one(scrape(port), CONNECTIONS, listener="PLAINTEXT", networkProcessor="0") >= 1
                ),
                10,
                "the connection counted",
            )
            s = scrape(port)
            assert (one(s, USED), one(s, AVAILABLE), one(s, QUEUE)) == (0, float(2**63 - 1), 0)
        finally:
            held.close()
