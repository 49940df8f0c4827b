"""Bad record batches against a broker process, and the log read back by four real clients.

Each crafted batch (correct CRC around bad contents) is produced with a hand-made Produce v9
request and gets its Kafka error code, `error_message` and, where records are at fault,
KIP-467 `record_errors` (read with the generated ProduceResponse); the broker keeps serving
on the same connection. librdkafka (confluent-kafka) sees key-less records on a compacted
topic fail with INVALID_RECORD and their batch neighbours with _INVALID_DIFFERENT_RECORD, as
its test 0011 expects. Then confluent-kafka, kafka-python, aiokafka and riverlog's consumer
read the whole log end to end. Last, corrupt batches planted in a segment file (data already
on disk) meet ListOffsets by time, old-format fetches and riverlog's consumer over the wire.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.protocol import error_codes, messages
from riverlog.protocol.framing import decode_response, encode_request
from riverlog.protocol.records import compression
from riverlog.protocol.records.batch_header import read_batch_header
from tests.integration.conftest import BrokerProcess, start_broker
from tests.protocol import crafted

GOOD_BEFORE = [(b"k%d" % i, b"before-%d" % i) for i in range(5)]
GOOD_AFTER = [(b"k%d" % i, b"after-%d" % i) for i in range(5)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    running = start_broker(tmp_path_factory.mktemp("validation") / "data")
    try:
        yield running
    finally:
        running.stop()


def _create(bootstrap: str, name: str, **config: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(15)
    return name


class RawClient:
    """One connection speaking Produce by hand (what a buggy or hostile client would send)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.correlation = 0

    def produce(self, topic: str, batch: bytes, version: int = 9) -> messages.ProduceResponse:
        self.correlation += 1
        request = messages.ProduceRequest(
            acks=1,
            timeout_ms=5000,
            topic_data=[
                messages.ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[
                        messages.ProduceRequest.PartitionProduceData(index=0, records=batch)
                    ],
                )
            ],
        )
        self.sock.sendall(encode_request(request, version, self.correlation, "raw"))
        (size,) = struct.unpack(">i", self._exactly(4))
        correlation, response = decode_response(self._exactly(size), request.API_KEY, version)
        assert correlation == self.correlation
        assert isinstance(response, messages.ProduceResponse)
        return response

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def _answer(
    response: messages.ProduceResponse,
) -> messages.ProduceResponse.PartitionProduceResponse:
    return response.responses[0].partition_responses[0]


KEYS: list[bytes | None] = [None if i % 10 == 0 else b"k%d" % i for i in range(30)]
CASES = {
    "gzip-garbage": ("plain", lambda: crafted.garbage(compression.GZIP), "CORRUPT_MESSAGE"),
    "snappy-garbage": ("plain", lambda: crafted.garbage(compression.SNAPPY), "CORRUPT_MESSAGE"),
    "lz4-garbage": ("plain", lambda: crafted.garbage(compression.LZ4), "CORRUPT_MESSAGE"),
    "zstd-garbage": ("plain", lambda: crafted.garbage(compression.ZSTD), "CORRUPT_MESSAGE"),
    "codec-5": ("plain", lambda: crafted.unknown_codec(5), "CORRUPT_MESSAGE"),
    "codec-7": ("plain", lambda: crafted.unknown_codec(7), "CORRUPT_MESSAGE"),
    "count-2^31-1": ("plain", lambda: crafted.lying_count(2**31 - 1), "INVALID_RECORD"),
    "count-4": ("plain", lambda: crafted.lying_count(4), "INVALID_RECORD"),
    "bomb": ("plain", lambda: crafted.bomb(compression.ZSTD), "INVALID_RECORD"),
    "bomb-compacted": ("compact", lambda: crafted.bomb(compression.ZSTD), "INVALID_RECORD"),
    "key-less-compacted": ("compact", lambda: crafted.records(KEYS), "INVALID_RECORD"),
    "old-timestamps": (
        "strict",
        lambda: crafted.good(3, ts=crafted.now_ms() - 7_200_000),
        "INVALID_TIMESTAMP",
    ),
    "future-timestamps": (
        "strict",
        lambda: crafted.good(3, ts=crafted.now_ms() + 7_200_000),
        "INVALID_TIMESTAMP",
    ),
}


@pytest.fixture(scope="module")
def topics(broker: BrokerProcess) -> dict[str, str]:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    names = {
        "plain": _create(bootstrap, f"plain-{suffix}"),
        "compact": _create(bootstrap, f"compact-{suffix}", **{"cleanup.policy": "compact"}),
        "strict": _create(
            bootstrap,
            f"strict-{suffix}",
            **{
                "message.timestamp.before.max.ms": "3600000",
                "message.timestamp.after.max.ms": "3600000",
            },
        ),
    }
    return names


