"""Issue 28's protocol items through aiokafka, the third client the issue names (librdkafka
and kafka-python cover them in their own modules): KIP-467 refusals of invalid records,
DeleteRecords out of range, DescribeGroups asked for authorized operations, and fetches cut by
`max_bytes`. KIP-392 with aiokafka's `client_rack` is in `test_closest_replica.py`; JBOD
(DescribeLogDirs, AlterReplicaLogDirs) has no aiokafka API.

aiokafka 0.14 does not know INVALID_RECORD (87): it raises UnknownError for such a batch,
and ignores `record_errors` — what matters is that exactly the bad batch fails and the log
keeps only the good records."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import aiokafka.errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.records_to_delete import RecordsToDelete
from aiokafka.structs import TopicPartition

from riverlog.embedded import EmbeddedBroker, broker


@pytest.fixture(scope="module")
def running() -> Iterator[EmbeddedBroker]:
    with broker() as b:
        yield b


async def _create(bs: str, partitions: int = 1, **configs: str) -> str:
    name = f"aio-{uuid.uuid4().hex[:6]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bs)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs)], timeout_ms=30_000
        )
    finally:
        await admin.close()
    return name


async def _read(bs: str, topic: str, partitions: int, count: int, **options: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, **options)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        values: list[bytes] = []
        async with asyncio.timeout(30):
            while len(values) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values += [r.value for r in records if r.value is not None]
        return values
    finally:
        await consumer.stop()


def test_an_invalid_record_fails_its_batch_only(running: EmbeddedBroker) -> None:
    """KIP-467: a key-less record on a compacted topic is refused (its batch alone)."""
    bs = running.bootstrap_servers

    async def run() -> list[bytes]:
        topic = await _create(bs, **{"cleanup.policy": "compact"})
        producer = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=0)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"first", key=b"k1", partition=0)
            with pytest.raises(aiokafka.errors.KafkaError) as refused:
                await producer.send_and_wait(topic, b"no key", partition=0)
            assert not refused.value.retriable
            await producer.send_and_wait(topic, b"second", key=b"k2", partition=0)
        finally:
            await producer.stop()
        return await _read(bs, topic, 1, 2)

    assert asyncio.run(run()) == [b"first", b"second"]


def test_delete_records_out_of_range(running: EmbeddedBroker) -> None:
    bs = running.bootstrap_servers

    async def run() -> None:
        topic = await _create(bs)
        producer = AIOKafkaProducer(bootstrap_servers=bs)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, b"%d" % i, partition=0)
        finally:
            await producer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=bs)
        await admin.start()
        tp = TopicPartition(topic, 0)
        try:
            for bad in (-2, 4):
                with pytest.raises(aiokafka.errors.OffsetOutOfRangeError):
                    await admin.delete_records({tp: RecordsToDelete(bad)})
            assert await admin.delete_records({tp: RecordsToDelete(-1)}) == {tp: 3}
        finally:
            await admin.close()

    asyncio.run(run())


def test_describe_groups_asking_for_authorized_operations(running: EmbeddedBroker) -> None:
    """aiokafka sends DescribeGroups v3 with `include_authorized_operations` but reads the
    answer with its v2 schema (its `DescribeGroupsRequest_v3.RESPONSE_TYPE` is the v2
    response), so the operations cannot be seen through it; the request is answered and
    the group described. The bits themselves are checked through librdkafka and
    kafka-python (`test_authorized_operations.py`)."""
    bs = running.bootstrap_servers

    async def run() -> tuple[object, object]:
        topic = await _create(bs)
        group = f"aio-g-{uuid.uuid4().hex[:6]}"
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group)
        await consumer.start()
        try:
            await consumer.commit({TopicPartition(topic, 0): 0})
        finally:
            await consumer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=bs)
        await admin.start()
        try:
            [asked] = await admin.describe_consumer_groups(
                [group], include_authorized_operations=True
            )
            [plain] = await admin.describe_consumer_groups([group])
        finally:
            await admin.close()
        return asked.groups, plain.groups

    asked, plain = asyncio.run(run())
    assert asked == plain
    [(error, _group, state, protocol_type, _protocol, members)] = asked
    assert (error, state, protocol_type, members) == (0, "Empty", "consumer", [])


def test_fetches_cut_by_max_bytes_deliver_whole_batches(running: EmbeddedBroker) -> None:
    """`fetch_max_bytes` below one batch: each fetch brings the first partition's whole
    batch and nothing cut off from the others (kafka-python's max_bytes test saw 222 bytes
    of a 2.2 KB batch); every record arrives intact."""
    bs = running.bootstrap_servers

    async def run() -> tuple[list[bytes], list[bytes]]:
        topic = await _create(bs, 2)
        sent = []
        producer = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=50)
        await producer.start()
        try:
            for partition in (0, 1):
                batch = producer.create_batch()
                for i in range(20):
                    value = b"%d-%03d" % (partition, i) * 20
                    assert batch.append(key=None, value=value, timestamp=None) is not None
                    sent.append(value)
                await (await producer.send_batch(batch, topic, partition=partition))
        finally:
            await producer.stop()
        got = await _read(bs, topic, 2, len(sent), fetch_max_bytes=500)
        return sorted(sent), sorted(got)

    sent, got = asyncio.run(run())
    assert got == sent
