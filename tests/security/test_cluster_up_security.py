"""`riverlog cluster up --security`: a secured development cluster that Kafka-style tools
reach with `--command-config` and nothing else can use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(150)


def riverlog(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverlog", *args], capture_output=True, text=True, timeout=timeout
    )


def test_cluster_up_security(tmp_path: Path) -> None:
    where = ["--dir", str(tmp_path)]
    up = riverlog(
        "cluster",
        "up",
        "--brokers",
        "2",
        "--port",
        "0",
        "--zookeeper-port",
        "0",
        "--security",
        *where,
    )
    try:
        assert up.returncode == 0, up.stderr
        bootstrap = up.stdout.strip()
        config = ["--command-config", str(tmp_path / "client.properties")]
        created = riverlog(
            "topics",
            "--bootstrap-server",
            bootstrap,
            *config,
            "--create",
            "--topic",
            "secured",
            "--partitions",
            "2",
            "--replication-factor",
            "2",
        )
        assert created.returncode == 0, created.stderr
        described = riverlog(
            "topics", "--bootstrap-server", bootstrap, *config, "--describe", "--topic", "secured"
        )
        assert described.returncode == 0 and "ReplicationFactor: 2" in described.stdout
        # no login: the broker refuses the connection (no SASL, no TLS)
        refused = riverlog("topics", "--bootstrap-server", bootstrap, "--list", timeout=60)
        assert refused.returncode != 0
        registration = (tmp_path / "broker-1.log").read_text()
        assert "listening on" in registration
    finally:
        down = riverlog("cluster", "down", *where)
        assert down.returncode == 0, down.stderr
