"""DescribeClientQuotas / AlterClientQuotas against an in-process broker (Kafka's match types,
validate_only, refusals of what riverlog cannot honour), the znodes and notifications they
write as Kafka writes them, `riverlog configs --entity-default` for clients, and the other
two quotas enforced: consumer_byte_rate (a confluent-kafka consumer's throttle_cb fires) and
request_percentage (Metadata answers carry throttle_time_ms)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from riverlog.cli.main import main as cli_main
from riverlog.client.connection import connect_any
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from tests.cluster_harness import wait_until

Alter = m.AlterClientQuotasRequest
Describe = m.DescribeClientQuotasRequest


@pytest.fixture
def running(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with broker(tmp_path / "data") as b:
        yield b


def entity(**parts: str | None) -> list[Alter.EntityData]:
    return [
        Alter.EntityData(entity_type=kind.replace("_", "-"), entity_name=name)
        for kind, name in parts.items()
    ]


async def alter(
    bootstrap: str, entries: list[Alter.EntryData], validate_only: bool = False
) -> list[tuple[int, str | None]]:
    conn = await connect_any(bootstrap)
    try:
        response = await conn.send(Alter(entries=entries, validate_only=validate_only))
        assert isinstance(response, m.AlterClientQuotasResponse)
        return [(e.error_code, e.error_message) for e in response.entries]
    finally:
        await conn.close()


async def describe(
    bootstrap: str, components: list[Describe.ComponentData], strict: bool = False
) -> tuple[int, list[tuple[list[tuple[str, str | None]], dict[str, float]]]]:
    conn = await connect_any(bootstrap)
    try:
        response = await conn.send(Describe(components=components, strict=strict))
        assert isinstance(response, m.DescribeClientQuotasResponse)
        entries = [
            ([(p.entity_type, p.entity_name) for p in e.entity], {v.key: v.value for v in e.values})
            for e in response.entries or ()
        ]
        return response.error_code, entries
    finally:
        await conn.close()


def op(key: str, value: float = 0.0, remove: bool = False) -> Alter.OpData:
    return Alter.OpData(key=key, value=value, remove=remove)


def test_alter_and_describe_as_kafka_answers(running: EmbeddedBroker) -> None:
    b = running.bootstrap_servers
    assert running.broker is not None
    store = running.broker.store
    entries = [
        Alter.EntryData(entity=entity(client_id=None), ops=[op("consumer_byte_rate", 2048)]),
        Alter.EntryData(
            entity=entity(user="alice", client_id="app"), ops=[op("request_percentage", 12.5)]
        ),
        Alter.EntryData(entity=entity(client_id="app"), ops=[op("producer_byte_rate", 1024)]),
    ]
    assert asyncio.run(alter(b, entries, validate_only=True)) == [(0, None)] * 3
    assert asyncio.run(describe(b, [])) == (0, [])
    assert asyncio.run(alter(b, entries)) == [(0, None)] * 3

    node = json.loads(store.get("/config/clients/<default>").data)
    assert node == {"version": 1, "config": {"consumer_byte_rate": "2048"}}
    node = json.loads(store.get("/config/users/alice/clients/app").data)
    assert node == {"version": 1, "config": {"request_percentage": "12.5"}}
    changes = [
        json.loads(store.get(f"/config/changes/{c}").data)
        for c in sorted(store.children("/config/changes"))
    ]
    assert {"version": 2, "entity_path": "clients/<default>"}.items() <= changes[-3].items()
    assert changes[-2]["entity_path"] == "users/alice/clients/app"

    exact = Describe.ComponentData(entity_type="client-id", match_type=0, match="app")
    assert asyncio.run(describe(b, [exact], strict=True)) == (
        0,
        [([("client-id", "app")], {"producer_byte_rate": 1024.0})],
    )
    code, found = asyncio.run(describe(b, [exact]))
    assert code == 0
    assert [parts for parts, _ in found] == [
        [("client-id", "app")],
        [("user", "alice"), ("client-id", "app")],
    ]
    default = Describe.ComponentData(entity_type="client-id", match_type=1, match=None)
    assert asyncio.run(describe(b, [default], strict=True)) == (
        0,
        [([("client-id", None)], {"consumer_byte_rate": 2048.0})],
    )
    user = Describe.ComponentData(entity_type="user", match_type=2, match=None)
    assert len(asyncio.run(describe(b, [user]))[1]) == 1

    removal = [
        Alter.EntryData(entity=entity(client_id="app"), ops=[op("producer_byte_rate", remove=True)])
    ]
    assert asyncio.run(alter(b, removal)) == [(0, None)]
    assert asyncio.run(describe(b, [exact], strict=True)) == (0, [])
    assert not store.exists("/config/clients/app")


def test_what_riverlog_cannot_honour_is_refused(running: EmbeddedBroker) -> None:
    b = running.bootstrap_servers
    invalid = error_codes.INVALID_REQUEST.code
    for entry in (
        Alter.EntryData(entity=entity(client_id="x"), ops=[op("connection_creation_rate", 5)]),
        Alter.EntryData(entity=entity(ip="10.0.0.1"), ops=[op("producer_byte_rate", 5)]),
        Alter.EntryData(entity=entity(client_id="x"), ops=[op("producer_byte_rate", 1.5)]),
        Alter.EntryData(entity=entity(client_id="x"), ops=[op("producer_byte_rate", -1)]),
        Alter.EntryData(entity=[], ops=[op("producer_byte_rate", 5)]),
    ):
        [(code, message)] = asyncio.run(alter(b, [entry]))
        assert code == invalid and message
    assert asyncio.run(describe(b, [])) == (0, [])
    bad = Describe.ComponentData(entity_type="ip", match_type=2, match=None)
    assert asyncio.run(describe(b, [bad]))[0] == invalid


def test_configs_tool_sets_the_default_client(
    running: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    b = running.bootstrap_servers
    base = ["configs", "--bootstrap-server", b, "--entity-type", "clients", "--entity-default"]
    assert cli_main([*base, "--alter", "--add-config", "producer_byte_rate=4096"]) == 0
    assert cli_main([*base, "--describe"]) == 0
    assert cli_main([*base, "--alter", "--add-config", "log.retention.ms=1"]) == 1
    out = capsys.readouterr()
    assert out.out.splitlines() == [
        "Completed updating config for client default.",
        "Quota configs for the default client-id are producer_byte_rate=4096.0",
    ]
    assert "Invalid config(s): log.retention.ms" in out.err


def test_consumer_and_request_quotas_throttle(running: EmbeddedBroker) -> None:
    b = running.bootstrap_servers
    entries = [
        Alter.EntryData(entity=entity(client_id="slow"), ops=[op("consumer_byte_rate", 10_000)]),
        Alter.EntryData(entity=entity(client_id="busy"), ops=[op("request_percentage", 0.01)]),
    ]
    assert asyncio.run(alter(b, entries)) == [(0, None)] * 2
    assert running.broker is not None
    quotas = running.broker.client_quotas
    wait_until(lambda: len(quotas.quotas) == 2, 10, "the broker took the quotas")

    producer = Producer({"bootstrap.servers": b})
    for _ in range(100):
        producer.produce("slow-topic", b"x" * 5_000)
    assert producer.flush(30) == 0
    throttles: list[int] = []
    consumer = Consumer(
        {
            "bootstrap.servers": b,
            "client.id": "slow",
            "group.id": "slow-group",
            "auto.offset.reset": "earliest",
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    try:
        consumer.subscribe(["slow-topic"])

        def throttled() -> bool:
            consumer.poll(0.2)
            return any(throttles)

        wait_until(throttled, 30, "a throttle")
    finally:
        consumer.close()

    async def busy() -> list[int]:
        conn = await connect_any(b, client_id="busy")
        try:
            answers = []
            for _ in range(50):
                answer = await conn.send(m.MetadataRequest(topics=[]))
                assert isinstance(answer, m.MetadataResponse)
                answers.append(answer.throttle_time_ms)
            return answers
        finally:
            await conn.close()

    assert 0 < max(asyncio.run(busy())) <= 1000  # request throttles are capped at one window
