"""`riverlog console-producer` / `console-consumer` against a broker process, and against
records written by a real client (kcat) to show the formats interoperate."""

from __future__ import annotations

import subprocess
import sys
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess


def _tool(
    name: str, bootstrap: str, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverlog", name, "--bootstrap-server", bootstrap, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_console_round_trip_with_keys_and_headers(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = f"console-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
    lines = [f"h1:a{i},h2:b\tuser-{i % 4}:event {i}" for i in range(30)]
    produced = _tool(
        "console-producer",
        bs,
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--property",
        "parse.headers=true",
        "--compression-codec",
        "zstd",
        stdin="\n".join(lines) + "\n",
    )
    assert produced.returncode == 0, produced.stderr
    consumed = _tool(
        "console-consumer",
        bs,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "30",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
        "--property",
        "key.separator=|",
    )
    assert consumed.returncode == 0, consumed.stderr
    assert "Processed a total of 30 messages" in consumed.stderr
    got = sorted(consumed.stdout.splitlines())
    assert got == sorted(f"h1:a{i},h2:b|user-{i % 4}|event {i}" for i in range(30))


def test_keys_land_where_librdkafka_puts_them(broker_process: BrokerProcess) -> None:
    """murmur2 partitioning: the same key goes to the same partition from either client."""
    bs = broker_process.bootstrap_servers
    topic = f"keys-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bs, "partitioner": "murmur2_random"})
    where: dict[str, int] = {}
    for i in range(20):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=b"librdkafka",
            on_delivery=lambda e, m: where.__setitem__(m.key().decode(), m.partition()),
        )
    producer.flush(10)
    _tool(
        "console-producer",
        bs,
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        stdin="".join(f"k{i}:riverlog\n" for i in range(20)),
    )
    consumed = _tool(
        "console-consumer",
        bs,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "40",
        "--property",
        "print.key=true",
        "--property",
        "print.partition=true",
    )
    seen: dict[tuple[str, str], int] = {}
    for line in consumed.stdout.splitlines():
        partition, key, value = line.split("\t")
        seen[(key, value)] = int(partition.removeprefix("Partition:"))
    for i in range(20):
        assert seen[(f"k{i}", "riverlog")] == seen[(f"k{i}", "librdkafka")] == where[f"k{i}"]


def test_consumer_timeout_and_offsets(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    topic = f"offsets-{uuid.uuid4().hex[:6]}"
    _tool("console-producer", bs, "--topic", topic, stdin="".join(f"v{i}\n" for i in range(10)))
    out = _tool(
        "console-consumer",
        bs,
        "--topic",
        topic,
        "--partition",
        "0",
        "--offset",
        "7",
        "--timeout-ms",
        "1500",
        "--property",
        "print.offset=true",
    )
    assert out.stdout.splitlines() == ["Offset:7\tv7", "Offset:8\tv8", "Offset:9\tv9"]
    assert "Processed a total of 3 messages" in out.stderr
