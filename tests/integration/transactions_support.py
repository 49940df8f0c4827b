"""What the transactions tests share (test_transactions.py, test_transactions_cli.py; their
broker is conftest.py's `transactions_broker`): a fresh topic, a read_committed read up to
the last stable offsets, and polling for a condition with a deadline."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

PARTITIONS = 6
DEADLINE_S = 20


def new_topic(bootstrap: str, prefix: str, partitions: int = PARTITIONS) -> str:
    """A fresh topic `prefix-<random>` with `partitions` partitions, one replica."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


def read_to_lso(bootstrap: str, topic: str, partitions: int = 1) -> dict[int, list[bytes]]:
    """Everything a read_committed consumer sees up to the current last stable offsets."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    tps = [KTopicPartition(topic, p) for p in range(partitions)]
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning()
        deadline = time.monotonic() + DEADLINE_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "the consumer did not reach the LSO"
            for tp, records in consumer.poll(timeout_ms=100).items():
                got[tp.partition] += [r.value for r in records]
    finally:
        consumer.close()
    return got


def wait_until(condition: Callable[[], bool]) -> None:
    """Poll `condition` until it holds; fail after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)
