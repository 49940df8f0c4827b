"""Perf tools' further Kafka 3.9 flags against a broker process: producer-perf-test
--payload-file / --payload-monotonic / --producer.config, consumer-perf-test --group,
--show-detailed-stats, --hide-header, --consumer.config, and Kafka's wording of their output."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tests.integration.conftest import BrokerProcess


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverlog", *args], capture_output=True, text=True, timeout=120
    )


def test_payload_file_and_producer_config(broker_process: BrokerProcess, tmp_path: Path) -> None:
    bs = broker_process.bootstrap_servers
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha|beta|gamma")
    config = tmp_path / "producer.properties"
    config.write_text(f"bootstrap.servers={bs}\nlinger.ms=1\n")
    produced = _run(
        "producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        "30",
        "--payload-file",
        str(payloads),
        "--payload-delimiter",
        "|",
        "--throughput",
        "-1",
        "--producer.config",
        str(config),
    )
    assert produced.returncode == 0, produced.stderr
    lines = produced.stdout.splitlines()
    assert lines[:2] == [f"Reading payloads from: {payloads}", "Number of messages read: 3"]
    assert re.fullmatch(
        r"30 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), .* 99\.9th\.", lines[-1]
    )
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "perf-check"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = set()
    while len(values) < 3:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        values.add(message.value())
    consumer.close()
    assert values == {b"alpha", b"beta", b"gamma"}

    neither = _run(
        "producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        "1",
        "--payload-monotonic",
        "--throughput",
        "-1",
    )
    assert neither.returncode == 1
    assert "Either --producer-props or --producer.config must be specified." in neither.stderr
    both = _run(
        "producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        "1",
        "--record-size",
        "1",
        "--payload-monotonic",
        "--throughput",
        "-1",
    )
    assert both.returncode == 2 and "not allowed with argument" in both.stderr

    consumed = _run(
        "consumer-perf-test",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--messages",
        "30",
        "--group",
        "perf-g",
        "--show-detailed-stats",
        "--reporting-interval",
        "1",
    )
    assert consumed.returncode == 0, consumed.stderr
    out = consumed.stdout.splitlines()
    assert out[0] == (
        "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
        "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    for line in out[1:]:
        assert re.fullmatch(
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}, 0, [\d.]+, [\d.]+, \d+, "
            r"[\d.]+, \d+, -?\d+, [\d.]+, [\d.]+",
            line,
        ), line
    short = _run(
        "consumer-perf-test",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--messages",
        "31",
        "--group",
        "perf-g2",
        "--hide-header",
        "--timeout",
        "6000",
    )
    lines = short.stdout.splitlines()
    assert lines[0] == (
        "WARNING: Exiting before consuming the expected number of messages: "
        "timeout (6000 ms) exceeded. You can use the --timeout option to "
        "increase the timeout."
    )
    assert re.fullmatch(r"[\d\- :]+, [\d\- :]+, [\d.]+, [\d.]+, 30, .*", lines[1]), lines[1]
