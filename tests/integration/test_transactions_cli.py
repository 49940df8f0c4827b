"""The transaction tools against an embedded broker: `riverlog transactions` lists,
describes, finds a hanging transaction (made with the leaders' KIP-890 verification switched
off) and aborts it; `producer-perf-test --transactional-id` commits every record it sends.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from riverlog.client.connection import Connection
from riverlog.protocol import messages as m
from riverlog.protocol.records.v2 import Record, encode_batch
from tests.integration.transactions_support import (
    DEADLINE_S,
    new_topic,
    read_to_lso,
    wait_until,
)


@pytest.fixture(scope="module")
def bootstrap(transactions_broker: str) -> str:
    """The package's transactions broker (conftest.py), shared with test_transactions.py."""
    return transactions_broker


def _tool(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverlog", "transactions", "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _verification(bootstrap: str, enabled: bool) -> None:
    """`transaction.partition.verification.enable` off (dynamic, on broker 0) or back to its
    default, on."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    op = AlterConfigOpType.DELETE if enabled else AlterConfigOpType.SET
    entry = ConfigEntry(
        "transaction.partition.verification.enable", "false", incremental_operation=op
    )
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)


async def _hang(bootstrap: str, topic: str) -> None:
    """A transactional batch the coordinator never heard of: a hanging transaction (possible
    only with the leaders' verification off, KIP-890)."""
    host, port = bootstrap.split(":")
    conn = await Connection.open(host, int(port))
    try:
        init = await conn.send(
            m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
        )
        assert isinstance(init, m.InitProducerIdResponse) and init.error_code == 0
        batch = encode_batch(
            [Record(0, int(time.time() * 1000), b"k", b"ghost")],
            producer_id=init.producer_id,
            producer_epoch=init.producer_epoch,
            base_sequence=0,
            is_transactional=True,
        )
        produce = m.ProduceRequest(
            acks=-1,
            timeout_ms=10000,
            transactional_id="ghost",
            topic_data=[
                m.ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[m.ProduceRequest.PartitionProduceData(index=0, records=batch)],
                )
            ],
        )
        answer = await conn.send(produce)
        assert isinstance(answer, m.ProduceResponse)
        assert answer.responses[0].partition_responses[0].error_code == 0
    finally:
        await conn.close()


def test_transactions_tool_lists_describes_finds_and_aborts(bootstrap: str) -> None:
    topic = new_topic(bootstrap, "tool", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    producer.flush(DEADLINE_S)
    listed = _tool(bootstrap, "list")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [f"tx-{topic}", "0"] == next(r.split()[:2] for r in rows if f"tx-{topic}" in r)
    assert f"tx-{topic}" in listed.stdout and "Ongoing" in listed.stdout
    described = _tool(bootstrap, "describe", "--transactional-id", f"tx-{topic}")
    assert described.returncode == 0, described.stderr
    fields = described.stdout.splitlines()[1].split("\t")
    assert fields[1].strip() == f"tx-{topic}" and fields[4].strip() == "Ongoing"
    assert fields[8].strip() == f"{topic}-0"
    producer.commit_transaction(DEADLINE_S)
    missing = _tool(bootstrap, "describe", "--transactional-id", "nobody")
    assert missing.returncode == 1 and "nobody" in missing.stderr

    _verification(bootstrap, False)
    try:
        asyncio.run(_hang(bootstrap, topic))
    finally:
        _verification(bootstrap, True)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    tp = KTopicPartition(topic, 0)
    try:
        wait_until(lambda: consumer.end_offsets([tp])[tp] == 2)  # stuck at the ghost's start
        producers = _tool(bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
        assert producers.returncode == 0, producers.stderr
        assert producers.stdout.splitlines()[0].split() == [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ]
        starts = [line.split()[5] for line in producers.stdout.splitlines()[1:]]
        assert sorted(starts) == ["2", "None"]
        hanging = _tool(
            bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"
        )
        assert hanging.returncode == 0, hanging.stderr
        rows = hanging.stdout.splitlines()[1:]
        assert len(rows) == 1 and rows[0].split()[:2] == [topic, "0"]
        assert rows[0].split()[5] == "2"
        aborted = _tool(
            bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2"
        )
        assert aborted.returncode == 0, aborted.stderr
        wait_until(lambda: consumer.end_offsets([tp])[tp] == 4)  # stable again
    finally:
        consumer.close()
    assert read_to_lso(bootstrap, topic) == {0: [b"open"]}
    for isolation, shown in (("read_committed", "open\n"), ("read_uncommitted", "open\nghost\n")):
        console = subprocess.run(
            [
                sys.executable,
                "-m",
                "riverlog",
                "console-consumer",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                topic,
                "--from-beginning",
                "--isolation-level",
                isolation,
                "--timeout-ms",
                "1500",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert console.stdout == shown, console.stderr


def test_producer_perf_test_in_transactions(bootstrap: str) -> None:
    topic = new_topic(bootstrap, "perf", partitions=1)
    produced = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "producer-perf-test",
            "--topic",
            topic,
            "--num-records",
            "3000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            "--transactional-id",
            f"perf-{topic}",
            "--transaction-duration-ms",
            "50",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout.strip().splitlines()[-1].startswith("3000 records sent, ")
    tp = KTopicPartition(topic, 0)
    committed = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = KafkaConsumer(bootstrap_servers=bootstrap)
    try:  # the last markers are written after the tool's last commit returned
        wait_until(lambda: committed.end_offsets([tp]) == uncommitted.end_offsets([tp]))
    finally:
        committed.close()
        uncommitted.close()
    assert len(read_to_lso(bootstrap, topic)[0]) == 3000
    described = _tool(bootstrap, "describe", "--transactional-id", f"perf-{topic}")
    assert described.stdout.splitlines()[1].split("\t")[4].strip() == "CompleteCommit"
