"""`riverlog cluster up|down` and `riverlog topics --describe` on the cluster it starts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from riverlog.devcluster import pid_alive, signal_pid, wait_gone
from tests.cluster_harness import wait_until

pytestmark = pytest.mark.timeout(240)


def riverlog(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverlog", *args], capture_output=True, text=True, timeout=timeout
    )


def describe(bootstrap: str, *args: str) -> list[str]:
    out = riverlog("topics", "--bootstrap-server", bootstrap, "--describe", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_cluster_up_describe_and_down(tmp_path: Path) -> None:
    where = ["--dir", str(tmp_path)]
    up = riverlog("cluster", "up", "--brokers", "3", "--port", "0", "--zookeeper-port", "0", *where)
    state = json.loads((tmp_path / "cluster.json").read_text()) if up.returncode == 0 else {}
    try:
        assert up.returncode == 0, up.stderr
        bootstrap = up.stdout.strip()
        assert len(bootstrap.split(",")) == 3

        again = riverlog("cluster", "up", *where)
        assert again.returncode == 1 and "already running" in again.stderr

        created = riverlog(
            "topics",
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            "spread",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
        )
        assert created.returncode == 0, created.stderr
        lines = describe(bootstrap, "--topic", "spread")
        assert "\tPartitionCount: 3\tReplicationFactor: 3\t" in lines[0]
        leaders = set()
        for line in lines[1:]:
            fields = dict(f.split(": ") for f in line.strip().split("\t"))
            replicas = fields["Replicas"].split(",")
            assert sorted(replicas) == ["1", "2", "3"] and fields["Leader"] == replicas[0]
            assert sorted(fields["Isr"].split(",")) == ["1", "2", "3"]
            leaders.add(fields["Leader"])
        assert leaders == {"1", "2", "3"}

        third = int(state["brokers"]["3"]["pid"])
        assert signal_pid(third, "riverlog", signal.SIGTERM)
        assert wait_gone(third, "riverlog", 60)
        wait_until(
            lambda: len(describe(bootstrap, "--under-replicated-partitions")) >= 3,
            30,
            "under-replicated partitions listed",
        )
        for line in describe(bootstrap, "--topic", "spread", "--under-replicated-partitions"):
            assert "\tLeader: 3\t" not in line and "3" not in line.split("Isr: ")[1]
    finally:
        down = riverlog("cluster", "down", *where)
    assert down.returncode == 0, down.stderr
    pids = [int(b["pid"]) for b in state["brokers"].values()]
    assert not any(pid_alive(pid, "riverlog") for pid in pids)
    assert not pid_alive(int(state["zookeeper"]["pid"]), "QuorumPeerMain")
    assert riverlog("cluster", "down", *where).returncode == 1  # nothing left to stop
