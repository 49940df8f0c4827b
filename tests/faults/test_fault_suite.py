"""The fault suite's short mode: 12 seeded random faults against 3 brokers (RF=3, min ISR 2,
acks=all, idempotent producers, a consumer group) and the history checked; plus the network
layer of the test hosts on its own. The long mode is bench/bench_faults.py.

Network namespaces need root and `ip`/`nft` (Debian's iproute2, nftables); without them the
short run injects the process and ZooKeeper faults on loopback, and the network test skips
saying why. `disk-full` is left out here (its fix has a deterministic test of its own,
tests/faults/test_disk_full.py; the long mode injects it with --disk-mb). Any anomaly fails
the run, duplicates included (finding 1 of docs/fault-suite.md is fixed, with deterministic
regression tests of its own)."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import pytest

from riverlog.testing.hosts import NetnsHosts, netns_unavailable
from riverlog.testing.nemesis import NETWORK_KINDS, PROCESS_KINDS
from riverlog.testing.suite import run_suite

NO_NETNS = netns_unavailable()
SEED = 27


@pytest.mark.timeout(280)
def test_short_fault_run_loses_nothing(tmp_path: Path) -> None:
    netns = NO_NETNS is None
    kinds = PROCESS_KINDS + (NETWORK_KINDS if netns else ())
    quick = {"zookeeper.session.timeout.ms": "2000", "replica.lag.time.max.ms": "2000"}
    result = run_suite(tmp_path, faults=12, seed=SEED, netns=netns, kinds=kinds, settings=quick)
    table = result.table()
    print(table)
    assert len(result.faults) == 12, table
    assert not result.notes, table
    assert result.report.acknowledged > 1000, table
    assert not result.report.anomalies, table


@pytest.mark.skipif(NO_NETNS is not None, reason=f"network namespaces: {NO_NETNS}")
@pytest.mark.timeout(60)
def test_netns_partitions_cut_and_heal_connections() -> None:
    hosts = NetnsHosts()
    try:
        address = hosts.addresses["b1"]
        server = hosts.call_in("b1", lambda: socket.create_server((address, 9092)))
        accepting = threading.Thread(target=_accept_forever, args=(server,), daemon=True)
        accepting.start()

        def connects() -> bool:
            try:
                socket.create_connection((address, 9092), timeout=1).close()
            except OSError:
                return False
            return True

        assert hosts.call_in("client", connects)
        hosts.partition("b1", "client", one_way=True)  # b1's answers are dropped
        assert not hosts.call_in("client", connects)
        hosts.heal()
        assert hosts.call_in("client", connects)
        hosts.isolate("b1")
        assert not hosts.call_in("client", connects)
        hosts.heal()
        assert hosts.call_in("client", connects)
        server.close()
    finally:
        hosts.close()
    assert not [ns for ns in _namespaces() if ns.startswith(hosts.prefix)]


def _accept_forever(server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        conn.close()


def _namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
