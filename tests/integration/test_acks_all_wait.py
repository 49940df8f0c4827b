"""A waiting acks=all write keeps waiting through a leader epoch bump (issue 21's regression).

Kafka fails a produce waiting for its ISR only when the broker stops leading the partition.
riverlog used to fail it with NOT_LEADER_OR_FOLLOWER whenever the leader epoch moved — and
the controller bumps the epoch for every ISR change it writes, e.g. when a follower shuts
down in a controlled way. The client takes that error as "not persisted" and sends again, so
a plain acks=all producer stored the record twice.

Deterministic reproduction with a real ZooKeeper, three broker processes and confluent-kafka:
the controller leads the partition; one follower is frozen (so the write waits for it until
`replica.lag.time.max.ms` drops it from the ISR); once the write is in the leader's log, the
other follower shuts down in a controlled way (epoch bump). The record must be acknowledged
once and stored once.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from tests.cluster_harness import Cluster, controller_of, create_assigned_topic, wait_until
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)

LAG_MS = 6000


def leader_log_bytes(cluster: Cluster, broker_id: int, topic: str) -> int:
    directory = cluster.brokers[broker_id].data_dir / f"{topic}-0"
    return sum(f.stat().st_size for f in directory.glob("*.log"))


def test_a_waiting_acks_all_write_survives_an_epoch_bump(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    cluster = Cluster(zookeeper, tmp_path, settings={"replica.lag.time.max.ms": str(LAG_MS)})
    cluster.start()
    try:
        wait_until(lambda: controller_of(cluster) > 0, 20, "a controller")
        leader = controller_of(cluster)
        frozen, stopped = (b for b in cluster.brokers if b != leader)
        topic = create_assigned_topic(cluster, [[leader, frozen, stopped]])
        before = leader_log_bytes(cluster, leader, topic)

        outcomes: list[KafkaError | None] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            outcomes.append(err)

        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "acks": "all",
                "enable.idempotence": False,
                "request.timeout.ms": 60000,
                "message.timeout.ms": 90000,
                "retry.backoff.ms": 100,
            }
        )
        cluster.brokers[frozen].freeze()
        producer.produce(topic, b"once", partition=0, on_delivery=delivered)
        producer.poll(0)
        wait_until(
            lambda: leader_log_bytes(cluster, leader, topic) > before,
            20,
            "the write in the leader's log, waiting for the frozen follower",
        )
        assert outcomes == []  # still waiting for the ISR
        # A controlled shutdown of the other follower: the controller shrinks the ISR and
        # bumps the leader epoch while the write waits.
        stopping = threading.Thread(target=cluster.brokers[stopped].stop)
        stopping.start()
        assert producer.flush(LAG_MS * 4 / 1000) == 0, "the write was never acknowledged"
        stopping.join(60)
        assert outcomes == [None]

        consumer = KafkaConsumer(
            {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "check"}
        )
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
        finally:
            consumer.close()
        assert (low, high) == (0, 1), "the record was stored more than once"
    finally:
        cluster.brokers[frozen].thaw()
        cluster.stop()
