"""Finding 1's idempotent duplicates, deterministically: the mechanism the fault suite caught
after controller kills (`bench_faults.py --kinds kill-controller`, the producers' stderr:
"producer id 0: taking a new one (...: Out of order sequence 2136 of producer 0; expected
2135.)").

Around a leader change a producer can have batch N of a partition in flight to a broker that
does not lead it (its metadata was a moment old) while batch N+1 goes to the new leader,
which refuses it as out of order (it has not seen N). The producer took that for a gap
nothing explained and took a new producer id once idle — and retried every failed batch,
on every partition, under the new id with new sequences, so a batch the old leader had
written but not acknowledged (an acks=all write waiting for a dead follower) was written
twice. The refusal only means "N first": N is retried, then N+1, under the same id.

Here: two brokers in one ZooKeeper cluster, a partition led by broker 0 alone; the producer
is told broker 1 leads (the moment-old metadata), which is frozen so that its answer comes
after broker 0's refusal."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.client.producer import AsyncProducer
from riverlog.protocol.records.batch_header import read_batch_header
from tests.integration.conftest import BrokerProcess, start_broker
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def two_brokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    connect = f"{zookeeper.connect}/riverlog-{uuid.uuid4().hex[:8]}"
    brokers: list[BrokerProcess] = []
    try:
        for i in range(2):
            brokers.append(
                start_broker(tmp_path / f"b{i}", f"zookeeper.connect={connect}", f"broker.id={i}")
            )
        yield brokers
    finally:
        for broker in brokers:
            os.kill(broker.proc.pid, signal.SIGCONT)
            broker.stop()


async def apoll(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.01)


def producer_ids(data_dir: Path) -> list[int]:
    """The producer id of every batch in the partition's log, in offset order."""
    ids = []
    for segment in sorted(data_dir.glob("*.log")):
        raw = segment.read_bytes()
        pos = 0
        while pos < len(raw):
            header = read_batch_header(raw, pos)
            ids.append(header.producer_id)
            pos += header.size
    return ids


def test_a_refusal_as_out_of_order_behind_an_unanswered_batch_keeps_the_producer_id(
    two_brokers: list[BrokerProcess],
) -> None:
    leader, other = two_brokers
    bootstrap = f"{leader.bootstrap_servers},{other.bootstrap_servers}"
    topic = f"ooo-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[0]])])[topic].result(30)
    tp = (topic, 0)

    async def run() -> list[int]:
        producer = AsyncProducer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": "true",
                "acks": "all",
                "linger.ms": "0",
                "retry.backoff.ms": "50",
                "request.timeout.ms": "30000",
            }
        )
        try:
            first = await (await producer.send(topic, b"0", partition=0))
            state = producer._partitions[tp]
            await producer.cluster.connection(1)  # open before it is frozen
            # Moment-old metadata: broker 1 leads (it does not), and it is slow to say no.
            os.kill(other.proc.pid, signal.SIGSTOP)
            producer.cluster.leaders[tp] = 1
            late = await producer.send(topic, b"1", partition=0)
            await apoll(lambda: state.in_flight == 1, "record 1 sent to broker 1")
            producer.cluster.leaders[tp] = 0  # the metadata caught up
            gap = await producer.send(topic, b"2", partition=0)
            await apoll(lambda: len(state.failed) == 1, "broker 0 refused record 2")
            os.kill(other.proc.pid, signal.SIGCONT)  # now broker 1 says NOT_LEADER
            offsets = [first.offset, (await late).offset, (await gap).offset]
            return offsets
        finally:
            os.kill(other.proc.pid, signal.SIGCONT)
            await producer.close()

    offsets = asyncio.run(run())
    assert offsets == [0, 1, 2]
    ids = producer_ids(leader.data_dir / f"{topic}-0")
    assert len(ids) == 3 and len(set(ids)) == 1, f"producer ids of the batches: {ids}"
