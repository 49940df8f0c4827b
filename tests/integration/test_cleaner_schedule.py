"""The log cleaner runs on its own schedule, as Kafka's (librdkafka's test 0077 counts on it):
a compacted topic's rolled segments are cleaned within seconds of becoming due, though
`log.retention.check.interval.ms` is 300 s, and an idle cleaner looks again after
`log.cleaner.backoff.ms`. Written and read with confluent-kafka."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from riverlog.embedded import EmbeddedBroker, broker
from tests.cluster_harness import wait_until


@pytest.fixture(scope="module")
def running() -> Iterator[EmbeddedBroker]:
    with broker(overrides={"log.cleaner.backoff.ms": "200"}) as b:
        yield b


def _read_all(bs: str, topic: str) -> list[tuple[bytes, bytes]]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bs, "group.id": uuid.uuid4().hex, "enable.partition.eof": True}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error():
            if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                break
            raise AssertionError(message.error())
        out.append((message.key(), message.value()))
    consumer.close()
    return out


def test_compaction_does_not_wait_for_the_retention_check(running: EmbeddedBroker) -> None:
    bs = running.bootstrap_servers
    topic = f"compact-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "300",
        "min.cleanable.dirty.ratio": "0.01",
    }
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for round_ in range(5):
        for key in (b"a", b"b"):
            producer.produce(topic, f"{key.decode()}{round_}".encode(), key, partition=0)
            producer.flush(30)
    producer.produce(topic, b"tail", b"z", partition=0)  # rolls the last keyed segment
    assert producer.flush(30) == 0
    assert len(_read_all(bs, topic)) == 11

    deadline = time.monotonic() + 30  # a tenth of log.retention.check.interval.ms
    while True:
        seen = _read_all(bs, topic)
        if len(seen) < 11:
            break
        assert time.monotonic() < deadline, "not compacted on the cleaner's own schedule"
        time.sleep(0.5)
    latest = dict(seen)
    assert latest[b"a"] == b"a4" and latest[b"b"] == b"b4"


def test_cleaner_settings_are_dynamic_broker_configs(running: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    resource = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry(
                "log.cleaner.backoff.ms", "300", incremental_operation=AlterConfigOpType.SET
            ),
            ConfigEntry(
                "log.cleaner.min.compaction.lag.ms",
                "5",
                incremental_operation=AlterConfigOpType.SET,
            ),
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert running.broker is not None
    wait_until(lambda: running.broker.logs.cleaner_backoff_ms == 300, 10, "backoff applied")
    topic = f"lag-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    described = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([described])[described].result(30)
    assert entries["min.compaction.lag.ms"].value == "5"
