"""KIP-890 part 1 with real brokers: a partition leader asks the transaction coordinator
before a transaction's first write to a partition, so a transactional batch for a partition
never added to the transaction, or arriving after its transaction was aborted, is refused
(INVALID_TXN_STATE; TRANSACTION_ABORTABLE for Produce v11) and the partition's last stable
offset does not hang. With `transaction.partition.verification.enable=false` (dynamic) the
old behaviour comes back: such a batch opens a transaction nobody ends.

On an embedded broker, then on two broker processes around a real ZooKeeper where the
coordinator is on the other broker than the partition's leader: real transactional clients
commit and abort through the verification, the same refusals hold, and with the
coordinator's broker killed the leader answers NOT_ENOUGH_REPLICAS (retriable) and writes
nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from riverlog.client import AsyncTransactionalProducer
from riverlog.client.connection import Connection
from riverlog.client.transactional_producer import TransactionHandle
from riverlog.coordinator.records import partition_for
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.protocol import messages as m
from riverlog.protocol.records.v2 import Record, encode_batch
from tests.cluster_harness import Cluster, partitions_of, wait_until
from tests.zookeeper_server import ZooKeeperServer

DEADLINE_S = 20
KEY = "transaction.partition.verification.enable"
NOT_ADDED = "Partition was not added to the transaction"
SETTINGS = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "offsets.topic.replication.factor": "1",
}


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with broker(overrides={**SETTINGS, "group.initial.rebalance.delay.ms": "0"}) as running:
        assert isinstance(running, EmbeddedBroker)
        yield running.bootstrap_servers


def _topic(bootstrap: str, partitions: int = 2, plan: list[list[int]] | None = None) -> str:
    name = f"verify-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = (
        NewTopic(name, len(plan), replica_assignment=plan)
        if plan
        else NewTopic(name, partitions, 1)
    )
    admin.create_topics([topic])[name].result(30)
    return name


def _set_verification(bootstrap: str, broker_id: str, value: str | None) -> None:
    """IncrementalAlterConfigs: SET the key on `broker_id` (DELETE with None)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.BROKER,
        broker_id,
        incremental_configs=[
            ConfigEntry(
                KEY,
                value or "",
                incremental_operation=(
                    AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
                ),
            )
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(30)


def _verification_setting(bootstrap: str, broker_id: str) -> tuple[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.BROKER, broker_id)
    entry = admin.describe_configs([resource])[resource].result(30)[KEY]
    return entry.value, ConfigSource(entry.source).name


def _offsets(bootstrap: str, topic: str, partitions: int) -> tuple[list[int], list[int]]:
    """(high watermarks, last stable offsets) of the topic's partitions."""
    tps = [KTopicPartition(topic, p) for p in range(partitions)]
    found = []
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        try:
            ends = consumer.end_offsets(tps)
        finally:
            consumer.close()
        found.append([ends[tp] for tp in tps])
    return found[0], found[1]


def _until_offsets(bootstrap: str, topic: str, high: list[int], stable: list[int]) -> None:
    """Until the partitions' (high watermarks, last stable offsets) are these: markers are
    written after EndTxn is answered."""
    seen: list[tuple[list[int], list[int]]] = []

    def reached() -> bool:
        seen[:] = [_offsets(bootstrap, topic, len(high))]
        return seen[0] == (high, stable)

    try:
        wait_until(reached, DEADLINE_S, f"{topic} at {(high, stable)}")
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen {seen}") from None


async def _open_transaction(bootstrap: str, tid: str, topic: str) -> AsyncTransactionalProducer:
    """riverlog's producer with a transaction open that holds one record of `topic`-1
    (sequence 0): partition 0 was never added."""
    producer = AsyncTransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    await producer.init_transactions()
    await producer.begin_transaction()
    await (await producer.send(topic, b"in", partition=1))
    return producer


async def _raw_produce(
    address: str,
    handle: TransactionHandle,
    topic: str,
    index: int,
    sequence: int,
    version: int,
) -> m.ProduceResponse.PartitionProduceResponse:
    """A transactional batch sent straight to `address` (the partition's leader)."""
    host, port = address.rsplit(":", 1)
    conn = await Connection.open(host, int(port))
    try:
        batch = encode_batch(
            [Record(0, int(time.time() * 1000), b"k", b"stray")],
            producer_id=handle.producer_id,
            producer_epoch=handle.producer_epoch,
            base_sequence=sequence,
            is_transactional=True,
        )
        request = m.ProduceRequest(
            acks=-1,
            timeout_ms=10_000,
            transactional_id=handle.transactional_id,
            topic_data=[
                m.ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[
                        m.ProduceRequest.PartitionProduceData(index=index, records=batch)
                    ],
                )
            ],
        )
        answer = await conn.send(request, version)
        assert isinstance(answer, m.ProduceResponse)
        return answer.responses[0].partition_responses[0]
    finally:
        await conn.close()


