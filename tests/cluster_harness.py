"""A riverlog cluster on loopback for tests: broker processes around a real ZooKeeper.

Each broker (`riverlog.devcluster.BrokerProcess`) is `python -m riverlog server` with its own
data dir and a fixed port (so a restarted broker comes back where clients expect it), all
under one ZooKeeper chroot per cluster. Brokers can be stopped cleanly (SIGTERM: controlled
shutdown), killed (SIGKILL), frozen (SIGSTOP) and thawed (SIGCONT), and restarted. Only
processes started here are signalled, by PID.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.devcluster import BrokerProcess, ZooKeeperServer

FAST_SETTINGS = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "controlled.shutdown.retry.backoff.ms": "300",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
    "log.retention.check.interval.ms": "60000",
}


class Cluster:
    def __init__(
        self,
        zookeeper: ZooKeeperServer,
        directory: Path,
        brokers: int = 3,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.chroot = f"/riverlog-{uuid.uuid4().hex[:8]}"
        self.zk_connect = zookeeper.connect + self.chroot
        merged = {**FAST_SETTINGS, **(settings or {})}
        self.brokers = {
            i: BrokerProcess(i, directory, self.zk_connect, merged) for i in range(1, brokers + 1)
        }

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    def start(self) -> Cluster:
        threads = [threading.Thread(target=b.start) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self

    def stop(self) -> None:
        for broker in self.brokers.values():
            if broker.running:
                try:
                    broker.stop(30)
                except subprocess.TimeoutExpired:
                    broker.kill()

    def kill_all(self) -> None:
        for broker in self.brokers.values():
            broker.kill()


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


# --- asking the cluster, as a client does ------------------------------------------------


def create_topic(cluster: Cluster, partitions: int = 3, **config: str) -> str:
    """A new RF=3 topic; its name."""
    name = f"t-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # alive until done
    admin.create_topics([NewTopic(name, partitions, 3, config=config)])[name].result(30)
    return name


def partitions_of(cluster: Cluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition → (leader, replicas, isr), as Metadata answers."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    found = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return {p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in found.items()}


def controller_of(cluster: Cluster) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    return int(admin.list_topics(timeout=10).controller_id)


def isr_full(cluster: Cluster, topic: str) -> bool:
    try:
        return all(
            len(isr) == 3 and leader >= 0
            for leader, _, isr in partitions_of(cluster, topic).values()
        )
    except KafkaException:
        return False


def create_assigned_topic(
    cluster: Cluster, plan: list[list[int]], prefix: str = "t", **config: str
) -> str:
    """A new RF=3 topic whose partition i lives on `plan[i]` (the first its preferred
    leader); its name, once every partition has a leader and a full ISR."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # alive until done
    admin.create_topics([NewTopic(name, len(plan), replica_assignment=plan, config=config)])[
        name
    ].result(30)
    wait_until(lambda: isr_full(cluster, name), 30, "the new topic's ISRs full")
    return name
