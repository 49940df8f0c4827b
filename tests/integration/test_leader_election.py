"""Preferred leader election with real parts: a real ZooKeeper, broker processes, the
`riverlog leader-election` tool run as a subprocess, and third-party admin clients.

Design doc 000's worked example, step by step: a topic of 8 partitions with 3 replicas on 8
brokers, each broker the preferred replica of one partition; brokers 1, 2 and 4 are killed
(leadership moves) and broker 1 restarted (it leads nothing: leadership is unbalanced); the
tool gives every partition whose preferred replica is alive and in sync back to it, and fails
for the two whose preferred replicas (2, 4) are still down; restarting those changes nothing
by itself; the tool once more — here the way the doc's tool did it, through
`/admin/preferred_replica_election` — and every broker leads exactly one partition.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from riverlog.controller.assignment import assign_replicas
from riverlog.metadata import layout
from riverlog.metadata.zookeeper import ZooKeeperStore
from tests.cluster_harness import Cluster, wait_until
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(240)

T = "topic1"
ELECTION_FAILED = (
    "Error completing leader election (PREFERRED) for partition: {t}-{p}: "
    "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: Failed to elect "
    "leader for partition {t}-{p} under strategy PreferredReplicaPartitionLeaderElectionStrategy"
)


def riverlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverlog", *args], capture_output=True, text=True, timeout=60
    )


def leader_election(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return riverlog("leader-election", "--bootstrap-server", bootstrap, *args)


def describe_cluster(bootstrap: str) -> dict[str, list[str]]:
    """`riverlog cluster describe`'s sections: heading → its value, then its lines (brokers
    cut to their id, partitions to their number)."""
    done = riverlog("cluster", "describe", "--bootstrap-server", bootstrap)
    assert done.returncode == 0, done.stderr
    sections: dict[str, list[str]] = {}
    heading = ""
    for line in done.stdout.splitlines():
        if not line.startswith("\t"):
            heading, _, value = line.partition(":")
            sections[heading] = [value.strip()] if value.strip() else []
            continue
        fields = line.strip().split("\t")
        if fields[0].startswith("Topic:"):
            fields = fields[1:2]
        elif heading == "Brokers":
            fields = fields[:1]
        sections[heading].append("\t".join(fields))
    return sections


def partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition → (leader, isr), as Metadata answers (nothing from a broker that just
    started and has not heard from the controller yet)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return {p: (m.leader, sorted(m.isrs)) for p, m in sorted(found.items())}


def leaders(bootstrap: str, topic: str) -> list[int]:
    return [leader for leader, _ in partitions(bootstrap, topic).values()]


def in_sync(bootstrap: str, topic: str, assignment: dict[int, list[int]], broker: int) -> bool:
    """`broker` is in the ISR of every partition it is a replica of."""
    state = partitions(bootstrap, topic)
    return all(
        p in state and broker in state[p][1]
        for p, replicas in assignment.items()
        if broker in replicas
    )


def create(bootstrap: str, topic: str, assignment: dict[int, list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    replicas = [assignment[p] for p in sorted(assignment)]
    admin.create_topics([NewTopic(topic, len(replicas), replica_assignment=replicas)])[
        topic
    ].result(30)


@pytest.fixture
def eight_brokers(zookeeper: ZooKeeperServer, tmp_path: Path) -> Cluster:
    cluster = Cluster(
        zookeeper, tmp_path, brokers=8, settings={"auto.leader.rebalance.enable": "false"}
    )
    cluster.start()
    try:
        yield cluster  # type: ignore[misc]
    finally:
        cluster.stop()


def test_design_doc_000_preferred_replica_election(eight_brokers: Cluster) -> None:
    cluster = eight_brokers
    bootstrap = cluster.bootstrap_servers
    assignment = assign_replicas(list(range(1, 9)), 8, 3, start_index=0, initial_shift=1)
    create(bootstrap, T, assignment)
    wait_until(lambda: leaders(bootstrap, T) == [1, 2, 3, 4, 5, 6, 7, 8], 30, "leaders")

    for b in (1, 2, 4):
        cluster.brokers[b].kill()
    wait_until(lambda: leaders(bootstrap, T) == [3, 5, 3, 6, 5, 6, 7, 8], 30, "failover")
    cluster.brokers[1].start()
    wait_until(lambda: in_sync(bootstrap, T, assignment, 1), 30, "broker 1 back in the ISRs")
    assert leaders(bootstrap, T) == [3, 5, 3, 6, 5, 6, 7, 8]  # unbalanced: 1 leads nothing
    report = describe_cluster(bootstrap)
    assert int(report["Controller"][0]) in cluster.brokers
    assert report["Brokers"] == ["6", *(f"Broker: {b}" for b in (1, 3, 5, 6, 7, 8))]
    assert report["Under-replicated partitions"] == [
        "5",
        *(f"Partition: {p}" for p in (0, 1, 3, 6, 7)),
    ]
    assert report["Offline partitions"] == ["0"]
    assert report["Leader balance (leaders / preferred leaderships)"] == [
        "Broker: 1\tLeaders: 0\tPreferred: 1\tImbalance: 100%",
        "Broker: 2\tLeaders: 0\tPreferred: 1\tImbalance: 100%\t(not alive)",
        "Broker: 3\tLeaders: 2\tPreferred: 1\tImbalance: 0%",
        "Broker: 4\tLeaders: 0\tPreferred: 1\tImbalance: 100%\t(not alive)",
        *[
            f"Broker: {b}\tLeaders: {n}\tPreferred: 1\tImbalance: 0%"
            for b, n in ((5, 2), (6, 2), (7, 1), (8, 1))
        ],
    ]

    done = leader_election(bootstrap, "--election-type", "preferred", "--all-topic-partitions")
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {T}-0",
        ELECTION_FAILED.format(t=T, p=1),
        ELECTION_FAILED.format(t=T, p=3),
    ]
    assert "2 replica(s) could not be elected" in done.stderr
    assert leaders(bootstrap, T) == [1, 5, 3, 6, 5, 6, 7, 8]

    for b in (2, 4):
        cluster.brokers[b].start()
    for b in (2, 4):
        wait_until(lambda b=b: in_sync(bootstrap, T, assignment, b), 30, f"{b} in the ISRs")
    assert leaders(bootstrap, T) == [1, 5, 3, 6, 5, 6, 7, 8]  # nothing moves by itself

    # The doc's tool wrote the partitions to ZooKeeper for the controller to act on.
    store = ZooKeeperStore(cluster.zk_connect)
    try:
        store.create(
            layout.PREFERRED_REPLICA_ELECTION,
            layout.preferred_replica_election_json([(T, p) for p in range(8)]),
        )
        wait_until(
            lambda: not store.exists(layout.PREFERRED_REPLICA_ELECTION),
            30,
            "the controller to finish the election",
        )
        wait_until(lambda: leaders(bootstrap, T) == [1, 2, 3, 4, 5, 6, 7, 8], 30, "balance")
    finally:
        store.close()

    again = leader_election(bootstrap, "--election-type", "PREFERRED", "--all-topic-partitions")
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    report = describe_cluster(bootstrap)
    assert report["Under-replicated partitions"] == report["Offline partitions"] == ["0"]
    assert report["Leader balance (leaders / preferred leaderships)"] == [
        f"Broker: {b}\tLeaders: 1\tPreferred: 1\tImbalance: 0%" for b in range(1, 9)
    ]


def test_tool_and_clients_answer_per_partition(cluster: Cluster, tmp_path: Path) -> None:
    """The tool's other ways of naming partitions and its errors; ElectLeaders from
    confluent-kafka's and kafka-python's admin clients."""
    bootstrap = cluster.bootstrap_servers
    create(bootstrap, T, {0: [1, 2, 3], 1: [2, 3, 1]})
    wait_until(lambda: leaders(bootstrap, T) == [1, 2], 30, "leaders")

    plan = tmp_path / "election.json"
    plan.write_text(
        json.dumps({"partitions": [{"topic": T, "partition": 1}, {"topic": T, "partition": 0}]})
    )
    done = leader_election(
        bootstrap, "--election-type", "preferred", "--path-to-json-file", str(plan)
    )
    assert (done.returncode, done.stdout) == (
        0,
        f"Valid replica already elected for partitions {T}-0, {T}-1\n",
    )
    missing = leader_election(
        bootstrap, "--election-type", "unclean", "--topic", T, "--partition", "5"
    )
    assert missing.returncode == 1
    assert missing.stdout == (
        f"Error completing leader election (UNCLEAN) for partition: {T}-5: org.apache.kafka."
        "common.errors.UnknownTopicOrPartitionException: The partition does not exist.\n"
    )
    plan.write_text(json.dumps({"partitions": [{"topic": T, "partition": 1}] * 2}))
    duplicate = leader_election(
        bootstrap, "--election-type", "preferred", "--path-to-json-file", str(plan)
    )
    assert duplicate.returncode == 1
    assert "Replica election data contains duplicate partitions: topic1-1" in duplicate.stderr
    for bad in (["--topic", T], ["--all-topic-partitions", "--topic", T, "--partition", "0"]):
        refused = leader_election(bootstrap, "--election-type", "preferred", *bad)
        assert refused.returncode == 1 and "option" in refused.stderr.lower()

    confluent = AdminClient({"bootstrap.servers": bootstrap})
    results = confluent.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(T, 0), TopicPartition(T, 9)]
    ).result(30)
    codes = {tp.partition: e.code() for tp, e in results.items() if e is not None}
    assert codes == {0: CKafkaError.ELECTION_NOT_NEEDED, 9: CKafkaError.UNKNOWN_TOPIC_OR_PART}

    kafka_python = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        response = kafka_python.elect_leaders(1, {T: [1]}, raise_errors=False)
        [result] = response.replica_election_results
        assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(1, 84)]
    finally:
        kafka_python.close()


def state_of(store: ZooKeeperStore, topic: str, partition: int) -> layout.PartitionState:
    return layout.PartitionState.from_json(
        store.get(layout.partition_state_path(topic, partition)).data
    )


def test_automatic_rebalance_never_elects_an_out_of_sync_replica(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """Broker b, preferred replica of partition 0, stops: leadership moves to the next
    replica, which is then frozen (SIGSTOP; its ZooKeeper session outlives the freeze, so it
    stays registered and leading). b restarts but cannot catch up: it is alive, preferred and
    out of the ISR — neither the rebalance (every second here) nor the tool elects it. Once
    the leader thaws, b catches up and the rebalance gives it its partition back."""
    settings = {
        "leader.imbalance.check.interval.seconds": "1",
        "zookeeper.session.timeout.ms": "20000",
    }
    cluster = Cluster(zookeeper, tmp_path, settings=settings).start()
    store = ZooKeeperStore(cluster.zk_connect)
    try:
        controller = int(json.loads(store.get(layout.CONTROLLER).data)["brokerid"])
        b, frozen = sorted(set(cluster.brokers) - {controller})
        assignment = {
            0: [b, frozen, controller],
            1: [frozen, controller, b],
            2: [controller, b, frozen],
        }
        preferred = [assignment[p][0] for p in range(3)]
        create(cluster.bootstrap_servers, T, assignment)
        wait_until(lambda: leaders(cluster.bootstrap_servers, T) == preferred, 30, "leaders")

        cluster.brokers[b].stop()
        assert state_of(store, T, 0).leader == frozen
        cluster.brokers[frozen].freeze()
        try:
            cluster.brokers[b].start()
            reachable = ",".join(cluster.brokers[i].address for i in (b, controller))
            wait_until(lambda: b in state_of(store, T, 2).isr, 30, "b in sync where it can be")
            time.sleep(3)  # three imbalance checks
            state = state_of(store, T, 0)
            assert state.leader == frozen and b not in state.isr
            tool = leader_election(
                reachable, "--election-type", "preferred", "--topic", T, "--partition", "0"
            )
            assert tool.returncode == 1
            assert tool.stdout == ELECTION_FAILED.format(t=T, p=0) + "\n"
            assert state_of(store, T, 0).leader == frozen
        finally:
            cluster.brokers[frozen].thaw()
        wait_until(
            lambda: leaders(cluster.bootstrap_servers, T) == preferred,
            30,
            "the rebalance to restore the preferred leaders",
        )
        assert b in state_of(store, T, 0).isr
    finally:
        store.close()
        cluster.stop()
