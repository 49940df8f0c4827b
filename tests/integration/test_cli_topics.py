"""`riverlog topics` against a broker process: Kafka's flags, output and errors."""

from __future__ import annotations

import subprocess
import sys
import uuid

from tests.integration.conftest import BrokerProcess


def _topics(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverlog", "topics", "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_create_list_describe_alter_delete(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    created = _topics(
        bs,
        "--create",
        "--topic",
        topic,
        "--partitions",
        "3",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=60000",
    )
    assert created.returncode == 0, created.stderr
    assert created.stdout == f"Created topic {topic}.\n"

    assert topic in _topics(bs, "--list").stdout.splitlines()

    described = _topics(bs, "--describe", "--topic", topic)
    lines = described.stdout.splitlines()
    assert lines[0].startswith(f"Topic: {topic}\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000" in lines[0]
    assert lines[1:] == [
        f"\tTopic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0"
        "\tElr: N/A\tLastKnownElr: N/A"
        for p in range(3)
    ]

    again = _topics(bs, "--create", "--topic", topic)
    assert again.returncode == 1
    assert f"Error while executing topic command : Topic '{topic}' already exists." in again.stderr
    assert _topics(bs, "--create", "--topic", topic, "--if-not-exists").returncode == 0

    assert _topics(bs, "--alter", "--topic", topic, "--partitions", "5").returncode == 0
    assert "PartitionCount: 5" in _topics(bs, "--describe", "--topic", topic).stdout
    shrink = _topics(bs, "--alter", "--topic", topic, "--partitions", "2")
    assert shrink.returncode == 1 and "partitions" in shrink.stderr

    assert _topics(bs, "--delete", "--topic", topic).returncode == 0
    assert topic not in _topics(bs, "--list").stdout.splitlines()
    missing = _topics(bs, "--delete", "--topic", topic)
    assert missing.returncode == 1
    assert _topics(bs, "--delete", "--topic", topic, "--if-exists").returncode == 0


def test_bad_config_and_unreachable_broker(broker_process: BrokerProcess) -> None:
    bad = _topics(
        broker_process.bootstrap_servers,
        "--create",
        "--topic",
        "x-bad",
        "--config",
        "segment.bytes=10",
    )
    assert bad.returncode == 1 and "segment.bytes" in bad.stderr
    down = _topics("127.0.0.1:1", "--list")
    assert down.returncode == 1 and "Error while executing topic command" in down.stderr