async def _until_complete(bootstrap: str, tid: str) -> None:
    """Until the coordinator has ended the transaction (every marker written)."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await Connection.open(host, int(port))
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            answer = await conn.send(m.DescribeTransactionsRequest(transactional_ids=[tid]))
            assert isinstance(answer, m.DescribeTransactionsResponse)
            if answer.transaction_states[0].transaction_state.startswith("Complete"):
                return
            assert time.monotonic() < deadline, "the transaction did not complete"
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def _refusals(bootstrap: str, topic: str) -> None:
    """A partition never added, then a late write after the abort: both refused."""
    tid = f"tx-{topic}"
    producer = await _open_transaction(bootstrap, tid, topic)
    try:
        handle = await producer.prepare_transaction()
        assert handle.partitions == ((topic, 1),)
        for version in (3, 9, 10):
            refused = await _raw_produce(bootstrap, handle, topic, 0, 0, version)
            assert refused.error_code == 48, version  # INVALID_TXN_STATE
            assert version < 8 or refused.error_message == NOT_ADDED
        refused = await _raw_produce(bootstrap, handle, topic, 0, 0, 11)
        assert refused.error_code == 120  # TRANSACTION_ABORTABLE (Produce v11 clients)
        # The transaction holds partition 1: the producer's next batch there needs no
        # question (the transaction is open on it) and is appended.
        accepted = await _raw_produce(bootstrap, handle, topic, 1, 1, 9)
        assert accepted.error_code == 0 and accepted.base_offset == 1
        await producer.abort_transaction()
        await _until_complete(bootstrap, tid)
        # A late retry of the aborted transaction's batch: refused, nothing reopened.
        late = await _raw_produce(bootstrap, handle, topic, 1, 2, 9)
        assert late.error_code == 48 and late.error_message == NOT_ADDED
    finally:
        await producer.close()


def test_unadded_and_late_writes_are_refused_and_the_lso_moves_on(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    assert _verification_setting(bootstrap, "0") == ("true", "DEFAULT_CONFIG")
    asyncio.run(_refusals(bootstrap, topic))
    # Partition 1: two aborted records and the abort marker; no transaction left open.
    _until_offsets(bootstrap, topic, [0, 3], [0, 3])
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_uncommitted", consumer_timeout_ms=1500
    )
    consumer.assign([KTopicPartition(topic, 0), KTopicPartition(topic, 1)])
    consumer.seek_to_beginning()
    try:
        assert sorted(r.value for r in consumer) == [b"in", b"stray"]  # both aborted
    finally:
        consumer.close()


def test_clients_commit_and_abort_through_verification(bootstrap: str) -> None:
    """confluent-kafka and kafka-python transactions on partitions whose first write each
    transaction is verified; read_committed sees exactly the committed records."""
    topic = _topic(bootstrap, partitions=3)
    confluent = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"c-{topic}"})
    confluent.init_transactions(DEADLINE_S)
    python = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"p-{topic}")
    python.init_transactions()
    expected = []
    for round_, commit in enumerate((True, False, True, False, True)):
        confluent.begin_transaction()
        python.begin_transaction()
        for p in range(3):
            confluent.produce(topic, value=b"c%d-%d" % (round_, p), partition=p)
            python.send(topic, value=b"p%d-%d" % (round_, p), partition=p)
        if commit:
            confluent.commit_transaction(DEADLINE_S)
            python.commit_transaction()
            expected += [b"%s%d-%d" % (w, round_, p) for w in (b"c", b"p") for p in range(3)]
        else:
            confluent.abort_transaction(DEADLINE_S)
            python.abort_transaction()
    python.close()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
        extra = consumer.poll(1.0)  # nothing else: no aborted record
        assert extra is None or extra.error(), (extra.value(), extra.partition(), got)
    finally:
        consumer.close()
    assert sorted(got) == sorted(expected)
    # No transaction left open: every partition's last stable offset reaches its end.
    wait_until(
        lambda: (ends := _offsets(bootstrap, topic, 3))[0] == ends[1],
        DEADLINE_S,
        "every last stable offset at its high watermark",
    )


def _batch(handle: TransactionHandle, sequence: int) -> bytes:
    return encode_batch(
        [Record(0, int(time.time() * 1000), b"k", b"%d" % sequence)],
        producer_id=handle.producer_id,
        producer_epoch=handle.producer_epoch,
        base_sequence=sequence,
        is_transactional=True,
    )


async def _pipelined(bootstrap: str, topic: str) -> list[list[tuple[int, int, int]]]:
    """Two Produce requests of one producer sent back to back on one connection: the first
    opens the transaction on partition 0 (verified) and goes on with partition 1, the second
    goes on with partition 1 only. (index, error, base offset) per partition and request."""
    tid = f"tx-{topic}"
    producer = await _open_transaction(bootstrap, tid, topic)  # partition 1, sequence 0
    host, port = bootstrap.rsplit(":", 1)
    conn = await Connection.open(host, int(port))
    try:
        handle = await producer.prepare_transaction()
        added = await conn.send(
            m.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=handle.producer_id,
                v3_and_below_producer_epoch=handle.producer_epoch,
                v3_and_below_topics=[
                    m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])
                ],
            ),
            3,
        )
        assert isinstance(added, m.AddPartitionsToTxnResponse)
        assert (
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        )

        def request(parts: dict[int, int]) -> m.ProduceRequest:
            return m.ProduceRequest(
                acks=-1,
                timeout_ms=10_000,
                transactional_id=tid,
                topic_data=[
                    m.ProduceRequest.TopicProduceData(
                        name=topic,
                        partition_data=[
                            m.ProduceRequest.PartitionProduceData(
                                index=i, records=_batch(handle, q)
                            )
                            for i, q in parts.items()
                        ],
                    )
                ],
            )

        answers = await asyncio.gather(
            conn.send(request({0: 0, 1: 1}), 9), conn.send(request({1: 2}), 9)
        )
        await producer.commit_transaction()
    finally:
        await conn.close()
        await producer.close()
    out = []
    for answer in answers:
        assert isinstance(answer, m.ProduceResponse)
        parts = answer.responses[0].partition_responses
        out.append([(p.index, p.error_code, p.base_offset) for p in parts])
    return out


def test_a_verifying_request_keeps_its_place_on_its_connection(bootstrap: str) -> None:
    """Appending the second request first would put sequence 2 before 1 on partition 1
    (OUT_OF_ORDER_SEQUENCE_NUMBER); Kafka, reading one request at a time, never does."""
    topic = _topic(bootstrap)
    first, second = asyncio.run(_pipelined(bootstrap, topic))
    assert first == [(0, 0, 0), (1, 0, 1)]
    assert second == [(1, 0, 2)]
    _until_offsets(bootstrap, topic, [2, 4], [2, 4])  # committed: records and markers


async def _hang(bootstrap: str, topic: str) -> None:
    producer = await _open_transaction(bootstrap, f"tx-{topic}", topic)
    try:
        handle = await producer.prepare_transaction()
        stray = await _raw_produce(bootstrap, handle, topic, 0, 0, 9)
        assert stray.error_code == 0  # the old behaviour: appended
        await producer.abort_transaction()  # markers for partition 1 only
    finally:
        await producer.close()


def test_verification_off_is_the_old_behaviour(bootstrap: str) -> None:
    topic = _topic(bootstrap)
    _set_verification(bootstrap, "0", "false")
    try:
        assert _verification_setting(bootstrap, "0") == ("false", "DYNAMIC_BROKER_CONFIG")
        asyncio.run(_hang(bootstrap, topic))
    finally:
        _set_verification(bootstrap, "0", None)
    # Partition 0 hangs at the stray batch; partition 1 has its abort marker.
    _until_offsets(bootstrap, topic, [1, 2], [0, 2])
    assert _verification_setting(bootstrap, "0") == ("true", "DEFAULT_CONFIG")


# --- two brokers, the coordinator on the other one -----------------------------------------


def _leader(cluster: Cluster, topic: str, index: int) -> int:
    found: list[int] = []

    def known() -> bool:
        found[:] = [partitions_of(cluster, topic).get(index, (-1,))[0]]
        return found[0] >= 0

    wait_until(known, 30, f"a leader of {topic}-{index}")
    return found[0]


def _id_coordinated_by(cluster: Cluster, broker_id: int, prefix: str) -> str:
    """A transactional id whose coordinator is `broker_id`."""
    for i in range(100):
        tid = f"{prefix}-{i}"
        index = partition_for(tid, int(SETTINGS["transaction.state.log.num.partitions"]))
        if _leader(cluster, "__transaction_state", index) == broker_id:
            return tid
    raise AssertionError(f"no transactional id coordinated by broker {broker_id}")


async def _refused_across_brokers(cluster: Cluster, topic: str, tid: str) -> None:
    bootstrap = cluster.bootstrap_servers
    leader = cluster.brokers[1].address
    producer = await _open_transaction(bootstrap, tid, topic)
    try:
        handle = await producer.prepare_transaction()
        refused = await _raw_produce(leader, handle, topic, 0, 0, 9)
        assert (refused.error_code, refused.error_message) == (48, NOT_ADDED)
        await producer.abort_transaction()
    finally:
        await producer.close()
    _until_offsets(leader, topic, [4, 2], [4, 2])
    cluster.brokers[2].kill()  # the coordinator's broker
    retriable = await _raw_produce(leader, handle, topic, 0, 0, 9)
    assert retriable.error_code == 19  # NOT_ENOUGH_REPLICAS: clients retry
    assert retriable.error_message is not None
    assert retriable.error_message.startswith(
        "Unable to verify the partition has been added to the transaction. Underlying error: "
    )


def test_coordinator_on_another_broker(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = Cluster(zookeeper, tmp_path, brokers=2, settings=SETTINGS).start()
    try:
        bootstrap = cluster.bootstrap_servers
        topic = _topic(bootstrap, plan=[[1], [1]])  # led by broker 1
        warm = Producer({"bootstrap.servers": bootstrap, "transactional.id": "warm-up"})
        warm.init_transactions(DEADLINE_S)  # creates __transaction_state
        tid = _id_coordinated_by(cluster, 2, f"c-{topic}")
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        producer.init_transactions(DEADLINE_S)
        for commit in (True, False):
            producer.begin_transaction()
            producer.produce(topic, value=b"committed" if commit else b"aborted", partition=0)
            assert producer.flush(DEADLINE_S) == 0  # written (verified) before the end
            if commit:
                producer.commit_transaction(DEADLINE_S)
            else:
                producer.abort_transaction(DEADLINE_S)
        _until_offsets(bootstrap, topic, [4, 0], [4, 0])  # two records, two markers
        asyncio.run(_refused_across_brokers(cluster, topic, _id_coordinated_by(cluster, 2, "raw")))
        # Nothing was written by the refused batches: partition 0 as it was, stable.
        _until_offsets(cluster.brokers[1].address, topic, [4, 2], [4, 2])
    finally:
        cluster.stop()
