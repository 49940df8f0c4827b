"""DescribeConfigs as Kafka 3.9 answers it: every broker key, those without a value
(`advertised.listeners` unset) listed with null; v3+ `config_type` and, when asked,
Kafka's documentation; synonyms when asked. Through confluent-kafka (librdkafka), kafka-python
and riverlog.client (v4, which the other two do not send)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType

from riverlog.client.connection import connect_any
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
from riverlog.server import config_docs


@pytest.fixture(scope="module")
def running() -> Iterator[EmbeddedBroker]:
    with broker() as b:
        yield b


def test_confluent_sees_unset_keys_with_null(running: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    resource = ConfigResource(confluent_kafka.admin.ResourceType.BROKER, "0")
    entries = admin.describe_configs([resource])[resource].result(30)
    assert "advertised.listeners" in entries
    assert entries["advertised.listeners"].value is None
    assert entries["log.retention.hours"].value == "168"


def test_kafka_python_sees_unset_keys(running: EmbeddedBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
    try:
        described = admin.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
        )
    finally:
        admin.close()
    entries = described["broker"]["0"]
    assert entries["advertised.listeners"]["value"] is None
    assert entries["num.partitions"]["value"] == "1"


def _describe_v4(bootstrap: str, resource_type: int, name: str) -> dict[str, object]:
    async def ask() -> dict[str, object]:
        conn = await connect_any(bootstrap)
        try:
            request = DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=resource_type, resource_name=name, configuration_keys=None
                    )
                ],
                include_synonyms=False,
                include_documentation=True,
            )
            response = await conn.send(request, 4)
        finally:
            await conn.close()
        assert isinstance(response, DescribeConfigsResponse)
        return {c.name: c for c in response.results[0].configs}

    return asyncio.run(ask())


def test_v4_types_and_documentation(running: EmbeddedBroker) -> None:
    bs = running.bootstrap_servers
    topic = f"types-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    topic_entries = _describe_v4(bs, 2, topic)
    expected = {
        "retention.ms": config_docs.LONG,
        "segment.bytes": config_docs.INT,
        "cleanup.policy": config_docs.LIST,
        "min.cleanable.dirty.ratio": config_docs.DOUBLE,
        "preallocate": config_docs.BOOLEAN,
        "compression.type": config_docs.STRING,
    }
    for name, kind in expected.items():
        assert topic_entries[name].config_type == kind, name  # type: ignore[attr-defined]
    doc = topic_entries["retention.ms"].documentation  # type: ignore[attr-defined]
    assert doc.startswith("This configuration controls the maximum time we will retain a log")
    broker_entries = _describe_v4(bs, 4, "0")
    assert broker_entries["advertised.listeners"].value is None  # type: ignore[attr-defined]
    assert broker_entries["num.partitions"].config_type == config_docs.INT  # type: ignore[attr-defined]
    assert all(e.config_type != config_docs.UNKNOWN for e in broker_entries.values())  # type: ignore[attr-defined]
