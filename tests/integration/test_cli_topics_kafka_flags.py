"""`riverlog topics`' further Kafka 3.9 flags against a broker process: --replica-assignment,
--topics-with-overrides, --under-min-isr-partitions / --at-min-isr-partitions,
--command-config, refused values and the metric-name collision warning, worded as Kafka's
tool words them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.integration.conftest import BrokerProcess
from tests.integration.test_cli_kafka_tools import riverlog

NO_ELR = "\tElr: N/A\tLastKnownElr: N/A"


def _topics(bs: str, *args: str) -> tuple[int, str, str]:
    done = riverlog("topics", "--bootstrap-server", bs, *args)
    return done.returncode, done.stdout, done.stderr


def test_create_with_assignment_and_describe_filters(
    broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bs = broker_process.bootstrap_servers
    topic = f"flags-{uuid.uuid4().hex[:6]}"
    assert _topics(bs, "--create", "--topic", topic, "--replica-assignment", "0,0") == (
        0,
        f"Created topic {topic}.\n",
        "",
    )
    out = _topics(bs, "--describe", "--topic", topic)[1]
    assert out.splitlines()[1:] == [
        f"\tTopic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0{NO_ELR}" for p in (0, 1)
    ]
    # min.insync.replicas 1 and an ISR of 1: at the minimum, not under it
    at_min = _topics(bs, "--describe", "--topic", topic, "--at-min-isr-partitions")[1]
    assert at_min.splitlines() == out.splitlines()[1:]
    assert _topics(bs, "--describe", "--topic", topic, "--under-min-isr-partitions")[1] == ""

    plain = f"flags-plain-{uuid.uuid4().hex[:6]}"
    assert _topics(bs, "--create", "--topic", plain)[0] == 0
    tuned = f"flags-tuned-{uuid.uuid4().hex[:6]}"
    assert _topics(bs, "--create", "--topic", tuned, "--config", "retention.ms=1000")[0] == 0
    out = _topics(bs, "--describe", "--topics-with-overrides")[1]
    assert plain not in out and topic not in out
    [line] = [line for line in out.splitlines() if tuned in line]  # the topic line only
    assert line.startswith(f"Topic: {tuned}\tTopicId: ")
    assert line.endswith("\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: retention.ms=1000")
    assert _topics(bs, "--alter", "--topic", plain, "--partitions", "2")[0] == 0
    props = tmp_path / "admin.properties"
    props.write_text("client.id=topics-from-file\n")
    assert _topics(bs, "--list", "--command-config", str(props))[1].count(plain) == 1


def test_refused_values_and_collision_warning(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    name = f"flags.{uuid.uuid4().hex[:6]}"
    assert _topics(bs, "--create", "--topic", name, "--partitions", "0") == (
        1,
        "",
        "Error while executing topic command : The partitions must be greater than 0\n",
    )
    assert _topics(bs, "--create", "--topic", name, "--replication-factor", "0")[2] == (
        "Error while executing topic command : The replication factor must be between 1 and "
        "32767 inclusive\n"
    )
    assert _topics(bs, "--create", "--topic", name, "--replica-assignment", "0:0")[2] == (
        "Error while executing topic command : Partition replica lists may not contain "
        "duplicate entries: 0\n"
    )
    code, out, _ = _topics(bs, "--create", "--topic", name)
    assert (code, out) == (
        0,
        (
            "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore "
            "('_') could collide. To avoid issues it is best to use either, but not both.\n"
            f"Created topic {name}.\n"
        ),
    )


def test_alter_with_replica_assignment(broker_process: BrokerProcess) -> None:
    """Kafka 3.9's `--alter --partitions N --replica-assignment`: the list names every
    partition; the entries past the current ones place the new partitions. Success prints
    nothing; a bad list gets Kafka's (ZooKeeper-mode) broker messages."""
    bs = broker_process.bootstrap_servers
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    assert _topics(bs, "--create", "--topic", topic)[0] == 0
    grow = ("--alter", "--topic", topic, "--partitions")
    assert _topics(bs, *grow, "3", "--replica-assignment", "0,0,0") == (0, "", "")
    out = _topics(bs, "--describe", "--topic", topic)[1]
    assert out.splitlines()[1:] == [
        f"\tTopic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0{NO_ELR}"
        for p in (0, 1, 2)
    ]
    prefix = "Error while executing topic command : "
    assert _topics(bs, *grow, "4", "--replica-assignment", "0,0,0,7") == (
        1,
        "",
        prefix + "Unknown broker(s) in replica assignment: 7.\n",
    )
    assert _topics(bs, *grow, "5", "--replica-assignment", "0,0,0,0")[2] == (
        prefix + "Increasing the number of partitions by 2 but 1 assignments provided.\n"
    )
    assert "PartitionCount: 3\t" in _topics(bs, "--describe", "--topic", topic)[1]


def test_create_partitions_assignment_through_librdkafka(broker_process: BrokerProcess) -> None:
    """CreatePartitions with assignments from librdkafka: placed as given, or refused with
    INVALID_REPLICA_ASSIGNMENT and Kafka's message."""
    bs = broker_process.bootstrap_servers
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    assert _topics(bs, "--create", "--topic", topic)[0] == 0
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_partitions([NewPartitions(topic, 2, replica_assignment=[[0]])])[topic].result(30)
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([NewPartitions(topic, 3, replica_assignment=[[0, 0]])])[
            topic
        ].result(30)
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert error.str() == (
        "Duplicate brokers not allowed in replica assignment: 0, 0 for partition id 2."
    )
    assert "PartitionCount: 2\t" in _topics(bs, "--describe", "--topic", topic)[1]
