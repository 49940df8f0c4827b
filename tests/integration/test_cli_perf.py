"""`riverlog producer-perf-test` / `consumer-perf-test`: they run and report like Kafka's."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.integration.conftest import BrokerProcess


def test_perf_tools(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    produced = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "producer-perf-test",
            "--topic",
            "perf",
            "--num-records",
            "5000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bs}",
            "acks=all",
            "batch.size=10000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert produced.returncode == 0, produced.stderr
    summary = produced.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"5000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
        r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.",
        summary,
    ), summary
    consumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "consumer-perf-test",
            "--bootstrap-server",
            bs,
            "--topic",
            "perf",
            "--messages",
            "5000",
            "--timeout",
            "5000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert consumed.returncode == 0, consumed.stderr
    header, line = consumed.stdout.strip().splitlines()
    assert header.startswith("start.time, end.time, data.consumed.in.MB, MB.sec")
    assert line.split(", ")[4] == "5000"
