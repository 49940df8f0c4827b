"""Dynamic broker configs Kafka allows: the connection limits (`max.connections`,
`max.connections.per.ip`, `max.connections.per.ip.overrides`) set through
IncrementalAlterConfigs (librdkafka via confluent-kafka) apply to new connections at once;
Kafka's dynamic keys riverlog cannot honour (`sasl.kerberos.*`, per-listener TLS stores)
are refused with Kafka's answer for a key it cannot update dynamically, and nothing is
stored.

Connections are made from 127.0.0.2 (loopback too), so the limit under test is that
address's override, untouched by the admin client's own connections from 127.0.0.1."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from riverlog.client.connection import parse_bootstrap
from riverlog.embedded import EmbeddedBroker, broker

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 4) + b"test"


@pytest.fixture(scope="module")
def running() -> Iterator[EmbeddedBroker]:
    with broker() as b:
        yield b


def _alter(bs: str, entries: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs on broker 0: SET each value, DELETE each None."""
    admin = AdminClient({"bootstrap.servers": bs})
    resource = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry(
                key,
                value or "",
                incremental_operation=(
                    AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
                ),
            )
            for key, value in entries.items()
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)


def _served(bs: str, count: int) -> list[bool]:
    """Open `count` connections from 127.0.0.2 at once; which of them get an answer to an
    ApiVersions request (a refused one is closed by the broker)."""
    host, port = parse_bootstrap(bs)[0]

    async def run() -> list[bool]:
        streams = []
        try:
            answered = []
            for _ in range(count):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=("127.0.0.2", 0)
                )
                streams.append(writer)
                writer.write(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
                await writer.drain()
                try:
                    async with asyncio.timeout(10):
                        size = struct.unpack(">i", await reader.readexactly(4))[0]
                        await reader.readexactly(size)
                    answered.append(True)
                except (asyncio.IncompleteReadError, ConnectionError):
                    answered.append(False)
            return answered
        finally:
            for writer in streams:
                writer.close()

    return asyncio.run(run())


def test_connection_limits_change_without_a_restart(running: EmbeddedBroker) -> None:
    bs = running.bootstrap_servers
    assert _served(bs, 3) == [True, True, True]
    _alter(bs, {"max.connections.per.ip.overrides": "127.0.0.2:2"})
    assert _served(bs, 3) == [True, True, False]
    _alter(bs, {"max.connections.per.ip.overrides": "127.0.0.2:3"})
    assert _served(bs, 4) == [True, True, True, False]
    _alter(bs, {"max.connections.per.ip.overrides": None})
    assert _served(bs, 4) == [True] * 4


@pytest.mark.parametrize(
    "key",
    ["sasl.kerberos.service.name", "listener.name.plaintext.ssl.keystore.location"],
)
def test_dynamic_keys_riverlog_cannot_honour_are_refused(running: EmbeddedBroker, key: str) -> None:
    bs = running.bootstrap_servers
    with pytest.raises(KafkaException) as refused:
        _alter(bs, {key: "kafka"})
    error = refused.value.args[0]
    assert error.name() == "INVALID_REQUEST"
    assert error.str() == f"Cannot update these configs dynamically: Set({key})"
    admin = AdminClient({"bootstrap.servers": bs})
    resource = ConfigResource(ResourceType.BROKER, "0")
    described = admin.describe_configs([resource])[resource].result(30)
    assert key not in described or described[key].source != 2  # nothing stored
