"""The cluster with real parts: a real ZooKeeper, three broker processes, confluent-kafka.

What must hold while brokers are killed (SIGKILL), frozen (SIGSTOP) and restarted: every
record acknowledged with acks=all is there afterwards, once, in order per partition; the
ISR shrinks around a frozen follower and takes it back once it catches up; fewer in-sync
replicas than `min.insync.replicas` refuse writes; a leader with writes that never reached
the ISR truncates them when it comes back, and replicas end byte-identical.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_harness import (
    Cluster,
    controller_of,
    create_topic,
    isr_full,
    partitions_of,
    wait_until,
)

pytestmark = pytest.mark.timeout(240)


class Load:
    """An idempotent acks=all producer writing 0, 1, 2, ... round-robin over partitions,
    remembering what was acknowledged."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int, **settings: object):
        self.topic = topic
        self.partitions = partitions
        self.acked: dict[int, list[int]] = defaultdict(list)
        self.errors: list[KafkaError] = []
        self.stop = threading.Event()
        config: dict[str, object] = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            # Idempotence state changes (producer ids, epoch bumps, drains) go to stderr,
            # which pytest shows when a test fails: the story behind a duplicate or a loss.
            "debug": "eos",
            **settings,
        }
        self.producer = Producer(config)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _delivered(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[msg.partition()].append(int(msg.value()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(
                    self.topic,
                    str(i).encode(),
                    partition=i % self.partitions,
                    on_delivery=self._delivered,
                )
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.002)

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert self.producer.flush(90) == 0, "records left unacknowledged"


def consume_all(cluster: Cluster, topic: str, partitions: int) -> dict[int, list[int]]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "check",
            "enable.auto.commit": False,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[int]] = defaultdict(list)
        deadline = time.monotonic() + 60
        while any(len(got[p]) < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, "could not read everything back"
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    got[msg.partition()].append(int(msg.value()))
        return got
    finally:
        consumer.close()


def check_nothing_lost(load: Load, got: dict[int, list[int]]) -> None:
    for p in range(load.partitions):
        values = got[p]
        assert values == sorted(set(values)), f"partition {p}: duplicates or disorder"
        missing = set(load.acked[p]) - set(values)
        assert not missing, f"partition {p}: acknowledged records lost: {sorted(missing)[:10]}"


def segment_bytes(cluster: Cluster, topic: str, partition: int) -> dict[int, bytes]:
    out = {}
    for broker_id, broker in cluster.brokers.items():
        directory = broker.data_dir / f"{topic}-{partition}"
        out[broker_id] = b"".join(f.read_bytes() for f in sorted(directory.glob("*.log")))
    return out


def test_a_replicated_topic_is_led_spread_and_copied_byte_for_byte(cluster: Cluster) -> None:
    topic = create_topic(cluster)
    parts = partitions_of(cluster, topic)
    assert sorted(leader for leader, _, _ in parts.values()) == [1, 2, 3]
    for leader, replicas, isr in parts.values():
        assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3]
        assert replicas[0] == leader
    load = Load(cluster, topic, 3)
    wait_until(lambda: load.count() >= 3000, 60, "3000 acknowledged records")
    load.finish()
    check_nothing_lost(load, consume_all(cluster, topic, 3))
    for p in range(3):
        wait_until(
            lambda p=p: len(set(segment_bytes(cluster, topic, p).values())) == 1,
            20,
            f"replicas of partition {p} identical",
        )


@pytest.mark.parametrize("victim", ["leader", "controller"])
def test_acks_all_survives_a_broker_killed_repeatedly(cluster: Cluster, victim: str) -> None:
    topic = create_topic(cluster)
    load = Load(cluster, topic, 3)
    for _ in range(3):
        wait_until(lambda: isr_full(cluster, topic), 60, "a full ISR")
        before = load.count()
        wait_until(lambda b=before: load.count() >= b + 300, 60, "progress before the kill")
        target = (
            partitions_of(cluster, topic)[0][0] if victim == "leader" else controller_of(cluster)
        )
        cluster.brokers[target].kill()
        after = load.count()
        wait_until(lambda a=after: load.count() >= a + 300, 60, "progress after the kill")
        if victim == "controller":
            wait_until(
                lambda t=target: controller_of(cluster) not in (t, -1), 30, "a new controller"
            )
        cluster.brokers[target].start()
    load.finish()
    assert not load.errors
    check_nothing_lost(load, consume_all(cluster, topic, 3))


def test_a_frozen_follower_leaves_the_isr_and_rejoins(cluster: Cluster) -> None:
    topic = create_topic(cluster, partitions=1)
    leader, replicas, _ = partitions_of(cluster, topic)[0]
    follower = next(r for r in replicas if r != leader and r != controller_of(cluster))
    load = Load(cluster, topic, 1)
    wait_until(lambda: load.count() >= 200, 30, "records flowing")
    cluster.brokers[follower].freeze()
    wait_until(lambda: follower not in partitions_of(cluster, topic)[0][2], 30, "ISR shrink")
    before = load.count()
    wait_until(lambda: load.count() >= before + 300, 30, "produce going on without it")
    cluster.brokers[follower].thaw()
    wait_until(lambda: isr_full(cluster, topic), 60, "the follower back in the ISR")
    load.finish()
    assert not load.errors
    check_nothing_lost(load, consume_all(cluster, topic, 1))


def test_too_few_in_sync_replicas_refuse_acks_all(cluster: Cluster) -> None:
    topic = create_topic(cluster, partitions=1, **{"min.insync.replicas": "2"})
    leader, replicas, _ = partitions_of(cluster, topic)[0]
    for broker_id in replicas:
        if broker_id != leader:
            cluster.brokers[broker_id].kill()
    wait_until(lambda: len(partitions_of(cluster, topic)[0][2]) == 1, 30, "ISR of one")
    errors: list[KafkaError] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.brokers[leader].address,
            "acks": "all",
            "retries": 0,
            "message.timeout.ms": 5000,
        }
    )
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(20)
    assert [e.code() for e in errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
    consumer = Consumer({"bootstrap.servers": cluster.brokers[leader].address, "group.id": "c"})
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), 10) == (0, 0)
    consumer.close()


