"""Real clients against a real broker process: confluent-kafka, kafka-python, aiokafka, kcat.

Every test produces with the client's own producer and reads back with its own consumer (or
another client's), comparing records exactly.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.integration.conftest import BrokerProcess

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    """A librdkafka consumer used with assign(): no group membership, no commits."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            **extra,
        }
    )


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(bootstrap: str, topic: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=config)])
    futures[topic].result(15)


def _consume_all(
    bootstrap: str, topic: str, count: int, partitions: int = 1, offset: int = 0
) -> list[tuple[bytes | None, bytes | None, list, int]]:
    consumer = _consumer(bootstrap)
    consumer.assign([TopicPartition(topic, p, offset) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.key(), msg.value(), msg.headers() or [], msg.offset()))
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_kafka_round_trip(broker_process: BrokerProcess, codec: str, acks: str) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = _topic(f"ck-{codec}")
    _create(bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 5,
        }
    )
    sent = [
        (
            f"key-{i % 5}".encode(),
            f"value {i} ".encode() * (i % 7 + 1),
            [("trace", f"t{i}".encode()), ("empty", None)],
        )
        for i in range(300)
    ]
    for key, value, headers in sent:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(20) == 0
    got = _consume_all(bootstrap, topic, len(sent))
    assert [(k, v, h) for k, v, h, _ in got] == [(k, v, list(h)) for k, v, h in sent]
    assert [o for *_, o in got] == list(range(len(sent)))


def test_consume_from_latest_and_from_a_timestamp(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = _topic("times")
    _create(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    base = int(time.time() * 1000) - 100_000
    for i in range(50):
        producer.produce(topic, value=b"%d" % i, timestamp=base + i * 1000)
    producer.flush(10)
    consumer = _consumer(bootstrap)
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 20_500)], 10)
        assert found[0].offset == 21
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
        assert (low, high) == (0, 50)
    finally:
        consumer.close()
    # From "latest": only records produced after the assignment arrive.
    consumer = _consumer(bootstrap)
    consumer.assign([TopicPartition(topic, 0, -1)])  # OFFSET_END
    try:
        deadline = time.monotonic() + 10
        # Give the consumer time to resolve "end" (a ListOffsets round trip) and start fetching;
        # position() cannot tell: librdkafka reports it only once a record was consumed.
        settle = time.monotonic() + 1.5
        while time.monotonic() < settle:
            assert consumer.poll(0.1) is None
        producer.produce(topic, value=b"after")
        producer.flush(10)
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.value() == b"after" and msg.offset() == 50
    finally:
        consumer.close()


def test_long_poll_wakes_on_produce(broker_process: BrokerProcess) -> None:
    """A consumer waiting in a long poll gets new data at once, not after fetch.wait.max.ms."""
    bootstrap = broker_process.bootstrap_servers
    topic = _topic("wake")
    _create(bootstrap, topic)
    consumer = _consumer(bootstrap, **{"fetch.wait.max.ms": 5000, "fetch.min.bytes": 1})
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    try:
        consumer.poll(1.0)  # the fetch is now parked in the broker's purgatory
        latencies = []
        for i in range(5):
            time.sleep(0.3)
            sent_at = time.monotonic()
            producer.produce(topic, value=b"%d" % i)
            producer.flush(5)
            msg = consumer.poll(5)
            assert msg is not None and msg.error() is None
            latencies.append(time.monotonic() - sent_at)
        assert sorted(latencies)[2] < 0.5, latencies  # far below the 5 s max wait
    finally:
        consumer.close()


def test_admin_topics_partitions_configs(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = _topic("admin")
    admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "60000"})])[topic].result(10)
    with pytest.raises(KafkaException) as exists:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
    assert "already exists" in str(exists.value)
    with pytest.raises(KafkaException):
        bad = _topic("bad")
        admin.create_topics([NewTopic(bad, 1, 1, config={"no.such": "1"})])[bad].result(10)
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4
    resource = ConfigResource("topic", topic)
    described = admin.describe_configs([resource])[resource].result(10)
    assert described["retention.ms"].value == "60000"
    assert described["cleanup.policy"].value == "delete"
    change = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([change])[change].result(10)
    described = admin.describe_configs([resource])[resource].result(10)
    assert described["cleanup.policy"].value == "compact,delete"
    assert described["retention.ms"].value == "604800000"  # back to the default
    bad = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("segment.bytes", "12", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException, match=r"segment\.bytes"):
        admin.incremental_alter_configs([bad])[bad].result(10)
    admin.delete_topics([topic])[topic].result(10)
    assert topic not in admin.list_topics(timeout=10).topics


def test_kafka_python_default_producer_is_idempotent(broker_process: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    bootstrap = broker_process.bootstrap_servers
    topic = _topic("kpy")
    _create(bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap)  # defaults: idempotent, acks=all
    futures = [
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)])
        for i in range(200)
    ]
    offsets = [f.get(timeout=20).offset for f in futures]
    producer.close()
    assert offsets == list(range(200))
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    consumer.assign([KTopicPartition(topic, 0)])
    got = [(m.key, m.value, m.headers) for m in consumer]
    consumer.close()
    assert got == [(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)]) for i in range(200)]


def test_aiokafka_round_trip(broker_process: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    bootstrap = broker_process.bootstrap_servers
    topic = _topic("aio")
    _create(bootstrap, topic)

    async def run() -> list[tuple[bytes | None, bytes | None]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
        await producer.start()
        try:
            for i in range(100):
                await producer.send_and_wait(topic, key=b"a%d" % i, value=b"b%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(topic, 0)])
            got: list[tuple[bytes | None, bytes | None]] = []
            while len(got) < 100:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                for records in batch.values():
                    got += [(r.key, r.value) for r in records]
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert got == [(b"a%d" % i, b"b%d" % i) for i in range(100)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by ./dev setup")
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_and_consume(broker_process: BrokerProcess, codec: str) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = _topic(f"kcat-{codec}")
    _create(bootstrap, topic)
    lines = [f"key{i}:value {i}" for i in range(50)]
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-z", codec, "-K", ":"],
        input="\n".join(lines).encode(),
        check=True,
        timeout=30,
    )
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-f", "%k:%s\n"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.decode().splitlines() == lines
    listing = subprocess.run(
        ["kcat", "-L", "-b", bootstrap, "-t", topic], capture_output=True, check=True, timeout=30
    )
    assert f'topic "{topic}" with 1 partitions' in listing.stdout.decode()


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10, 1)])
@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
def test_old_clients_use_legacy_message_formats(
    broker_process: BrokerProcess, api_version: tuple[int, ...], codec: str | None
) -> None:
    """kafka-python pinned to 0.9 / 0.10 speaks Produce v1-2 and Fetch v1-3: magic 0 and 1
    message sets, converted on the way in and out."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    if codec == "lz4" and api_version == (0, 9):
        pytest.skip("kafka-python needs the xxhash package to write magic-0 lz4")
    bootstrap = broker_process.bootstrap_servers
    topic = _topic("old")
    _create(bootstrap, topic)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        api_version=api_version,
        compression_type=codec,
        enable_idempotence=False,
        acks=1,
    )
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(50)]
    assert [f.get(timeout=20).offset for f in futures] == list(range(50))
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        api_version=api_version,
        group_id=None,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1500,
    )
    consumer.assign([KTopicPartition(topic, 0)])
    got = [(m.offset, m.key, m.value) for m in consumer]
    consumer.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(50)]