def _send_bad_cases(client: RawClient, topics: dict[str, str]) -> None:
    for name, (topic, make, code) in CASES.items():
        answer = _answer(client.produce(topics[topic], make()))
        assert answer.error_code == getattr(error_codes, code).code, (name, answer)
        assert answer.base_offset == -1
        assert answer.error_message, name
        if name == "key-less-compacted":
            assert [e.batch_index for e in answer.record_errors] == [0, 10, 20]
            assert {e.batch_index_error_message for e in answer.record_errors} == {
                "Compacted topic cannot accept message without key."
            }
        elif "timestamps" in name:
            assert [e.batch_index for e in answer.record_errors] == [0, 1, 2]
        else:
            assert answer.record_errors == [], name


@pytest.mark.parametrize("case", list(CASES))
def test_each_bad_batch_gets_its_error(
    broker: BrokerProcess, topics: dict[str, str], case: str
) -> None:
    topic, make, code = CASES[case]
    client = RawClient(broker.bootstrap_servers)
    try:
        answer = _answer(client.produce(topics[topic], make()))
        assert answer.error_code == getattr(error_codes, code).code, answer
        assert answer.error_message
        # The same connection goes on serving: a good batch lands.
        assert _answer(client.produce(topics[topic], crafted.good(1))).error_code == 0
        # Before v8 the response has no room for the details; the code is the same.
        old = _answer(client.produce(topics[topic], make(), version=7))
        assert (old.error_code, old.error_message, old.record_errors) == (
            answer.error_code,
            None,
            [],
        )
    finally:
        client.close()


