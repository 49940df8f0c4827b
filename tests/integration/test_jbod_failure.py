"""KIP-112 on a 3-broker ZooKeeper cluster: a log directory that fails takes only its own
partitions offline.

Each broker has two log directories. On broker 1 one directory is broken as Kafka's own
LogDirFailureTest breaks it — the directory is moved away and a file put in its place, so
the next file created there fails with a real I/O error (ENOTDIR) — and a produce makes the
log roll a segment there. Then: broker 1 answers KAFKA_STORAGE_ERROR for those partitions
(a raw Fetch; DescribeLogDirs through kafka-python shows the directory failed), the
controller, told through `/log_dir_event_notification`, elects other leaders and takes
broker 1 out of their ISRs, librdkafka's retried produce lands on the new leader, and the
partitions in broker 1's other directory keep their leader and ISR and take writes. Nothing
acknowledged is lost. Restarted with the directory still broken, broker 1 starts with it
offline and serves the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from kafka import KafkaAdminClient

from riverlog.client.connection import Connection
from riverlog.protocol.messages import FetchRequest, FetchResponse
from tests.cluster_harness import Cluster, create_assigned_topic, partitions_of, wait_until
from tests.zookeeper_server import ZooKeeperServer

VALUE = b"v" * 600
"""With `segment.bytes` 1000, every second record rolls a segment."""


@pytest.fixture
def jbod_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(zookeeper, tmp_path)
    for b in cluster.brokers.values():
        b.settings = {**b.settings, "log.dirs": f"{b.data_dir}/a,{b.data_dir}/b"}
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _dirs_of(bs: str, broker_id: int, topic: str) -> dict[str, tuple[int, list[int]]]:
    """broker's log dir → (error code, partitions of `topic` there)."""
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        [answer] = admin.describe_log_dirs(brokers=[broker_id])
    finally:
        admin.close()
    return {
        r["log_dir"]: (
            r["error_code"],
            sorted(
                p["partition_index"]
                for t in r["topics"]
                if t["name"] == topic
                for p in t["partitions"]
            ),
        )
        for r in answer["log_dirs"]
    }


def _produce(bs: str, topic: str, partition: int, count: int) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bs, "acks": "all", "linger.ms": 0, "message.timeout.ms": 60000}
    )
    errors: list[object] = []
    for _ in range(count):  # one batch each (two would not fit in a segment)
        producer.produce(
            topic, VALUE, partition=partition, on_delivery=lambda e, _m: errors.append(e)
        )
        assert producer.flush(60) == 0
    assert [str(e) for e in errors if e is not None] == []


def _fetch_error(address: str, topic: str, partition: int) -> int:
    async def fetch() -> int:
        host, port = address.split(":")
        conn = await Connection.open(host, int(port))
        try:
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=partition, fetch_offset=0, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
            )
            response = await conn.send(request, 12)
            assert isinstance(response, FetchResponse)
            return response.responses[0].partitions[0].error_code
        finally:
            await conn.close()

    return asyncio.run(fetch())


def _count(bs: str, topic: str, partitions: int, expected: int) -> int:
    """Records readable from the start of every partition (polling until `expected` are
    read, or 50 s)."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bs, "group.id": "kip112-check", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    try:
        for _ in range(100):
            batch = consumer.consume(100, timeout=0.5)
            for message in batch:
                assert message.error() is None, message.error()
                assert message.value() == VALUE
            seen += len(batch)
            if seen >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_a_failed_log_dir_takes_only_its_partitions_offline(jbod_cluster: Cluster) -> None:
    cluster = jbod_cluster
    bs = cluster.bootstrap_servers
    topic = create_assigned_topic(cluster, [[1, 2, 3]] * 4, **{"segment.bytes": "1000"})
    one = cluster.brokers[1]
    broken, healthy = one.data_dir / "b", one.data_dir / "a"
    layout = _dirs_of(bs, 1, topic)
    offline, online = layout[str(broken)][1], layout[str(healthy)][1]
    assert sorted(offline + online) == [0, 1, 2, 3] and offline and online
    for p in range(4):
        _produce(bs, topic, p, 1)

    broken.rename(one.data_dir / "b.gone")  # Kafka's LogDirFailureTest: a file in its place
    broken.write_bytes(b"")
    _produce(bs, topic, offline[0], 1)  # rolls a segment there: ENOTDIR; retried elsewhere

    def moved() -> bool:
        state = partitions_of(cluster, topic)
        return all(state[p][0] in (2, 3) and 1 not in state[p][2] for p in offline)

    wait_until(moved, 30, "other leaders for the failed directory's partitions")
    state = partitions_of(cluster, topic)
    assert all(state[p][0] == 1 and 1 in state[p][2] for p in online)
    assert _fetch_error(one.address, topic, offline[0]) == 56  # KAFKA_STORAGE_ERROR
    after = _dirs_of(bs, 1, topic)
    assert after[str(broken)] == (56, [])
    assert after[str(healthy)] == (0, online)

    for p in online:  # broker 1 still leads and stores these
        _produce(bs, topic, p, 2)
    _produce(bs, topic, offline[-1], 2)
    expected = 4 + 1 + 2 * len(online) + 2
    assert _count(bs, topic, 4, expected) == expected

    # Restarted with the directory still broken: broker 1 starts with it offline, answers
    # the controller KAFKA_STORAGE_ERROR for those partitions (it does not create them
    # anew elsewhere: they are not new) and serves the others again.
    one.stop()
    one.start()
    wait_until(
        lambda: all(1 in partitions_of(cluster, topic)[p][2] for p in online),
        30,
        "broker 1 back in the ISRs of its healthy directory's partitions",
    )
    assert _dirs_of(bs, 1, topic) == {str(broken): (56, []), str(healthy): (0, online)}
    assert all(1 not in partitions_of(cluster, topic)[p][2] for p in offline)
    assert not any((healthy / f"{topic}-{p}").exists() for p in offline)
