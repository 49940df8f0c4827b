"""KIP-890 part 1 for TxnOffsetCommit, on an embedded broker: before the group coordinator
appends a transaction's first offsets to the group's `__consumer_offsets` partition, it asks
the transaction coordinator whether that partition is in the transaction (AddOffsetsToTxn
puts it there). A TxnOffsetCommit sent without AddOffsetsToTxn, or after its transaction
ended, is refused with INVALID_TXN_STATE and never becomes committed, nor holds the offsets
partition's last stable offset; with `transaction.partition.verification.enable=false` such a
commit is taken and hangs there, as before. Real clients' `send_offsets_to_transaction`
(confluent-kafka, kafka-python) commit and abort offsets as before.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.structs import OffsetAndMetadata

from riverlog.client import AsyncAdmin, AsyncTransactionalProducer
from riverlog.client.connection import Connection
from riverlog.client.transactional_producer import TransactionHandle
from riverlog.coordinator.records import partition_for
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.protocol import messages as m
from tests.cluster_harness import wait_until

DEADLINE_S = 20
OFFSETS_PARTITIONS = 4
INVALID_TXN_STATE = 48
SETTINGS = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "offsets.topic.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture
def bootstrap() -> Iterator[str]:
    with broker(overrides=SETTINGS) as running:
        assert isinstance(running, EmbeddedBroker)
        yield running.bootstrap_servers


@pytest.fixture
def unverified_bootstrap() -> Iterator[str]:
    overrides = {**SETTINGS, "transaction.partition.verification.enable": "false"}
    with broker(overrides=overrides) as running:
        assert isinstance(running, EmbeddedBroker)
        yield running.bootstrap_servers


def _topic(bootstrap: str) -> str:
    name = f"offsets-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


async def _txn_offset_commit(
    bootstrap: str, handle: TransactionHandle, group: str, topic: str, version: int
) -> int:
    """A TxnOffsetCommit of offset 1 for `topic`-0, sent as is; its error code."""
    host, port = bootstrap.rsplit(":", 1)
    conn = await Connection.open(host, int(port))
    try:
        request = m.TxnOffsetCommitRequest(
            transactional_id=handle.transactional_id,
            group_id=group,
            producer_id=handle.producer_id,
            producer_epoch=handle.producer_epoch,
            topics=[
                m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=1
                        )
                    ],
                )
            ],
        )
        answer = await conn.send(request, version)
        assert isinstance(answer, m.TxnOffsetCommitResponse)
        return answer.topics[0].partitions[0].error_code
    finally:
        await conn.close()


def _offsets_partition_ends(bootstrap: str, group: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of the group's `__consumer_offsets` partition."""
    tp = KTopicPartition("__consumer_offsets", partition_for(group, OFFSETS_PARTITIONS))
    found = []
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        try:
            found.append(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()
    return found[0], found[1]


async def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        return await admin.group_offsets(group)


async def _commits_without_add_offsets(bootstrap: str, topic: str, group: str) -> list[int]:
    """A transaction with a record in `topic`, then TxnOffsetCommit v0-v4 without
    AddOffsetsToTxn, the transaction committed, then the same commit once more (late):
    every answer's error code."""
    tid = f"tx-{topic}"
    producer = AsyncTransactionalProducer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    try:
        await producer.init_transactions()
        await producer.begin_transaction()
        await (await producer.send(topic, b"in", partition=0))
        handle = await producer.prepare_transaction()
        codes = [
            await _txn_offset_commit(bootstrap, handle, group, topic, version)
            for version in range(5)
        ]
        await producer.commit_transaction()
        codes.append(await _txn_offset_commit(bootstrap, handle, group, topic, 4))
        return codes
    finally:
        await producer.close()


def test_a_commit_without_add_offsets_is_refused_and_never_committed(bootstrap: str) -> None:
    topic, group = _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    assert asyncio.run(_committed(bootstrap, group)) == {}  # its coordinator is ready
    before = _offsets_partition_ends(bootstrap, group)
    codes = asyncio.run(_commits_without_add_offsets(bootstrap, topic, group))
    assert codes == [INVALID_TXN_STATE] * 6
    assert asyncio.run(_committed(bootstrap, group)) == {}
    assert _offsets_partition_ends(bootstrap, group) == before  # nothing written, nothing open


def test_verification_off_lets_the_commit_hang(unverified_bootstrap: str) -> None:
    """The old behaviour: the unverified commit is appended, opens a transaction on the
    offsets partition that no marker ends (the producer's commit marks only its data
    partition), and the offsets stay pending — never committed — while the partition's last
    stable offset hangs at them."""
    bootstrap = unverified_bootstrap
    topic, group = _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    assert asyncio.run(_committed(bootstrap, group)) == {}  # its coordinator is ready
    codes = asyncio.run(_commits_without_add_offsets(bootstrap, topic, group))
    assert codes == [0] * 6
    high, stable = _offsets_partition_ends(bootstrap, group)
    assert stable < high
    assert asyncio.run(_committed(bootstrap, group)) == {}


def _until_committed(bootstrap: str, group: str, wanted: dict[tuple[str, int], int]) -> None:
    wait_until(
        lambda: asyncio.run(_committed(bootstrap, group)) == wanted,
        DEADLINE_S,
        f"{group} committed {wanted}",
    )


def test_send_offsets_to_transaction_commits_and_aborts(bootstrap: str) -> None:
    """confluent-kafka then kafka-python: a transaction's offsets are committed with it
    (verified on their way to `__consumer_offsets`), an aborted one's are not."""
    topic = _topic(bootstrap)
    confluent = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"c-{topic}"})
    confluent.init_transactions(DEADLINE_S)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{topic}"})
    try:
        for offset, commit in ((5, True), (9, False)):
            confluent.begin_transaction()
            confluent.produce(topic, value=b"c%d" % offset, partition=0)
            confluent.send_offsets_to_transaction(
                [CKTopicPartition(topic, 0, offset)], consumer.consumer_group_metadata(), DEADLINE_S
            )
            if commit:
                confluent.commit_transaction(DEADLINE_S)
            else:
                confluent.abort_transaction(DEADLINE_S)
            _until_committed(bootstrap, f"c-{topic}", {(topic, 0): 5})
    finally:
        consumer.close()

    python = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"p-{topic}")
    python.init_transactions()
    try:
        for offset, commit in ((7, True), (11, False)):
            python.begin_transaction()
            python.send(topic, value=b"p%d" % offset, partition=0)
            python.send_offsets_to_transaction(
                {KTopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)}, f"p-{topic}"
            )
            if commit:
                python.commit_transaction()
            else:
                python.abort_transaction()
            _until_committed(bootstrap, f"p-{topic}", {(topic, 0): 7})
    finally:
        python.close()
    started = time.monotonic()
    wait_until(
        lambda: len(set(_offsets_partition_ends(bootstrap, f"p-{topic}"))) == 1,
        DEADLINE_S - (time.monotonic() - started),
        "the offsets partition's last stable offset at its high watermark",
    )
