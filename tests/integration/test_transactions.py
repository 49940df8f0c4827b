"""Transactions with real clients against an embedded broker.

confluent-kafka and kafka-python transactional producers commit and abort across many
partitions (and commit consumed offsets in the transaction); read_committed consumers of
confluent-kafka, kafka-python, aiokafka and riverlog's client see every committed record,
in order, and no aborted one, while read_uncommitted consumers see both (the aborted data
is really there).
A zombie with an old epoch is fenced; a transaction left open past its timeout is aborted
by the coordinator. riverlog's transactional producer commits, aborts and is fenced; a
producer's next transaction waits for the markers. The tools: test_transactions_cli.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.structs import OffsetAndMetadata

from riverlog.client import AsyncConsumer, AsyncTransactionalProducer
from riverlog.client.connection import Connection
from riverlog.protocol import messages as m
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records.v2 import Record, encode_batch
from tests.integration.transactions_support import (
    DEADLINE_S,
    PARTITIONS,
    new_topic,
    read_to_lso,
    wait_until,
)


@pytest.fixture(scope="module")
def bootstrap(transactions_broker: str) -> str:
    """The package's transactions broker (conftest.py), shared with test_transactions_cli.py."""
    return transactions_broker


def _confluent_read(
    bootstrap: str, topic: str, isolation: str, until: int, partitions: int = PARTITIONS
) -> dict[int, list[bytes]]:
    """Values per partition, read from the start until `until` records or the deadline."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline and sum(map(len, got.values())) < until:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def _kafka_python_read(bootstrap: str, topic: str, until: int) -> dict[int, list[bytes]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=500,
    )
    consumer.assign([KTopicPartition(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline and sum(map(len, got.values())) < until:
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.partition] += [r.value for r in records]
    finally:
        consumer.close()
    return got


async def _aiokafka_read(bootstrap: str, topic: str, until: int) -> dict[int, list[bytes]]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        from aiokafka import TopicPartition as ATopicPartition

        consumer.assign([ATopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and sum(map(len, got.values())) < until:
            batches = await consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                got[tp.partition] += [r.value for r in records if r.value is not None]
    finally:
        await consumer.stop()
    return got


async def _riverlog_read(bootstrap: str, topic: str, until: int) -> dict[int, list[bytes]]:
    consumer = AsyncConsumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed"})
    consumer.assign((topic, p) for p in range(PARTITIONS))
    consumer.seek_to_beginning()
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + DEADLINE_S
    async with consumer:
        while time.monotonic() < deadline and sum(map(len, got.values())) < until:
            for record in await consumer.poll(200):
                got[record.partition] += [record.value]
    return got


def _expected(values: list[tuple[int, bytes]]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for partition, value in values:
        out[partition].append(value)
    return out


def test_confluent_commit_and_abort_read_by_every_client(bootstrap: str) -> None:
    topic = new_topic(bootstrap, "txn")
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 5}
    )
    producer.init_transactions(DEADLINE_S)
    committed: list[tuple[int, bytes]] = []
    aborted: list[tuple[int, bytes]] = []
    for round_ in range(6):
        producer.begin_transaction()
        values = [(i % PARTITIONS, b"r%d-%d" % (round_, i)) for i in range(30)]
        for partition, value in values:
            producer.produce(topic, value=value, partition=partition)
        if round_ % 3 == 1:
            producer.flush(DEADLINE_S)  # the aborted records reach the log first
            producer.abort_transaction(DEADLINE_S)
            aborted += values
        else:
            producer.commit_transaction(DEADLINE_S)
            committed += values
    expected = _expected(committed)
    assert _confluent_read(bootstrap, topic, "read_committed", len(committed)) == expected
    assert _kafka_python_read(bootstrap, topic, len(committed)) == expected
    assert asyncio.run(_aiokafka_read(bootstrap, topic, len(committed))) == expected
    assert asyncio.run(_riverlog_read(bootstrap, topic, len(committed))) == expected
    everything = _confluent_read(bootstrap, topic, "read_uncommitted", len(committed + aborted))
    assert sorted(v for vs in everything.values() for v in vs) == sorted(
        v for _, v in committed + aborted
    )


def test_open_transaction_holds_back_read_committed(bootstrap: str) -> None:
    topic = new_topic(bootstrap, "lso", partitions=1)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(DEADLINE_S)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    producer.flush(DEADLINE_S)
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(DEADLINE_S)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    tp = KTopicPartition(topic, 0)
    try:
        assert consumer.end_offsets([tp])[tp] == 1  # the LSO: the open transaction's start
        consumer.assign([tp])
        consumer.seek_to_beginning()
        seen: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while consumer.position(tp) < 1 and time.monotonic() < deadline:
            seen += [r.value for rs in consumer.poll(timeout_ms=100).values() for r in rs]
        assert seen == [b"before"]
        seen += [r.value for rs in consumer.poll(timeout_ms=300).values() for r in rs]
        assert seen == [b"before"]  # nothing past the LSO
        producer.commit_transaction(DEADLINE_S)
        wait_until(lambda: consumer.end_offsets([tp])[tp] == 4)  # records and marker
    finally:
        consumer.close()
    got = _confluent_read(bootstrap, topic, "read_committed", 3, partitions=1)
    assert got == {0: [b"before", b"open", b"after"]}


def test_confluent_send_offsets_to_transaction(bootstrap: str) -> None:
    source = new_topic(bootstrap, "src", partitions=1)
    sink = new_topic(bootstrap, "sink", partitions=1)
    group = f"copy-{source}"
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        plain.produce(source, value=b"%d" % i, partition=0)
    plain.flush(DEADLINE_S)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{sink}"})
    producer.init_transactions(DEADLINE_S)
    try:
        for commit, count in ((False, 4), (True, 4)):
            producer.begin_transaction()
            taken = 0
            deadline = time.monotonic() + DEADLINE_S
            while taken < count and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                producer.produce(sink, value=msg.value(), partition=0)
                taken += 1
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), DEADLINE_S
            )
            if commit:
                producer.commit_transaction(DEADLINE_S)
            else:
                producer.abort_transaction(DEADLINE_S)
                # rewind to the last committed offsets, as an exactly-once copier does
                committed = consumer.committed([TopicPartition(source, 0)], DEADLINE_S)
                start = committed[0].offset if committed[0].offset >= 0 else 0
                consumer.seek(TopicPartition(source, 0, start))
        # read_committed: OffsetFetch requires stable offsets (UNSTABLE_OFFSET_COMMIT is
        # retried until the marker lands)
        committed = consumer.committed([TopicPartition(source, 0)], DEADLINE_S)
        assert committed[0].offset == 4
    finally:
        consumer.close()
    got = _confluent_read(bootstrap, sink, "read_committed", 4, partitions=1)
    assert got == {0: [b"0", b"1", b"2", b"3"]}


def test_kafka_python_producer_commit_abort_and_offsets(bootstrap: str) -> None:
    topic = new_topic(bootstrap, "kp")
    group = f"kp-{topic}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic}")
    try:
        producer.init_transactions()
        committed: list[tuple[int, bytes]] = []
        for round_, commit in enumerate((True, False, True)):
            producer.begin_transaction()
            values = [(i % PARTITIONS, b"k%d-%d" % (round_, i)) for i in range(12)]
            for partition, value in values:
                producer.send(topic, value=value, partition=partition)
            producer.flush()
            if commit:
                offsets = {KTopicPartition(topic, 0): OffsetAndMetadata(round_ + 1, "", -1)}
                producer.send_offsets_to_transaction(offsets, group)
                producer.commit_transaction()
                committed += values
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    assert _confluent_read(bootstrap, topic, "read_committed", len(committed)) == _expected(
        committed
    )
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([TopicPartition(topic, 0)], DEADLINE_S)
        assert offsets[0].offset == 3
    finally:
        consumer.close()


def test_zombie_with_an_old_epoch_is_fenced(bootstrap: str) -> None:
    topic = new_topic(bootstrap, "zombie", partitions=1)
    transactional_id = f"tx-{topic}"
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    zombie.init_transactions(DEADLINE_S)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(DEADLINE_S)
    successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    successor.init_transactions(DEADLINE_S)  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(DEADLINE_S)
    with pytest.raises(KafkaException) as caught:
        zombie.produce(topic, value=b"late", partition=0)
        zombie.commit_transaction(DEADLINE_S)
    assert caught.value.args[0].fatal() or "fenced" in str(caught.value).lower()
    assert read_to_lso(bootstrap, topic) == {0: [b"successor"]}


def test_timed_out_transaction_is_aborted_by_the_coordinator(bootstrap: str) -> None:
    topic = new_topic(bootstrap, "timeout", partitions=1)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"tx-{topic}",
            "transaction.timeout.ms": 1000,
        }
    )
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"abandoned", partition=0)
    producer.flush(DEADLINE_S)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    tp = KTopicPartition(topic, 0)
    try:  # record + the coordinator's abort marker: stable again
        wait_until(lambda: consumer.end_offsets([tp])[tp] == 2)
    finally:
        consumer.close()
    with pytest.raises(KafkaException):
        producer.commit_transaction(DEADLINE_S)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"later", partition=0)
    plain.flush(DEADLINE_S)
    assert read_to_lso(bootstrap, topic) == {0: [b"later"]}


async def _riverlog_transactions(bootstrap: str, topic: str, group: str) -> list[bytes]:
    """riverlog's transactional producer: commit, abort, offsets, then fenced by a newer
    producer of the same id. Returns the committed values."""
    config = {"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"}
    producer = AsyncTransactionalProducer(config)
    committed: list[bytes] = []
    try:
        await producer.init_transactions()
        for round_, commit in enumerate((True, False, True)):
            await producer.begin_transaction()
            values = [b"rl%d-%d" % (round_, i) for i in range(PARTITIONS * 2)]
            futures = [
                await producer.send(topic, v, partition=i % PARTITIONS)
                for i, v in enumerate(values)
            ]
            await producer.send_offsets_to_transaction({(topic, 0): round_ + 1}, group)
            if commit:
                await producer.commit_transaction()
                committed += values
            else:
                await producer.abort_transaction()
            await asyncio.gather(*futures)
        successor = AsyncTransactionalProducer(config)
        await successor.init_transactions()  # fences `producer`
        await producer.begin_transaction()
        zombie = await producer.send(topic, b"zombie", partition=0)
        with pytest.raises(KafkaError) as fenced:
            await producer.commit_transaction()
        assert fenced.value.error.name in ("PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")
        with pytest.raises(KafkaError):
            await zombie  # never written
        await successor.close()
    finally:
        await producer.close()
    return committed


def test_riverlog_transactional_producer(bootstrap: str) -> None:
    topic = new_topic(bootstrap, "rl")
    group = f"rl-{topic}"
    committed = asyncio.run(_riverlog_transactions(bootstrap, topic, group))
    by_partition: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for value in committed:
        by_partition[int(value.split(b"-")[1]) % PARTITIONS].append(value)
    assert read_to_lso(bootstrap, topic, PARTITIONS) == by_partition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        assert consumer.committed([TopicPartition(topic, 0)], DEADLINE_S)[0].offset == 3
    finally:
        consumer.close()


async def _back_to_back(bootstrap: str, topic: str, rounds: int) -> list[int]:
    """Transactions one after another, each starting with AddPartitionsToTxn (v3, as clients
    send it) the moment the previous EndTxn is answered; its error codes, one per round."""
    host, port = bootstrap.split(":")
    conn = await Connection.open(host, int(port))
    transactional_id = f"b2b-{topic}"
    codes = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:  # creates __transaction_state; its partition may still be loading
            found = await conn.send(m.FindCoordinatorRequest(key=transactional_id, key_type=1), 3)
            assert isinstance(found, m.FindCoordinatorResponse)
            init = await conn.send(
                m.InitProducerIdRequest(
                    transactional_id=transactional_id, transaction_timeout_ms=60000
                )
            )
            assert isinstance(init, m.InitProducerIdResponse)
            if init.error_code == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        add = m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[
                m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0, 1])
            ],
        )
        for i in range(rounds):
            added = await conn.send(add, 3)
            assert isinstance(added, m.AddPartitionsToTxnResponse)
            codes.append(
                max(
                    p.partition_error_code
                    for t in added.results_by_topic_v3_and_below
                    for p in t.results_by_partition
                )
            )
            if codes[-1]:
                break
            now = int(time.time() * 1000)
            data = [
                m.ProduceRequest.PartitionProduceData(
                    index=p,
                    records=encode_batch(
                        [Record(0, now, None, b"%d" % i)],
                        producer_id=pid,
                        producer_epoch=epoch,
                        base_sequence=i,
                        is_transactional=True,
                    ),
                )
                for p in (0, 1)
            ]
            produced = await conn.send(
                m.ProduceRequest(
                    acks=-1,
                    timeout_ms=10000,
                    transactional_id=transactional_id,
                    topic_data=[m.ProduceRequest.TopicProduceData(name=topic, partition_data=data)],
                )
            )
            assert isinstance(produced, m.ProduceResponse)
            end = m.EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=pid,
                producer_epoch=epoch,
                committed=i % 2 == 0,
            )
            ended = await conn.send(end, 3)
            assert isinstance(ended, m.EndTxnResponse) and ended.error_code == 0
    finally:
        await conn.close()
    return codes


def test_next_transaction_waits_for_the_markers_not_concurrent_transactions(
    bootstrap: str,
) -> None:
    """A producer's next AddPartitionsToTxn, sent as soon as EndTxn is answered, meets the
    coordinator still writing the markers; it is answered once they are written, never with
    CONCURRENT_TRANSACTIONS (which clients retry only after 20 ms). Committed and aborted
    transactions alternate; read_committed sees exactly the committed ones."""
    topic = new_topic(bootstrap, "b2b", partitions=2)
    codes = asyncio.run(_back_to_back(bootstrap, topic, 20))
    assert codes == [0] * 20
    committed = [b"%d" % i for i in range(0, 20, 2)]
    assert read_to_lso(bootstrap, topic, 2) == {0: committed, 1: committed}
