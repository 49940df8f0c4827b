"""Metadata, DescribeCluster and DescribeGroups report every operation Kafka defines for the
resource when asked (no authorizer is configured), as Kafka's bitfield of AclOperation codes,
and -2^31 when not asked: through kafka-python (which always asks and failed on -2^31) and
confluent-kafka (librdkafka)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic
from kafka import KafkaAdminClient

from riverlog.embedded import EmbeddedBroker, broker
from riverlog.server.authorized_operations import OMITTED, ResourceType, authorized_operations

TOPIC_OPS = {
    "READ",
    "WRITE",
    "CREATE",
    "DESCRIBE",
    "DELETE",
    "ALTER",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
}
CLUSTER_OPS = {
    "CREATE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
    "ALTER",
    "DESCRIBE",
}
GROUP_OPS = {"READ", "DESCRIBE", "DELETE"}


@pytest.fixture(scope="module")
def running() -> Iterator[EmbeddedBroker]:
    with broker() as b:
        yield b


def _topic(bs: str) -> str:
    name = f"ops-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def test_not_asked_is_omitted() -> None:
    assert authorized_operations(ResourceType.TOPIC, "t", requested=False) == OMITTED


def test_kafka_python_describe_topics_and_cluster(running: EmbeddedBroker) -> None:
    topic = _topic(running.bootstrap_servers)
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
    try:
        [described] = admin.describe_topics([topic])
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert set(described["authorized_operations"]) == TOPIC_OPS
    assert set(cluster["authorized_operations"]) == CLUSTER_OPS


def test_confluent_describe_topics_cluster_groups(running: EmbeddedBroker) -> None:
    bs = running.bootstrap_servers
    topic = _topic(bs)
    group = f"ops-g-{uuid.uuid4().hex[:6]}"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bs, "group.id": group})
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bs})
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[
        topic
    ].result(30)
    assert {op.name for op in described.authorized_operations} == TOPIC_OPS
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert {op.name for op in cluster.authorized_operations} == CLUSTER_OPS
    groups = admin.describe_consumer_groups([group], include_authorized_operations=True)
    assert {op.name for op in groups[group].result(30).authorized_operations} == GROUP_OPS
    plain = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert not plain.authorized_operations  # not asked: none reported
    assert AclOperation.READ in described.authorized_operations
