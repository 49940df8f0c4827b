"""JBOD on one broker: several `log.dirs`, new partitions on the directory with the fewest,
DescribeLogDirs per directory and AlterReplicaLogDirs moving a replica, through real clients
(librdkafka via confluent-kafka produces and consumes, kafka-python's admin client describes
and moves, as its own `alter_replica_log_dirs` test does) and `riverlog log-dirs`.
A failed directory (KIP-112) is in `test_jbod_failure.py`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.errors import KafkaStorageError, LogDirNotFoundError, NoError
from kafka.structs import TopicPartitionReplica

from riverlog.embedded import EmbeddedBroker, broker
from tests.integration.test_cli_kafka_tools import riverlog


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("jbod")
    return [root / "disk-a", root / "disk-b"]


@pytest.fixture(scope="module")
def running(dirs: list[Path]) -> Iterator[EmbeddedBroker]:
    with broker(dirs[0], {"log.dirs": ",".join(str(d) for d in dirs)}) as b:
        yield b


def _topic(bs: str, partitions: int) -> str:
    name = f"jbod-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def _produce(bs: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0


def _consume(bs: str, topic: str, partition: int, count: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    try:
        for _ in range(200):
            if len(got) >= count:
                break
            for message in consumer.consume(count - len(got), timeout=0.5):
                assert message.error() is None, message.error()
                got.append(message.value())
    finally:
        consumer.close()
    return got


def _layout(admin: KafkaAdminClient, topic: str) -> dict[str, dict[int, int]]:
    """log dir → {partition: size} of `topic`, as DescribeLogDirs answers."""
    [answer] = admin.describe_log_dirs()
    out: dict[str, dict[int, int]] = {}
    for result in answer["log_dirs"]:
        assert result["error_code"] == 0
        sizes = out.setdefault(result["log_dir"], {})
        for t in result["topics"]:
            if t["name"] == topic:
                sizes.update({p["partition_index"]: p["partition_size"] for p in t["partitions"]})
    return out


def test_partitions_spread_and_described_per_directory(
    running: EmbeddedBroker, dirs: list[Path]
) -> None:
    bs = running.bootstrap_servers
    topic = _topic(bs, 4)
    _produce(bs, topic, 0, [b"x" * 100] * 3)
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        layout = _layout(admin, topic)
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    assert sorted(layout) == sorted(str(d) for d in dirs)
    assert sorted(len(ps) for ps in layout.values()) == [2, 2]  # the fewest-logs rule
    for directory, sizes in layout.items():
        for partition, size in sizes.items():
            segment = Path(directory) / f"{topic}-{partition}" / "00000000000000000000.log"
            assert segment.stat().st_size == size
            assert size > 0 if partition == 0 else size == 0
    for result in answer["log_dirs"]:  # v4+: the filesystem's bytes, per directory
        assert result["total_bytes"] > 0
        assert 0 < result["usable_bytes"] <= result["total_bytes"]
    for d in dirs:  # each directory is a Kafka log directory of its own
        assert (d / ".lock").exists()
        assert "cluster.id=" in (d / "meta.properties").read_text()

    out = riverlog("log-dirs", "--bootstrap-server", bs, "--describe", "--topic-list", topic)
    assert out.returncode == 0, out.stderr
    described = json.loads(out.stdout.splitlines()[2])
    [entry] = described["brokers"]
    assert sorted(d["logDir"] for d in entry["logDirs"]) == sorted(str(d) for d in dirs)
    assert sum(len(d["partitions"]) for d in entry["logDirs"]) == 4


def test_alter_replica_log_dirs_moves_a_replica(running: EmbeddedBroker, dirs: list[Path]) -> None:
    bs = running.bootstrap_servers
    topic = _topic(bs, 1)
    before = [f"v{i}".encode() for i in range(50)]
    _produce(bs, topic, 0, before)
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        [source] = [d for d, ps in _layout(admin, topic).items() if 0 in ps]
        [target] = [str(d) for d in dirs if str(d) != source]
        replica = TopicPartitionReplica(topic, 0, 0)
        assert admin.alter_replica_log_dirs({replica: target}) == {replica: NoError}
        assert _layout(admin, topic)[target] == {0: _layout(admin, topic)[target][0]}
        assert 0 not in _layout(admin, topic)[source]
        assert (Path(target) / f"{topic}-0").is_dir()
        assert not (Path(source) / f"{topic}-0").exists()
        # moving it where it is changes nothing; a directory not in log.dirs is refused
        assert admin.alter_replica_log_dirs({replica: target}) == {replica: NoError}
        elsewhere = str(dirs[0].parent / "not-a-log-dir")
        assert admin.alter_replica_log_dirs({replica: elsewhere}) == {replica: LogDirNotFoundError}
    finally:
        admin.close()
    after = [f"w{i}".encode() for i in range(10)]
    _produce(bs, topic, 0, after)  # the moved log takes writes
    assert _consume(bs, topic, 0, 60) == before + after  # and lost nothing acknowledged


def test_alter_replica_log_dirs_for_a_replica_not_here(running: EmbeddedBroker) -> None:
    """Kafka's answer for a replica the broker does not host: REPLICA_NOT_AVAILABLE (the
    directory is remembered for when it is created)."""
    bs = running.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        [answer] = admin.describe_log_dirs()
        target = answer["log_dirs"][1]["log_dir"]
        replica = TopicPartitionReplica(f"absent-{uuid.uuid4().hex[:6]}", 0, 0)
        result = admin.alter_replica_log_dirs({replica: target})
    finally:
        admin.close()
    assert result[replica].errno == 9  # REPLICA_NOT_AVAILABLE
    assert result[replica] is not KafkaStorageError
