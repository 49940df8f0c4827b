"""`riverlog configs` against three broker processes around a real ZooKeeper: dynamic broker
configs in Kafka's znodes, effective without a restart, described with their sources, and
still there after a restart."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.metadata import layout
from riverlog.metadata.zookeeper import ZooKeeperStore
from tests.cluster_harness import Cluster, isr_full, wait_until
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(180)


def configs(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "configs",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(cluster: Cluster, *args: str) -> list[str]:
    out = configs(cluster, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def segments(cluster: Cluster, topic: str) -> dict[int, int]:
    return {
        b: len(list((broker.data_dir / f"{topic}-0").glob("*.log")))
        for b, broker in cluster.brokers.items()
    }


def low_watermark(cluster: Cluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "w"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)[0])
    finally:
        consumer.close()


@pytest.fixture
def quick_retention_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    """Retention checked every 300 ms, so that a change shows within the test."""
    settings = {"log.retention.check.interval.ms": "300"}
    running = Cluster(zookeeper, tmp_path, settings=settings).start()
    try:
        yield running
    finally:
        running.stop()


def test_dynamic_broker_configs(quick_retention_cluster: Cluster) -> None:
    cluster = quick_retention_cluster
    topic = f"t-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 3, config={"segment.bytes": "1024"})])[topic].result(30)
    wait_until(lambda: isr_full(cluster, topic), 30, "a full ISR")
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0}
    )
    for i in range(60):
        producer.produce(topic, b"x" * 200 + str(i).encode(), partition=0)
        producer.flush(10)  # one small batch each: many 1 KiB segments
    wait_until(lambda: min(segments(cluster, topic).values()) > 5, 30, "segments everywhere")

    assert ok(cluster, "--entity-type", "topics", "--entity-name", topic, "--describe") == [
        f"Dynamic configs for topic {topic} are:",
        "  segment.bytes=1024 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1024, "
        "DEFAULT_CONFIG:log.segment.bytes=1073741824}",
    ]

    # The cluster-wide default retention: every broker deletes its old segments, no restart.
    assert ok(
        cluster,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--add-config",
        "log.retention.ms=1000",
    ) == ["Completed updating default config for brokers in the cluster."]
    wait_until(
        lambda: set(segments(cluster, topic).values()) == {1},
        30,
        "retention deleting all but the active segment on every broker",
    )
    assert low_watermark(cluster, topic) > 0
    assert ok(cluster, "--broker-defaults", "--describe") == [
        "Default configs for brokers in the cluster are:",
        "  log.retention.ms=1000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
        "log.retention.ms=1000, DEFAULT_CONFIG:log.retention.hours=168}",
    ]
    store = ZooKeeperStore(cluster.zk_connect)
    try:
        assert json.loads(store.get(layout.broker_config_path("<default>")).data) == {
            "version": 1,
            "config": {"log.retention.ms": "1000"},
        }
        notices = [
            json.loads(n.data)
            for n in store.get_many(
                [f"{layout.CONFIG_CHANGES}/{c}" for c in store.children(layout.CONFIG_CHANGES)]
            ).values()
        ]
        assert {"brokers/<default>"} <= {n["entity_path"] for n in notices}
    finally:
        store.close()

    # One broker's own config: its source, other brokers unaffected, kept over a restart.
    ok(
        cluster,
        "--entity-type",
        "brokers",
        "--entity-name",
        "2",
        "--alter",
        "--add-config",
        "min.insync.replicas=2,follower.replication.throttled.rate=1048576,"
        "log.cleanup.policy=[compact,delete]",
    )
    expected = [
        "Dynamic configs for broker 2 are:",
        "  follower.replication.throttled.rate=1048576 sensitive=false synonyms={"
        "DYNAMIC_BROKER_CONFIG:follower.replication.throttled.rate=1048576, DEFAULT_CONFIG:"
        "follower.replication.throttled.rate=9223372036854775807}",
        "  log.cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "log.cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  min.insync.replicas=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "min.insync.replicas=2, DEFAULT_CONFIG:min.insync.replicas=1}",
    ]
    assert ok(cluster, "--broker", "2", "--describe") == expected
    every = ok(cluster, "--entity-type", "brokers", "--entity-name", "1", "--describe", "--all")
    assert every[0] == "All configs for broker 1 are:"
    assert (
        "  min.insync.replicas=1 sensitive=false synonyms={DEFAULT_CONFIG:"
        "min.insync.replicas=1}" in every
    )
    assert (
        "  log.retention.ms=1000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
        "log.retention.ms=1000, DEFAULT_CONFIG:log.retention.hours=168}" in every
    )
    all_on_2 = ok(cluster, "--broker", "2", "--describe", "--all")
    assert any(line.startswith("  min.insync.replicas=2 ") for line in all_on_2)

    cluster.brokers[2].stop()
    cluster.brokers[2].start()
    assert ok(cluster, "--broker", "2", "--describe") == expected

    refused = configs(cluster, "--broker", "2", "--alter", "--add-config", "log.retention.hours=1")
    assert refused.returncode == 1
    assert "Cannot update these configs dynamically: Set(log.retention.hours)" in refused.stderr
    missing = configs(cluster, "--broker", "2", "--alter", "--delete-config", "log.retention.ms")
    assert missing.returncode == 1 and "Invalid config(s): log.retention.ms" in missing.stderr
    ok(
        cluster,
        "--broker",
        "2",
        "--alter",
        "--delete-config",
        "min.insync.replicas,follower.replication.throttled.rate,log.cleanup.policy",
    )
    assert ok(cluster, "--broker", "2", "--describe") == ["Dynamic configs for broker 2 are:"]