def _produce_good(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[object] = []
    for key, value in records:
        producer.produce(topic, value, key=key, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(20) == 0
    assert errors == [None] * len(records)


def _read_confluent(bootstrap: str, topic: str, n: int) -> list[tuple[bytes | None, bytes | None]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "v", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def _read_kafka_python(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    consumer.assign([KTopicPartition(topic, 0)])
    try:
        return [(m.key, m.value) for m in consumer]
    finally:
        consumer.close()


def _read_aiokafka(bootstrap: str, topic: str, n: int) -> list[tuple[bytes | None, bytes | None]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    async def run() -> list[tuple[bytes | None, bytes | None]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(topic, 0)])
            got: list[tuple[bytes | None, bytes | None]] = []
            deadline = time.monotonic() + 20
            while len(got) < n and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    got += [(r.key, r.value) for r in records]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


def _read_riverlog(bootstrap: str, topic: str, n: int) -> list[tuple[bytes | None, bytes | None]]:
    from riverlog.client import Consumer as RiverlogConsumer

    consumer = RiverlogConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([(topic, 0)])
        got: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got += [(r.key, r.value) for r in consumer.poll(500)]
        return got
    finally:
        consumer.close()


def test_the_log_stays_readable_by_every_client(
    broker: BrokerProcess, topics: dict[str, str]
) -> None:
    bootstrap = broker.bootstrap_servers
    topic = _create(bootstrap, f"readable-{uuid.uuid4().hex[:6]}")
    _produce_good(bootstrap, topic, GOOD_BEFORE)
    client = RawClient(bootstrap)
    try:
        _send_bad_cases(
            client, {"plain": topic, "compact": topics["compact"], "strict": topics["strict"]}
        )
    finally:
        client.close()
    _produce_good(bootstrap, topic, GOOD_AFTER)
    expected = GOOD_BEFORE + GOOD_AFTER
    assert _read_confluent(bootstrap, topic, len(expected)) == expected
    assert _read_kafka_python(bootstrap, topic) == expected
    assert _read_aiokafka(bootstrap, topic, len(expected)) == expected
    assert _read_riverlog(bootstrap, topic, len(expected)) == expected


@pytest.mark.parametrize("one_per_batch", [False, True])
def test_librdkafka_fails_exactly_the_key_less_records(
    broker: BrokerProcess, one_per_batch: bool
) -> None:
    """librdkafka's 0011 `test_message_single_partition_record_fail`, through confluent-kafka."""
    bootstrap = broker.bootstrap_servers
    topic = _create(bootstrap, f"rf-{uuid.uuid4().hex[:6]}", **{"cleanup.policy": "compact"})
    config = {"bootstrap.servers": bootstrap, "linger.ms": 500}
    if one_per_batch:
        config["batch.size"] = 1
    producer = Producer(config)
    outcomes: list[int] = []
    for i in range(100):
        key = None if i % 10 == 0 else b"key-%d" % i
        producer.produce(
            topic,
            b"message #%d" % i,
            key=key,
            partition=0,
            on_delivery=lambda e, _m: outcomes.append(e.code() if e else 0),
        )
    assert producer.flush(30) == 0
    counts = {code: outcomes.count(code) for code in set(outcomes)}
    if one_per_batch:
        assert counts == {KafkaError.INVALID_RECORD: 10, 0: 90}
    else:
        assert counts == {KafkaError.INVALID_RECORD: 10, KafkaError._INVALID_DIFFERENT_RECORD: 90}


# --- corrupt batches already on disk, read over the wire -----------------------------------


def _plant(segment: Path, batches: list[bytes]) -> list[int]:
    """Append `batches` to a segment file after its last batch; their base offsets."""
    data = segment.read_bytes()
    pos, next_offset = 0, 0
    while pos < len(data):
        header = read_batch_header(data, pos)
        pos, next_offset = pos + header.size, header.next_offset
    offsets = []
    with segment.open("ab") as f:
        for batch in batches:
            raw = bytearray(batch)
            raw[0:8] = next_offset.to_bytes(8, "big")
            offsets.append(next_offset)
            next_offset += read_batch_header(raw).last_offset_delta + 1
            f.write(raw)
    return offsets


def test_corrupt_data_on_disk_is_skipped_or_reported(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_broker(data_dir)
    bootstrap = first.bootstrap_servers
    topic = _create(bootstrap, "rot")
    _produce_good(bootstrap, topic, GOOD_BEFORE)
    assert first.stop() == 0
    segment = data_dir / f"{topic}-0" / ("0" * 20 + ".log")
    bad = _plant(
        segment,
        [
            crafted.garbage(compression.GZIP),
            crafted.bomb(compression.ZSTD),
            crafted.lying_count(50),
            crafted.unknown_codec(5),
        ],
    )
    after_rot = crafted.good(2, ts=crafted.now_ms() + 60_000)
    (good_offset,) = _plant(segment, [after_rot])
    second = start_broker(data_dir)
    bootstrap = second.bootstrap_servers
    try:
        # ListOffsets by time lands on the unreadable batches and goes on past them.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t"})
        stamp = read_batch_header(after_rot).max_timestamp
        found = consumer.offsets_for_times([TopicPartition(topic, 0, stamp)], timeout=15)
        assert found[0].offset == good_offset
        consumer.close()
        # Old fetch versions (down-conversion to magic 1) get the readable batches.
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTopicPartition

        old = KafkaConsumer(
            bootstrap_servers=bootstrap,
            api_version=(0, 10, 1),
            group_id=None,
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
        )
        old.assign([KTopicPartition(topic, 0)])
        got = [(m.offset, m.key) for m in old]
        old.close()
        assert [k for _, k in got] == [k for k, _ in GOOD_BEFORE] + [b"k", b"k"]
        # riverlog's consumer names the batch it cannot read; seeking past it goes on.
        from riverlog.client import Consumer as RiverlogConsumer
        from riverlog.protocol.error_codes import KafkaError as RiverlogError

        reader = RiverlogConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
        try:
            reader.assign([(topic, 0)])
            reader.seek((topic, 0), 0)
            before: list[object] = []
            with pytest.raises(RiverlogError, match=f"offsets {bad[0]}\\.\\.") as e:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    before += reader.poll(500)
            assert e.value.error is error_codes.CORRUPT_MESSAGE
            assert len(before) == len(GOOD_BEFORE)  # handed out before the error
            for offset in bad[1:]:
                reader.seek((topic, 0), offset)
                with pytest.raises(RiverlogError, match=f"offsets {offset}\\.\\."):
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline:
                        reader.poll(500)
            reader.seek((topic, 0), good_offset)
            records: list[object] = []
            deadline = time.monotonic() + 20
            while len(records) < 2 and time.monotonic() < deadline:
                records += reader.poll(500)
            assert len(records) == 2
        finally:
            reader.close()
        assert second.proc.poll() is None  # still serving
    finally:
        second.stop()
    assert os.path.exists(segment)


def test_the_request_version_decides_what_a_record_set_may_hold(
    broker: BrokerProcess, topics: dict[str, str]
) -> None:
    """Kafka's `ProduceRequest.validateRecords`: from Produce v3 exactly one batch of magic 2
    per partition, zstd only from v7 (KIP-110); before v3 anything that validates."""
    topic = topics["plain"]
    client = RawClient(broker.bootstrap_servers)
    try:
        two = crafted.good(1) + crafted.good(2)
        answer = _answer(client.produce(topic, two, version=9))
        assert answer.error_code == error_codes.INVALID_RECORD.code
        assert answer.error_message == (
            "Produce requests with version 9 are only allowed to contain exactly one record"
            " batch per partition"
        )
        assert _answer(client.produce(topic, two, version=2)).error_code == 0
        zstd = crafted.good(2, codec=compression.ZSTD)
        old = _answer(client.produce(topic, zstd, version=6))
        assert old.error_code == error_codes.UNSUPPORTED_COMPRESSION_TYPE.code
        assert _answer(client.produce(topic, zstd, version=7)).error_code == 0
        legacy = bytearray(crafted.good(1))
        legacy[16] = 1  # magic 1 where v3+ wants 2
        wrong = _answer(client.produce(topic, bytes(legacy), version=3))
        assert wrong.error_code == error_codes.INVALID_RECORD.code
        assert _answer(client.produce(topic, crafted.good(1), version=3)).error_code == 0
    finally:
        client.close()
