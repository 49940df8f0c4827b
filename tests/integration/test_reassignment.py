"""Partition reassignment with real parts: a real ZooKeeper, six broker processes.

Design doc 000's move — every partition of an RF=3 topic from brokers {1,2,3} to {4,5,6} —
under continuous idempotent acks=all produce and a consumer: no acknowledged record is lost,
the consumer sees no error beyond retriable ones, and the final AR, leader and ISR in
ZooKeeper and in Metadata are the plan's; the old replicas' logs are deleted. A controller
SIGKILLed in the middle of a (throttled, so slow) move leaves it to the next controller,
which finishes it. kafka-python's admin client drives the same APIs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from riverlog.client.admin import TOPIC, AsyncAdmin
from riverlog.devcluster import ZooKeeperServer
from riverlog.metadata import layout
from riverlog.metadata.zookeeper import ZooKeeperStore
from tests.cluster_harness import (
    Cluster,
    controller_of,
    create_assigned_topic,
    partitions_of,
    wait_until,
)
from tests.integration.test_cluster import Load, check_nothing_lost, consume_all

pytestmark = pytest.mark.timeout(300)

PLAN = {0: [4, 5, 6], 1: [5, 6, 4], 2: [6, 4, 5]}
BEFORE = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


@pytest.fixture(scope="module")
def six(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Six brokers, shared by this module's tests (each uses its own topics)."""
    settings = {
        "leader.replication.throttled.rate": "400000",
        "follower.replication.throttled.rate": "400000",
    }
    cluster = Cluster(
        zookeeper, tmp_path_factory.mktemp("six"), brokers=6, settings=settings
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def store(six: Cluster) -> Iterator[ZooKeeperStore]:
    zk = ZooKeeperStore(six.zk_connect, session_timeout_ms=10_000)
    try:
        yield zk
    finally:
        zk.close()


def new_topic(cluster: Cluster, **config: str) -> str:
    return create_assigned_topic(cluster, list(BEFORE.values()), "move", **config)


def alter(cluster: Cluster, targets: dict[tuple[str, int], list[int] | None]) -> None:
    async def run() -> None:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            errors = await admin.alter_partition_reassignments(targets)
        assert all(e is None for e in errors.values()), errors

    asyncio.run(run())


def ongoing(cluster: Cluster) -> dict[tuple[str, int], object]:
    async def run() -> dict[tuple[str, int], object]:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            return dict(await admin.list_partition_reassignments())

    return asyncio.run(run())


def stored(
    store: ZooKeeperStore, topic: str
) -> tuple[layout.TopicAssignment, dict[int, layout.PartitionState]]:
    assignment = layout.TopicAssignment.from_json(store.get(layout.topic_path(topic)).data)
    states = {
        p: layout.PartitionState.from_json(store.get(layout.partition_state_path(topic, p)).data)
        for p in assignment.partitions
    }
    return assignment, states


def assert_moved(
    cluster: Cluster, store: ZooKeeperStore, topic: str, *, leaders: dict[int, int] | None = None
) -> None:
    """AR, leader and ISR as planned, in ZooKeeper and in Metadata; no move left. The leader
    is the plan's first replica, as the reassignment elects it — unless a failover elected
    another member of the plan meanwhile (`leaders`: the leaders to expect then)."""
    assert not store.exists(layout.REASSIGN_PARTITIONS)
    assignment, states = stored(store, topic)
    assert assignment.partitions == PLAN
    assert assignment.adding_replicas == {} and assignment.removing_replicas == {}
    expected = leaders or {p: target[0] for p, target in PLAN.items()}
    for p, target in PLAN.items():
        assert states[p].leader == expected[p] and expected[p] in target
        assert sorted(states[p].isr) == sorted(target)

    def metadata_shows_plan() -> bool:
        shown = {
            p: (leader, replicas, sorted(isr))
            for p, (leader, replicas, isr) in partitions_of(cluster, topic).items()
        }
        return shown == {p: (expected[p], t, sorted(t)) for p, t in PLAN.items()}

    wait_until(metadata_shows_plan, 20, "Metadata showing the plan")


def moves_done(cluster: Cluster, store: ZooKeeperStore) -> bool:
    return not store.exists(layout.REASSIGN_PARTITIONS) and not ongoing(cluster)


class Reader:
    """A group consumer reading the topic throughout, keeping every error it is given."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.errors: list[KafkaError] = []
        self.count = 0
        self.stop = threading.Event()
        self.consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": f"g-{topic}",
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(500, 0.2):
                if msg.error() is None:
                    self.count += 1
                else:
                    self.errors.append(msg.error())

    def finish(self) -> list[KafkaError]:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()
        return [
            e for e in self.errors if not e.retriable() and e.code() != KafkaError._PARTITION_EOF
        ]


def test_moving_every_partition_to_other_brokers_under_load(
    six: Cluster, store: ZooKeeperStore
) -> None:
    topic = new_topic(six)
    load = Load(six, topic, 3)
    reader = Reader(six, topic)
    wait_until(lambda: load.count() >= 2000 and reader.count > 0, 60, "records flowing")
    started = time.monotonic()
    alter(six, {(topic, p): r for p, r in PLAN.items()})
    listed = ongoing(six)
    assert set(listed) <= {(topic, p) for p in PLAN}
    wait_until(lambda: moves_done(six, store), 120, "the moves to finish")
    moved_at = load.count()
    print(f"moved in {time.monotonic() - started:.1f} s")
    wait_until(lambda: load.count() >= moved_at + 1000, 60, "records acknowledged after the move")
    load.finish()
    assert load.errors == []
    assert reader.finish() == []
    check_nothing_lost(load, consume_all(six, topic, 3))
    assert_moved(six, store, topic)
    for p, old in BEFORE.items():
        for broker_id in old:
            directory = six.brokers[broker_id].data_dir / f"{topic}-{p}"
            wait_until(lambda d=directory: not d.exists(), 20, f"{directory} deleted")


def preload(cluster: Cluster, topic: str, records: int, size: int) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 20}
    )
    for i in range(records):
        while True:
            try:  # values consume_all reads back as numbers
                producer.produce(topic, str(i).encode().ljust(size), partition=i % 3)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def test_a_killed_controller_leaves_the_move_to_the_next_one(
    six: Cluster, store: ZooKeeperStore
) -> None:
    """The topic throttles replicas that catch up (400 kB/s per broker and side): the move
    of ~3 MB is under way when the controller is SIGKILLed; its successor finishes it."""
    topic = new_topic(
        six,
        **{
            "leader.replication.throttled.replicas": "*",
            "follower.replication.throttled.replicas": "*",
        },
    )
    preload(six, topic, 3000, 1000)
    started = time.monotonic()
    alter(six, {(topic, p): r for p, r in PLAN.items()})
    wait_until(lambda: stored(store, topic)[0].adding_replicas != {}, 20, "the move to start")
    time.sleep(1.0)
    old = controller_of(six)
    assert stored(store, topic)[0].adding_replicas != {}, "the throttled move ended too soon"
    six.brokers[old].kill()
    wait_until(lambda: controller_of(six) not in (old, -1), 30, "a new controller")
    new = controller_of(six)
    six.brokers[old].start()
    wait_until(lambda: moves_done(six, store), 120, "the moves to finish")
    print(
        f"controller {old} killed, {new} finished the move; "
        f"{time.monotonic() - started:.1f} s in all"
    )
    elected = {p: state.leader for p, state in stored(store, topic)[1].items()}
    assert_moved(six, store, topic, leaders=elected)  # a failover may have picked others
    assert b"reassignment of" in six.brokers[new].log_file.read_bytes()
    got = consume_all(six, topic, 3)
    assert sum(len(v) for v in got.values()) == 3000


def throttled_topic(cluster: Cluster) -> str:
    """A topic whose catching-up replicas are throttled (400 kB/s per broker and side), with
    ~3 MB in it: a move takes seconds."""
    topic = new_topic(
        cluster,
        **{
            "leader.replication.throttled.replicas": "*",
            "follower.replication.throttled.replicas": "*",
        },
    )
    preload(cluster, topic, 3000, 1000)
    return topic


def test_cancelling_a_move_reverts_to_the_original_replicas(
    six: Cluster, store: ZooKeeperStore
) -> None:
    topic = throttled_topic(six)
    alter(six, {(topic, p): r for p, r in PLAN.items()})
    wait_until(lambda: stored(store, topic)[0].adding_replicas != {}, 20, "the move to start")
    alter(six, dict.fromkeys([(topic, p) for p in PLAN]))  # None: cancel
    wait_until(lambda: moves_done(six, store), 60, "the cancellation to finish")
    assignment, states = stored(store, topic)
    assert assignment.partitions == BEFORE and assignment.adding_replicas == {}
    for p, replicas in BEFORE.items():
        assert states[p].leader in replicas and sorted(states[p].isr) == sorted(replicas)
    for p, target in PLAN.items():
        for broker_id in target:
            directory = six.brokers[broker_id].data_dir / f"{topic}-{p}"
            wait_until(lambda d=directory: not d.exists(), 20, f"{directory} deleted")
    assert sum(len(v) for v in consume_all(six, topic, 3).values()) == 3000


def test_kafka_python_admin_changes_the_replication_factor(
    six: Cluster, store: ZooKeeperStore
) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError

    topic = new_topic(six)
    client = KafkaAdminClient(bootstrap_servers=six.bootstrap_servers)
    try:
        tp0, tp1 = KafkaTopicPartition(topic, 0), KafkaTopicPartition(topic, 1)
        answer = client.alter_partition_reassignments({tp0: [1, 2], tp1: [2, 3, 1, 4, 5]})
        assert answer == {tp0: None, tp1: None}
        wait_until(lambda: moves_done(six, store), 60, "the moves to finish")
        assert client.list_partition_reassignments() == {}
        refused = client.alter_partition_reassignments({tp0: [1, 1], tp1: None})
        assert refused[tp0] is InvalidReplicationAssignmentError
        assert refused[tp1] is NoReassignmentInProgressError
    finally:
        client.close()
    assignment, states = stored(store, topic)
    assert assignment.partitions[0] == [1, 2] and sorted(states[0].isr) == [1, 2]
    assert assignment.partitions[1] == [2, 3, 1, 4, 5]
    assert sorted(states[1].isr) == [1, 2, 3, 4, 5] and states[1].leader == 2


def reassign(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "reassign-partitions",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def topic_configs(cluster: Cluster, topic: str) -> dict[str, str | None]:
    async def run() -> dict[str, str | None]:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            return await admin.describe_configs(TOPIC, topic)

    return asyncio.run(run())


def test_the_cli_generates_executes_verifies_and_cancels(
    six: Cluster, store: ZooKeeperStore, tmp_path: Path
) -> None:
    topic = throttled_topic(six)
    to_move = tmp_path / "topics-to-move.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = reassign(
        six, "--generate", "--topics-to-move-json-file", str(to_move), "--broker-list", "4,5,6"
    )
    assert generated.returncode == 0, generated.stderr
    lines = generated.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    current = {p["partition"]: p["replicas"] for p in json.loads(lines[1])["partitions"]}
    assert current == BEFORE
    proposed = json.loads(lines[4])
    replicas = {p["partition"]: p["replicas"] for p in proposed["partitions"]}
    assert all(sorted(r) == [4, 5, 6] for r in replicas.values())
    assert sorted(r[0] for r in replicas.values()) == [4, 5, 6]  # leaders balanced

    plan = tmp_path / "plan.json"
    plan.write_text(lines[4])
    # 200 kB/s: the ~3 MB move takes ~15 s, still under way for the second --execute below
    # even when each tool run takes seconds on a loaded machine (at 400 kB/s it could finish)
    executed = reassign(
        six, "--execute", "--reassignment-json-file", str(plan), "--throttle", "200000"
    )
    assert executed.returncode == 0, executed.stderr
    assert "Save this to use as the --reassignment-json-file option during rollback" in (
        executed.stdout
    )
    assert executed.stdout.splitlines()[-1] == (
        f"Successfully started partition reassignments for {topic}-0,{topic}-1,{topic}-2"
    )
    assert "The inter-broker throttle limit was set to 200000 B/s" in executed.stdout
    configs = topic_configs(six, topic)
    assert configs["follower.replication.throttled.replicas"] == ",".join(
        f"{p}:{b}" for p in range(3) for b in replicas[p]
    )
    again = reassign(six, "--execute", "--reassignment-json-file", str(plan))  # throttled:
    assert again.returncode == 1 and "--additional" in again.stderr  # still moving
    verified = reassign(six, "--verify", "--reassignment-json-file", str(plan))
    while verified.returncode != 0:
        assert "is still in progress." in verified.stdout, verified.stdout + verified.stderr
        assert "new replicas" in verified.stdout
        time.sleep(0.5)
        verified = reassign(six, "--verify", "--reassignment-json-file", str(plan))
    assert verified.stdout.splitlines()[:4] == ["Status of partition reassignment:"] + [
        f"Reassignment of partition {topic}-{p} is completed." for p in range(3)
    ]
    assert f"Clearing topic-level throttles on topic {topic}" in verified.stdout
    configs = topic_configs(six, topic)
    assert configs["leader.replication.throttled.replicas"] == ""
    assert configs["follower.replication.throttled.replicas"] == ""

    rollback = tmp_path / "rollback.json"
    rollback.write_text(executed.stdout.splitlines()[2])
    stale = reassign(six, "--verify", "--reassignment-json-file", str(rollback))
    assert stale.returncode == 1
    assert (
        f"There is no active reassignment of partition {topic}-0, but replica set is "
        f"{','.join(map(str, replicas[0]))} rather than 1,2,3."
    ) in stale.stdout

    # throttled to 50 kB/s, the rollback takes ~20 s: still under way when the two tool runs
    # below have started, even on a loaded machine (at 400 kB/s it could finish first)
    assert (
        reassign(
            six, "--execute", "--reassignment-json-file", str(rollback), "--throttle", "50000"
        ).returncode
        == 0
    )
    listed = reassign(six, "--list")
    cancelled = reassign(six, "--cancel", "--reassignment-json-file", str(rollback))
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.splitlines()[0] == (  # the throttled move was under way
        f"Successfully cancelled partition reassignments for: {topic}-0,{topic}-1,{topic}-2"
    )
    assert listed.stdout.splitlines()[1] == (
        f"{topic}-0: replicas: 1,2,3,{','.join(map(str, replicas[0]))}. adding: 1,2,3. "
        f"removing: {','.join(map(str, replicas[0]))}."
    )
    wait_until(lambda: moves_done(six, store), 60, "the cancellation to finish")
    assert stored(store, topic)[0].partitions == replicas
    assert reassign(six, "--list").stdout == "No partition reassignments found.\n"
    bad = reassign(six, "--execute", "--reassignment-json-file", str(tmp_path / "missing.json"))
    assert bad.returncode == 1 and bad.stderr.startswith("Error: cannot read")


def test_a_plan_written_to_zookeeper_is_carried_out_and_bad_entries_dropped(
    six: Cluster, store: ZooKeeperStore
) -> None:
    """The pre-API way: a tool writes Kafka's JSON to `/admin/reassign_partitions` itself."""
    topic = new_topic(six)
    store.create(
        layout.REASSIGN_PARTITIONS,
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {
                        "topic": topic,
                        "partition": 0,
                        "replicas": [3, 4, 5],
                        "log_dirs": ["any"] * 3,
                    },
                    {"topic": topic, "partition": 1, "replicas": [2, 99]},
                    {"topic": "no-such-topic", "partition": 0, "replicas": [1]},
                ],
            }
        ).encode(),
    )
    wait_until(lambda: not store.exists(layout.REASSIGN_PARTITIONS), 30, "the node to go")
    assignment, states = stored(store, topic)
    assert assignment.partitions == {0: [3, 4, 5], 1: BEFORE[1], 2: BEFORE[2]}
    assert states[0].leader == 3 and sorted(states[0].isr) == [3, 4, 5]
