"""DeleteRecords and ListOffsets at the edges, through real clients: an offset below -1 or
above the high watermark answers OFFSET_OUT_OF_RANGE (librdkafka via confluent-kafka,
kafka-python), -1 deletes up to the high watermark; ListOffsets' earliest-local (-4) is the
earliest offset and latest-tiered (-5) none, riverlog having no tiered storage."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaAdminClient
from kafka.errors import OffsetOutOfRangeError
from kafka.structs import TopicPartition as KpTopicPartition

from riverlog.client import admin_requests as admin
from riverlog.client.connection import connect_any
from riverlog.embedded import EmbeddedBroker, broker


@pytest.fixture(scope="module")
def running() -> Iterator[EmbeddedBroker]:
    with broker() as b:
        yield b


def _topic_with_records(bs: str, count: int) -> str:
    name = f"dr-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bs})
    for i in range(count):
        producer.produce(name, str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    return name


def test_confluent_delete_records_out_of_range(running: EmbeddedBroker) -> None:
    bs = running.bootstrap_servers
    topic = _topic_with_records(bs, 3)
    admin = AdminClient({"bootstrap.servers": bs})
    for bad in (-2, 4):
        tp = confluent_kafka.TopicPartition(topic, 0, bad)
        with pytest.raises(confluent_kafka.KafkaException) as caught:
            admin.delete_records([tp])[tp].result(timeout=30)
        assert caught.value.args[0].code() == confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE
    tp = confluent_kafka.TopicPartition(topic, 0, -1)
    deleted = admin.delete_records([tp])[tp].result(timeout=30)
    assert deleted.low_watermark == 3

    tp = confluent_kafka.TopicPartition(topic, 0)
    for spec, expected in ((OffsetSpec.earliest(), 3), (OffsetSpec.latest(), 3)):
        assert admin.list_offsets({tp: spec})[tp].result(timeout=30).offset == expected


def test_kafka_python_delete_records_out_of_range(running: EmbeddedBroker) -> None:
    bs = running.bootstrap_servers
    topic = _topic_with_records(bs, 2)
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({KpTopicPartition(topic, 0): 7})
        result = admin.delete_records({KpTopicPartition(topic, 0): 1})
        assert result[KpTopicPartition(topic, 0)]["low_watermark"] == 1
    finally:
        admin.close()


@pytest.mark.parametrize(("timestamp", "expected"), [(-4, 0), (-5, -1)])
def test_list_offsets_earliest_local_and_latest_tiered(
    running: EmbeddedBroker, timestamp: int, expected: int
) -> None:
    topic = _topic_with_records(running.bootstrap_servers, 2)

    async def ask() -> int:
        conn = await connect_any(running.bootstrap_servers)
        try:
            found = await admin.list_offsets(conn, [(topic, 0)], timestamp)
        finally:
            await conn.close()
        return found[(topic, 0)]

    assert asyncio.run(ask()) == expected
