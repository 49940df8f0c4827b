"""Fixtures that start real brokers: a separate `riverlog server` process per test module."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from riverlog.embedded import EmbeddedBroker, broker
from tests.cluster_harness import Cluster
from tests.zookeeper_server import ZooKeeperServer

LISTENING = re.compile(rb"listening on (127\.0\.0\.1:\d+)")


@dataclass
class BrokerProcess:
    proc: subprocess.Popen[bytes]
    bootstrap_servers: str
    data_dir: Path

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        return self.proc.wait(timeout=30)


def start_broker(data_dir: Path, *overrides: str, timeout_s: float = 30) -> BrokerProcess:
    """`riverlog server` on a free loopback port; returns once it serves."""
    args = [
        sys.executable,
        "-m",
        "riverlog",
        "server",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data_dir),
    ]
    for item in overrides:
        args += ["--override", item]
    log = open(data_dir.parent / f"{data_dir.name}.broker.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        found = LISTENING.search(line)
        if found:
            return BrokerProcess(proc, found.group(1).decode(), data_dir)
    proc.kill()
    raise RuntimeError(f"the broker did not start; see {log.name}")


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("broker") / "data"
    running = start_broker(data_dir)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="package")
def transactions_broker() -> Iterator[str]:
    """One embedded broker (its bootstrap servers) for test_transactions.py and
    test_transactions_cli.py: 5 transaction-state and offsets partitions, timed-out
    transactions aborted within 200 ms."""
    overrides = {
        "transaction.state.log.num.partitions": "5",
        "offsets.topic.num.partitions": "5",
        "group.initial.rebalance.delay.ms": "0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    }
    with broker(overrides=overrides) as running:
        assert isinstance(running, EmbeddedBroker)
        yield running.bootstrap_servers


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    """Three broker processes around the session's ZooKeeper (a chroot of their own)."""
    running = Cluster(zookeeper, tmp_path).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local[2] Spark session for the test session's Spark tests."""
    from tests.spark_harness import start_spark

    session = start_spark()
    try:
        yield session
    finally:
        session.stop()
