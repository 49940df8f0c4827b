"""Deterministic fault scenarios, each checked by the history checker: one proves the checker
sees the loss that unclean leader election allows; the other reproduces issue 21's
duplicates (a strict xfail on the branch; main's fix of the waiting-produce rule made it pass,
so it stays as the regression test)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from riverlog.testing.fault_cluster import FaultCluster
from riverlog.testing.history import History, check
from riverlog.testing.hosts import Loopback
from riverlog.testing.workload import Workload

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FaultCluster]:
    running = FaultCluster(
        tmp_path, Loopback(), settings={"unclean.leader.election.enable": "true"}
    )
    try:
        yield running.start()
    finally:
        running.close()


def produce(
    cluster: FaultCluster,
    topic: str,
    prefix: int,
    count: int,
    directory: Path,
    *,
    idempotent: bool = True,
    timeout_s: float = 120.0,
    keys: int | None = None,
) -> list[dict[str, Any]]:
    """`riverlog verifiable-producer` sending `count` values "prefix.N" (keyed 0 to `keys`-1
    in turn when given, so they spread over the partitions); its events."""
    config = directory / f"producer-{prefix}.properties"
    config.write_text(
        f"enable.idempotence={str(idempotent).lower()}\nretries=2147483647\n"
        "linger.ms=0\nrequest.timeout.ms=30000\nacks=all\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "verifiable-producer",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--topic",
            topic,
            "--max-messages",
            str(count),
            "--value-prefix",
            str(prefix),
            "--command-config",
            str(config),
            *([] if keys is None else ["--repeating-keys", str(keys)]),
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def single_partition_topic(cluster: FaultCluster, **configs: str) -> tuple[str, int, list[int]]:
    """A new 1-partition RF=3 topic: its name, its leader, its followers."""
    topic = f"repro-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 1, configs)
    leader, replicas, _ = cluster.layout(topic)[0]
    return topic, leader, [r for r in replicas if r != leader]


def isr_is(cluster: FaultCluster, topic: str, wanted: set[int]) -> bool:
    try:
        return set(cluster.layout(topic)[0][2]) == wanted
    except Exception:  # a broker that is down does not answer: not yet
        return False


def led_by_one_of(cluster: FaultCluster, topic: str, brokers: list[int]) -> bool:
    try:
        return cluster.layout(topic)[0][0] in brokers
    except Exception:  # no leader yet (LEADER_NOT_AVAILABLE), or a broker down: not yet
        return False


def final_read(cluster: FaultCluster, topic: str, directory: Path, partitions: int = 1) -> History:
    workload = Workload(cluster.bootstrap_servers, topic, directory, producers=0, consumers=0)
    workload.stop(partitions=partitions, timeout_s=60)
    return History(topic, final=workload.final)


def test_unclean_leader_election_loses_acknowledged_records_and_the_checker_says_so(
    cluster: FaultCluster, tmp_path: Path
) -> None:
    """Followers die; the leader alone acknowledges (min ISR 1); the leader dies; a stale
    follower comes back and is elected uncleanly: what only the old leader held is gone."""
    topic, leader, followers = single_partition_topic(cluster, **{"min.insync.replicas": "1"})
    before = produce(cluster, topic, 1, 50, tmp_path)
    for f in followers:
        cluster.kill(f)
    cluster.wait_until(lambda: isr_is(cluster, topic, {leader}), 60, "ISR = the leader alone")
    alone = produce(cluster, topic, 2, 50, tmp_path)
    cluster.kill(leader)
    for f in followers:
        cluster.start_broker(f)
    cluster.wait_until(lambda: led_by_one_of(cluster, topic, followers), 60, "an unclean leader")
    cluster.restart_stopped()
    cluster.wait_until(lambda: cluster.isr_full(topic), 60, "the old leader back in the ISR")
    history = final_read(cluster, topic, tmp_path)
    history.producers = {"before": before, "alone": alone}
    report = check(history)
    lost = {a.detail.split()[1] for a in report.of("lost")}
    assert lost == {f"2.{i}" for i in range(50)}, report.summary()
    assert report.acknowledged == 100
    assert {a.kind for a in report.anomalies} == {"lost"}, report.summary()


def test_the_same_scenario_without_unclean_election_loses_nothing(tmp_path: Path) -> None:
    """The control: with unclean election off the partition waits for its last ISR member."""
    cluster = FaultCluster(tmp_path, Loopback()).start()
    try:
        topic, leader, followers = single_partition_topic(cluster, **{"min.insync.replicas": "1"})
        before = produce(cluster, topic, 1, 50, tmp_path)
        for f in followers:
            cluster.kill(f)
        cluster.wait_until(lambda: isr_is(cluster, topic, {leader}), 60, "ISR = the leader")
        alone = produce(cluster, topic, 2, 50, tmp_path)
        cluster.kill(leader)
        for f in followers:
            cluster.start_broker(f)
        cluster.restart_stopped()
        cluster.wait_until(lambda: cluster.isr_full(topic), 60, "the ISR full again")
        history = final_read(cluster, topic, tmp_path)
        history.producers = {"before": before, "alone": alone}
        report = check(history)
        assert report.ok, report.summary()
        assert report.acknowledged == 100
    finally:
        cluster.close()


def log_bytes(cluster: FaultCluster, broker_id: int, topic: str) -> int:
    return sum(
        f.stat().st_size for f in (cluster.brokers[broker_id].data_dir / f"{topic}-0").glob("*.log")
    )


def test_a_waiting_acks_all_produce_survives_a_follower_shutdown(tmp_path: Path) -> None:
    """Issue 21's scenario, found again by the suite: a follower is frozen (the high
    watermark waits), records are appended and wait for acks=all, the other follower shuts
    down cleanly (the controller writes the ISR change), the frozen one thaws well within
    replica.lag.time.max.ms. Every record must be acknowledged once and stored once. (A plain
    acks=all producer with retries; the producer does not know the frozen broker, so it never
    waits on it; timeouts are long so that no session expires and no ISR shrinks meanwhile.)"""
    slow = {"zookeeper.session.timeout.ms": "15000", "replica.lag.time.max.ms": "15000"}
    cluster = FaultCluster(tmp_path, Loopback(), settings=slow).start()
    producer: subprocess.Popen[str] | None = None
    try:
        topic, leader, (frozen, leaving) = single_partition_topic(cluster)
        before = log_bytes(cluster, leader, topic)
        cluster.freeze(frozen)
        config = tmp_path / "producer.properties"
        config.write_text(
            "enable.idempotence=false\nretries=2147483647\nlinger.ms=0\n"
            "request.timeout.ms=30000\nacks=all\n"
        )
        known = ",".join(b.address for i, b in cluster.brokers.items() if i != frozen)
        producer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "riverlog",
                "verifiable-producer",
                "--bootstrap-server",
                known,
                "--topic",
                topic,
                "--max-messages",
                "20",
                "--value-prefix",
                "1",
                "--command-config",
                str(config),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        cluster.wait_until(
            lambda: log_bytes(cluster, leader, topic) > before,
            30,
            "the records in the leader's log, waiting for the frozen follower",
        )
        cluster.terminate(leaving)
        cluster.thaw(frozen)
        out, _ = producer.communicate(timeout=120)
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        cluster.start_broker(leaving)
        cluster.wait_until(lambda: cluster.isr_full(topic), 60, "the ISR whole again")
        history = final_read(cluster, topic, tmp_path)
        history.producers = {"producer": events}
        report = check(history)
        assert report.acknowledged == 20, report.summary()
        assert report.ok, report.summary() + "".join(f"\n{a.detail}" for a in report.anomalies)
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait(10)
        cluster.close()
