"""Fetch from the closest replica (KIP-392) with a real ZooKeeper, three broker processes in
racks r1-r3, librdkafka and aiokafka: with `replica.selector.class` =
RackAwareReplicaSelector the leader (r1) names the follower in the consumer's `client.rack`
(r3 for librdkafka, r2 for aiokafka's `client_rack`) as its preferred read replica, the
client fetches from that follower, and every record arrives in order. (aiokafka keeps the
preferred replica in its fetcher's `_preferred_read_replica`; librdkafka's statistics name
the broker it fetches from.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from riverlog.server.replication.replica_selector import RACK_AWARE
from tests.cluster_harness import Cluster, create_assigned_topic, wait_until
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)


async def _aiokafka_reads(bs: str, topic: str, rack: str) -> tuple[list[int], int]:
    """Every record of partition 0 read by aiokafka in `rack`; the replica it read from."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, client_rack=rack)
    await consumer.start()
    tp = ATopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[int] = []
        async with asyncio.timeout(60):
            while len(values) < 200 or tp not in consumer._fetcher._preferred_read_replica:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values += [int(r.value) for r in records if r.value is not None]
        return values, consumer._fetcher._preferred_read_replica[tp][0]
    finally:
        await consumer.stop()


def test_a_consumer_reads_from_the_replica_in_its_rack(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    cluster = Cluster(zookeeper, tmp_path, settings={"replica.selector.class": RACK_AWARE})
    for broker_id, broker in cluster.brokers.items():
        broker.settings = {**broker.settings, "broker.rack": f"r{broker_id}"}
    cluster.start()
    try:
        topic = create_assigned_topic(cluster, [[1, 2, 3]])
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        for i in range(200):
            producer.produce(topic, str(i).encode(), partition=0)
        assert producer.flush(30) == 0

        fetching_from: list[int] = []

        def stats(text: str) -> None:
            partition = json.loads(text)["topics"].get(topic, {}).get("partitions", {})
            if "0" in partition:
                fetching_from.append(partition["0"]["broker"])

        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": "closest",
                "client.rack": "r3",
                "enable.auto.commit": False,
                "statistics.interval.ms": 200,
                "stats_cb": stats,
            }
        )
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            values: list[int] = []

            def read() -> bool:
                values.extend(
                    int(m.value()) for m in consumer.consume(100, 0.5) if m.error() is None
                )
                return len(values) >= 200 and 3 in fetching_from

            wait_until(read, 60, "all records, fetched from broker 3")
            assert values[:200] == list(range(200))
            assert fetching_from[-1] == 3  # the follower in the consumer's rack
        finally:
            consumer.close()
        values, replica = asyncio.run(_aiokafka_reads(cluster.bootstrap_servers, topic, "r2"))
        assert values == list(range(200))
        assert replica == 2  # aiokafka was sent to the follower in its rack too
    finally:
        cluster.stop()
