"""`consumer-groups --reset-offsets --export` writes Kafka's CSV and `--from-file` reads it
back (offsets clamped into the log's range as Kafka clamps them), against a broker process
with a confluent-kafka group."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess
from tests.integration.test_cli_consumer_groups import consumer, groups_cli


def test_export_then_reset_from_file(broker_process: BrokerProcess, tmp_path: Path) -> None:
    bs = broker_process.bootstrap_servers
    topic, group = f"exp-{uuid.uuid4().hex[:6]}", f"exp-g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bs})
    for i in range(10):
        producer.produce(topic, b"v", partition=i % 2)
    assert producer.flush(30) == 0
    c = consumer(bs, group)
    c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 5)], asynchronous=False)
    c.close()

    exported = groups_cli(
        bs,
        "--reset-offsets",
        "--group",
        group,
        "--topic",
        topic,
        "--shift-by",
        "-2",
        "--export",
        "--dry-run",
    )
    assert exported.returncode == 0, exported.stderr
    assert sorted(exported.stdout.splitlines()[:-1]) == [f"{topic},0,3", f"{topic},1,3"]
    assert exported.stdout.endswith("\n\n")  # Kafka's println after the CSV's own newline

    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,1\n{topic},1,99\n")
    done = groups_cli(
        bs, "--reset-offsets", "--group", group, "--from-file", str(plan), "--execute", "--export"
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()[:-1]) == [f"{topic},0,1", f"{topic},1,5"]
    described = groups_cli(bs, "--describe", "--group", group)
    lines = [line.split() for line in described.stdout.splitlines() if topic in line]
    assert sorted((row[2], row[3]) for row in lines) == [("0", "1"), ("1", "5")]

    plan.write_text(f"other-group,{topic},0,1\n")
    missing = groups_cli(
        bs,
        "--reset-offsets",
        "--group",
        group,
        "--group",
        "x",
        "--from-file",
        str(plan),
        "--dry-run",
    )
    assert f"No reset plan for group {group} found" in missing.stderr
