"""The cluster through ZooKeeper trouble: controller failover, expired sessions, a ZooKeeper
restarted under the cluster — each with a real ZooKeeper and three broker processes.

What must hold: a killed controller is replaced once its session times out (and at once when
it stops cleanly); a broker whose session expired (frozen past the timeout) registers again
and rejoins the ISR; after ZooKeeper restarts, the cluster still notices failures (its
watches were re-armed) and acks=all produce goes on.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from riverlog.devcluster import ZooKeeperServer, free_port
from riverlog.metadata.store import StoreUnavailableError
from riverlog.metadata.zookeeper import ZooKeeperStore
from tests.cluster_harness import (
    FAST_SETTINGS,
    Cluster,
    controller_of,
    create_topic,
    isr_full,
    partitions_of,
    wait_until,
)

pytestmark = pytest.mark.timeout(240)
SESSION_TIMEOUT_S = int(FAST_SETTINGS["zookeeper.session.timeout.ms"]) / 1000


def admin(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def registered(cluster: Cluster) -> list[int]:
    store = ZooKeeperStore(cluster.zk_connect)
    try:
        return sorted(int(b) for b in store.children("/brokers/ids"))
    finally:
        store.close()


def produce_acked(cluster: Cluster, topic: str, count: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 60000,
        }
    )
    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=i % 3, on_delivery=delivered)
    assert producer.flush(90) == 0 and not errors, errors


def test_a_killed_controller_is_replaced_within_the_session_timeout(cluster: Cluster) -> None:
    wait_until(lambda: controller_of(cluster) > 0, 10, "a controller")
    first = controller_of(cluster)
    cluster.brokers[first].kill()
    killed_at = time.monotonic()
    # The ephemeral /controller goes when the session times out; the election follows.
    wait_until(
        lambda: controller_of(cluster) not in (first, -1),
        2 * SESSION_TIMEOUT_S + 5,
        "a new controller",
    )
    took = time.monotonic() - killed_at
    print(
        f"controller failover after SIGKILL: {took:.1f} s (session timeout "
        f"{SESSION_TIMEOUT_S:.0f} s)"
    )
    second = controller_of(cluster)
    cluster.brokers[first].start()
    topic = create_topic(cluster)  # the new controller does a controller's work
    wait_until(lambda: isr_full(cluster, topic), 30, "a full ISR")
    stopped_at = time.monotonic()
    assert cluster.brokers[second].stop() == 0  # a clean stop resigns at once
    wait_until(
        lambda: controller_of(cluster) not in (second, -1),
        SESSION_TIMEOUT_S,
        "a controller after a clean stop",
    )
    print(f"controller failover after a clean stop: {time.monotonic() - stopped_at:.1f} s")


def test_brokers_that_died_with_the_controller_leave_every_isr(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """A follower SIGKILLed together with the controller: no controller saw it go, so the
    next one takes it out of every ISR when it takes over — here the leaders would keep it for
    a minute (`replica.lag.time.max.ms`). Left in, a restarted broker could be elected before
    it had caught up again."""
    settings = {"replica.lag.time.max.ms": "60000"}
    cluster = Cluster(zookeeper, tmp_path, settings=settings).start()
    try:
        topic = create_topic(cluster)
        wait_until(lambda: isr_full(cluster, topic), 30, "a full ISR")
        controller = controller_of(cluster)
        follower, survivor = (b for b in cluster.brokers if b != controller)
        cluster.brokers[controller].kill()
        cluster.brokers[follower].kill()
        wait_until(
            lambda: controller_of(cluster) == survivor,
            2 * SESSION_TIMEOUT_S + 5,
            "the survivor to be the controller",
        )

        def only_the_survivor() -> bool:
            shown = partitions_of(cluster, topic).values()
            return all(leader == survivor and isr == [survivor] for leader, _, isr in shown)

        wait_until(only_the_survivor, 10, "the dead out of every ISR")
    finally:
        cluster.stop()


def test_a_broker_whose_session_expired_registers_again(cluster: Cluster) -> None:
    topic = create_topic(cluster)
    wait_until(lambda: controller_of(cluster) > 0, 10, "a controller")
    controller = controller_of(cluster)
    victim = next(b for b in cluster.brokers if b != controller)
    produce_acked(cluster, topic, 100)
    cluster.brokers[victim].freeze()
    wait_until(
        lambda: victim not in registered(cluster),
        3 * SESSION_TIMEOUT_S,
        "the frozen broker's registration to expire",
    )
    produce_acked(cluster, topic, 100)  # the ISR shrank around it
    cluster.brokers[victim].thaw()
    wait_until(lambda: victim in registered(cluster), 30, "the broker registered again")
    wait_until(lambda: isr_full(cluster, topic), 60, "the broker back in every ISR")
    produce_acked(cluster, topic, 100)


def test_the_cluster_recovers_when_zookeeper_restarts(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper", free_port()).start()
    cluster = Cluster(zookeeper, tmp_path)
    try:
        cluster.start()
        topic = create_topic(cluster)
        produce_acked(cluster, topic, 300)
        zookeeper.stop()
        produce_acked(cluster, topic, 300)  # ZooKeeper is needed for changes, not for data
        zookeeper.start()
        wait_until(lambda: controller_of(cluster) > 0, 30, "a controller")
        wait_until(lambda: isr_full(cluster, topic), 60, "full ISRs")
        # The controller's watches were re-armed: a broker failure is still handled.
        leader = admin(cluster).list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        cluster.brokers[leader].kill()
        wait_until(
            lambda: (
                admin(cluster).list_topics(topic, timeout=10).topics[topic].partitions[0].leader
                not in (leader, -1)
            ),
            3 * SESSION_TIMEOUT_S + 10,
            "a new leader after the restart",
        )
        produce_acked(cluster, topic, 300)
    finally:
        cluster.stop()
        zookeeper.stop()


def unavailable(store: ZooKeeperStore) -> bool:
    try:
        store.exists("/")
    except StoreUnavailableError:
        return True
    return False


def test_a_store_call_without_zookeeper_fails_at_once(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper", free_port()).start()
    store = ZooKeeperStore(zookeeper.connect)
    try:
        zookeeper.stop()
        wait_until(lambda: unavailable(store), 10, "the store to notice")
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            store.get("/")
        assert time.monotonic() - started < 1.0
    finally:
        store.close()