def test_a_cut_off_leader_truncates_what_never_replicated(cluster: Cluster) -> None:
    # The preferred leader is not the controller, so killing it leaves the controller be.
    wait_until(lambda: controller_of(cluster) > 0, 10, "a controller")
    controller = controller_of(cluster)
    others = [b for b in cluster.brokers if b != controller]
    topic = f"t-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(topic, 1, replica_assignment=[[*others, controller]])
    admin.create_topics([new])[topic].result(30)
    old_leader, replicas, _ = partitions_of(cluster, topic)[0]
    assert old_leader == others[0]
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(100):
        producer.produce(topic, str(i).encode())
    assert producer.flush(30) == 0
    followers = [r for r in replicas if r != old_leader]
    for f in followers:
        cluster.brokers[f].freeze()
    # A follower's fetch parked at the leader before the freeze would still be answered
    # (into the frozen process's socket) with the writes below, and a follower that thaws
    # keeps what it fetched — legal for acks=1. Let such fetches expire empty first
    # (replica fetch max wait: 500 ms).
    time.sleep(1.5)
    lonely = Producer({"bootstrap.servers": cluster.brokers[old_leader].address, "acks": 1})
    for i in range(50):
        lonely.produce(topic, f"lost-{i}".encode())
    assert lonely.flush(10) == 0  # acks=1: only the leader has these
    cluster.brokers[old_leader].kill()
    for f in followers:
        cluster.brokers[f].thaw()
    wait_until(lambda: partitions_of(cluster, topic)[0][0] in followers, 30, "a new leader")
    for i in range(100, 200):
        producer.produce(topic, str(i).encode())
    assert producer.flush(30) == 0
    cluster.brokers[old_leader].start()
    wait_until(lambda: isr_full(cluster, topic), 60, "the old leader back in the ISR")
    wait_until(
        lambda: len(set(segment_bytes(cluster, topic, 0).values())) == 1,
        20,
        "byte-identical replicas",
    )
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "c"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    while len(values) < 200:
        values += [m.value() for m in consumer.consume(500, 2.0) if m.error() is None]
    consumer.close()
    assert values == [str(i).encode() for i in range(200)]


def test_a_rolling_restart_gives_producers_only_retriable_errors(cluster: Cluster) -> None:
    topic = create_topic(cluster)
    load = Load(cluster, topic, 3)
    for broker in cluster.brokers.values():
        wait_until(lambda: isr_full(cluster, topic), 60, "a full ISR")
        before = load.count()
        wait_until(lambda b=before: load.count() >= b + 200, 60, "progress")
        assert broker.stop() == 0
        broker.start()
    load.finish()
    assert not load.errors
    check_nothing_lost(load, consume_all(cluster, topic, 3))


def test_group_offsets_move_with_their_coordinator(cluster: Cluster) -> None:
    topic = create_topic(cluster)
    load = Load(cluster, topic, 3)
    wait_until(lambda: load.count() >= 600, 60, "records to consume")
    load.finish()
    settings = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "group.id": "movers",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 300:
        assert time.monotonic() < deadline, "the group did not consume"
        seen += sum(1 for m in consumer.consume(100, 1.0) if m.error() is None)
    committed = {
        tp.partition: tp.offset
        for tp in consumer.commit(asynchronous=False) or []
        if tp.offset >= 0
    }
    consumer.close()
    assert sum(committed.values()) >= 300
    checker = Consumer(settings)
    # An acknowledged commit is in the ISR: the coordinator (the leader of the group's
    # __consumer_offsets partition) can die at once.
    group_coordinator = _coordinator_of(cluster, "movers")
    cluster.brokers[group_coordinator].kill()
    wait_until(
        lambda: _coordinator_of(cluster, "movers") not in (group_coordinator, -1),
        30,
        "a new coordinator",
    )
    tps = [TopicPartition(topic, p) for p in range(3)]

    def committed_now() -> dict[int, int] | None:
        try:
            found = checker.committed(tps, 10)
        except KafkaException:
            return None
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}

    wait_until(
        lambda: committed_now() == committed, 30, "the committed offsets from the new coordinator"
    )
    checker.close()


def _coordinator_of(cluster: Cluster, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        described = admin.describe_consumer_groups([group])[group].result(10)
    except (KafkaException, TimeoutError):
        return -1
    return int(described.coordinator.id)
