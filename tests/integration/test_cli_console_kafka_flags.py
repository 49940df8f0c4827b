"""Console tools' further Kafka 3.9 flags against a broker process: --producer.config /
--consumer.config files (with --X-property over them), --include, --formatter and the
DefaultMessageFormatter's properties (deserializers, null.literal, separators)."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess
from tests.integration.test_cli_console import _tool

LONG = "org.apache.kafka.common.serialization.LongDeserializer"


def _topic(bs: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def test_config_files_and_include(broker_process: BrokerProcess, tmp_path: Path) -> None:
    bs = broker_process.bootstrap_servers
    topic = _topic(bs, "incl")
    producer_file = tmp_path / "producer.properties"
    producer_file.write_text("acks=1\nlinger.ms=0\n")
    produced = _tool(
        "console-producer",
        bs,
        "--topic",
        topic,
        "--producer.config",
        str(producer_file),
        "--producer-property",
        "acks=all",
        stdin="one\ntwo\n",
    )
    assert produced.returncode == 0, produced.stderr
    consumer_file = tmp_path / "consumer.properties"
    consumer_file.write_text("auto.offset.reset=earliest\n")
    read = _tool(
        "console-consumer",
        bs,
        "--include",
        f"{topic}|no-such-topic",
        "--consumer.config",
        str(consumer_file),
        "--max-messages",
        "2",
        "--timeout-ms",
        "20000",
    )
    assert (read.returncode, read.stdout) == (0, "one\ntwo\n"), read.stderr
    both = _tool("console-consumer", bs, "--include", topic, "--topic", topic)
    assert both.returncode == 1
    assert "Exactly one of --include/--topic is required." in both.stderr

    consumer_file.write_text("no.such.client.key=1\n")  # not a client key: refused
    refused = _tool(
        "console-consumer",
        bs,
        "--topic",
        topic,
        "--consumer.config",
        str(consumer_file),
        "--max-messages",
        "1",
    )
    assert refused.returncode == 1 and "no.such.client.key" in refused.stderr


def test_formatter_and_its_properties(broker_process: BrokerProcess, tmp_path: Path) -> None:
    bs = broker_process.bootstrap_servers
    topic = _topic(bs, "fmt")
    producer = Producer({"bootstrap.servers": bs})
    producer.produce(topic, struct.pack(">q", 42), None, partition=0, headers=[("h", None)])
    producer.produce(topic, struct.pack(">q", -7), b"k", partition=0)
    assert producer.flush(30) == 0
    formatter_file = tmp_path / "formatter.properties"
    formatter_file.write_text("print.key=true\nnull.literal=<none>\n")
    read = _tool(
        "console-consumer",
        bs,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "2",
        "--formatter",
        "kafka.tools.DefaultMessageFormatter",
        "--formatter-config",
        str(formatter_file),
        "--property",
        f"value.deserializer={LONG}",
        "--property",
        "print.headers=true",
        "--property",
        "key.separator=|",
        "--timeout-ms",
        "20000",
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout == "h:<none>|<none>|42\nNO_HEADERS|k|-7\n"
    key_only = _tool(
        "console-consumer",
        bs,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "1",
        "--property",
        "print.key=true",
        "--property",
        "print.value=false",
        "--timeout-ms",
        "20000",
    )
    assert key_only.stdout == "null\n"  # the last column ends the line: no separator after it
    as_flags = _tool(
        "console-consumer",
        bs,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "2",
        "--value-deserializer",
        LONG,
        "--timeout-ms",
        "20000",
    )
    assert as_flags.stdout == "42\n-7\n"
    other = _tool(
        "console-consumer",
        bs,
        "--topic",
        topic,
        "--formatter",
        "kafka.tools.LoggingMessageFormatter",
    )
    assert other.returncode == 1 and "LoggingMessageFormatter" in other.stderr
