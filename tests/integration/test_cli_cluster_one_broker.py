"""`riverlog cluster stop|start|restart --broker N` bounce one broker of a dev cluster, and
`down` stops a broker started again that way (its new PID is in cluster.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from riverlog.devcluster import pid_alive
from tests.cluster_harness import wait_until
from tests.integration.test_cli_cluster import describe, riverlog

pytestmark = pytest.mark.timeout(240)


def _pids(directory: Path) -> dict[str, int]:
    state = json.loads((directory / "cluster.json").read_text())
    return {k: int(v["pid"]) for k, v in state["brokers"].items()}


def test_stop_start_restart_one_broker(tmp_path: Path) -> None:
    where = ["--dir", str(tmp_path)]
    up = riverlog("cluster", "up", "--brokers", "2", "--port", "0", "--zookeeper-port", "0", *where)
    assert up.returncode == 0, up.stderr
    started = _pids(tmp_path)
    try:
        bootstrap = up.stdout.strip()
        created = riverlog(
            "topics",
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            "bounce",
            "--partitions",
            "2",
            "--replication-factor",
            "2",
        )
        assert created.returncode == 0, created.stderr

        solo = riverlog(
            "topics",
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            "solo",
            "--replica-assignment",
            "2",
        )
        assert solo.returncode == 0, solo.stderr

        stopped = riverlog("cluster", "stop", "--broker", "2", *where)
        assert stopped.returncode == 0, stopped.stderr
        assert "Waiting for broker 2" in stopped.stderr
        assert not pid_alive(started["2"], "riverlog") and pid_alive(started["1"], "riverlog")

        # a leaderless partition: get-offsets says what it waits for, then skips it
        props = tmp_path / "short.properties"
        props.write_text("request.timeout.ms=3000\n")
        waited = riverlog(
            "get-offsets",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            "solo",
            "--command-config",
            str(props),
        )
        assert waited.returncode == 0 and waited.stdout == "", waited.stderr
        assert "Waiting for a leader of solo-0 ..." in waited.stderr
        assert (
            "Skip getting offsets for topic-partition solo-0 due to error: "
            "org.apache.kafka.common.errors.LeaderNotAvailableException"
        ) in waited.stderr

        again = riverlog("cluster", "start", "--broker", "2", *where)
        assert again.returncode == 0, again.stderr
        assert riverlog("cluster", "start", "--broker", "2", *where).returncode == 1  # running
        wait_until(
            lambda: describe(bootstrap, "--under-replicated-partitions") == [],
            60,
            "broker 2 back in every ISR",
        )

        restarted = riverlog("cluster", "restart", "--broker", "1", *where)
        assert restarted.returncode == 0, restarted.stderr
        now = _pids(tmp_path)
        assert now["1"] != started["1"] and now["2"] != started["2"]
        assert all(pid_alive(pid, "riverlog") for pid in now.values())
        assert riverlog("cluster", "stop", "--broker", "7", *where).returncode == 1
    finally:
        down = riverlog("cluster", "down", *where)
    assert down.returncode == 0, down.stderr
    assert not any(pid_alive(pid, "riverlog") for pid in [*now.values(), *started.values()])
