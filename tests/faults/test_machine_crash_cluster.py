"""A machine crash of a leader in the fault cluster (3 brokers, RF=3, min.insync.replicas=2,
acks=all, idempotent producers, a consumer group): broker 1's log dir is on the crash file
system (`riverlog.testing.crashfs`); it is killed with its machine — everything it had not
fsynced is lost, half of its dirty pages written back first, so its logs come back torn — and
restarted. Nothing acknowledged may be lost (the other replicas hold it), and the crashed
broker must rejoin every ISR after truncating. Root only (FUSE); skipped with the reason."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.testing.crash_mount import CrashMount, why_not
from riverlog.testing.fault_cluster import FaultCluster
from riverlog.testing.history import check
from riverlog.testing.hosts import Loopback
from riverlog.testing.workload import Workload

pytestmark = pytest.mark.timeout(240)

CRASHED = 1
PARTITIONS = 3


@pytest.fixture
def crashable(tmp_path: Path) -> Iterator[tuple[FaultCluster, CrashMount]]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    cluster = FaultCluster(tmp_path, Loopback())
    disk = CrashMount(tmp_path / "backing-1", cluster.brokers[CRASHED].data_dir)
    try:
        disk.mount()
        yield cluster.start(), disk
    finally:
        cluster.close()
        disk.close()


def acks_since(workload: Workload, since_ms: int) -> dict[int, int]:
    """partition -> acknowledgements at or after `since_ms`."""
    return {p: sum(1 for t in ts if t >= since_ms) for p, ts in workload.ack_times().items()}


def test_a_leader_machine_crash_loses_nothing_acknowledged(
    crashable: tuple[FaultCluster, CrashMount], tmp_path: Path
) -> None:
    cluster, disk = crashable
    topic = f"crash-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, PARTITIONS, {})
    led = [p for p, (leader, _, _) in cluster.layout(topic).items() if leader == CRASHED]
    assert led, f"broker {CRASHED} leads no partition: {cluster.layout(topic)}"
    workload = Workload(
        cluster.bootstrap_servers, topic, tmp_path / "workload", consumers=1, throughput=100
    )
    try:
        workload.start()
        start_ms = int(time.time() * 1000)
        cluster.wait_until(
            lambda: min(acks_since(workload, start_ms).get(p, 0) for p in led) >= 50,
            60,
            f"acknowledgements on the partitions broker {CRASHED} leads",
        )
        cluster.kill(CRASHED)  # the machine goes down with the broker on it
        report = disk.crash(writeback=0.5, seed=5)
        assert report["lost_bytes"] > 0, report
        # A reboot outlasts the ZooKeeper session: the controller has moved the leaderships
        # before the broker is back. (Back within the session while it was also the
        # controller, a new controller takes it for alive and keeps it leading on its
        # shortened log: ZooKeeper-mode Kafka's hole too, docs/fault-suite.md.)
        cluster.wait_until(
            lambda: _led_elsewhere(cluster, topic, led), 60, f"new leaders for {led}"
        )
        disk.mount()  # the reboot
        cluster.start_broker(CRASHED)
        back_ms = int(time.time() * 1000)
        cluster.wait_until(
            lambda: cluster.isr_full(topic), 90, "the crashed broker back in every ISR"
        )
        cluster.wait_until(
            lambda: all(acks_since(workload, back_ms).get(p, 0) > 0 for p in range(PARTITIONS)),
            60,
            "acknowledgements on every partition after the crash",
        )
        workload.stop(partitions=PARTITIONS, timeout_s=120)
    finally:
        workload.close()
    result = check(workload.history())
    details = result.summary() + "".join(f"\n{a.detail}" for a in result.anomalies[:20])
    assert result.acknowledged > 300, details
    # duplicates from idempotent producers after a leader change are docs/fault-suite.md's
    # finding 1 (not a crash matter); anything else — loss above all — fails here
    assert not [a for a in result.anomalies if a.kind != "duplicate"], details
    log = cluster.brokers[CRASHED].log_file.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def _led_elsewhere(cluster: FaultCluster, topic: str, partitions: list[int]) -> bool:
    try:
        layout = cluster.layout(topic)
    except Exception:  # the metadata answer of a cluster in failover
        return False
    return all(p in layout and layout[p][0] not in (CRASHED, -1) for p in partitions)
