"""Cluster-wide state kept right (a real ZooKeeper, three broker processes): offset commits
are answered only once the ISR of the group's `__consumer_offsets` partition has them, and
while one waits an OffsetFetch that requires stable offsets gets UNSTABLE_OFFSET_COMMIT (the
consumer asks again and reads the new offset, not the one before); a topic config change
made through one broker is applied by all (`/config/changes`); the brokers'
`replica.fetch.*` settings shape their followers' fetches."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError as ClientError
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from riverlog.client.connection import connect_any
from riverlog.client.consumer import AsyncConsumer
from riverlog.client.group_admin import GroupAdmin
from riverlog.coordinator.records import partition_for
from riverlog.devcluster import ZooKeeperServer
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from tests.cluster_harness import (
    FAST_SETTINGS,
    Cluster,
    create_topic,
    partitions_of,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

GROUP = "durable"


def test_an_offset_commit_waits_for_the_isr(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """With both followers of the group's offsets partition frozen (and the ISR given too
    long to shrink), a commit fails with COORDINATOR_NOT_AVAILABLE after
    `offsets.commit.timeout.ms` and is not served by OffsetFetch; after a thaw, commits
    succeed again."""
    settings = {"replica.lag.time.max.ms": "60000", "offsets.commit.timeout.ms": "1500"}
    cluster = Cluster(zookeeper, tmp_path, settings=settings).start()
    try:
        topic = create_topic(cluster)
        asyncio.run(_commit_with_followers_frozen(cluster, topic))
    finally:
        cluster.stop()


async def _commit_with_followers_frozen(cluster: Cluster, topic: str) -> None:
    conn = await connect_any(cluster.bootstrap_servers)
    groups = GroupAdmin(conn)
    try:
        await _commit_retrying(groups, {(topic, 0): 5})
        index = partition_for(GROUP, int(FAST_SETTINGS["offsets.topic.num.partitions"]))
        leader, replicas, isr = partitions_of(cluster, "__consumer_offsets")[index]
        assert sorted(isr) == sorted(replicas) and len(replicas) == 3
        followers = [r for r in replicas if r != leader]
        for follower in followers:
            cluster.brokers[follower].freeze()
        try:
            with pytest.raises(KafkaError) as refused:
                await groups.commit_offsets(GROUP, {(topic, 0): 7})
            assert refused.value.code == error_codes.COORDINATOR_NOT_AVAILABLE.code
            assert await groups.fetch_offsets(GROUP, [(topic, 0)]) == {(topic, 0): 5}
        finally:
            for follower in followers:
                cluster.brokers[follower].thaw()
        await _commit_retrying(groups, {(topic, 0): 9})
        assert await groups.fetch_offsets(GROUP, [(topic, 0)]) == {(topic, 0): 9}
    finally:
        await groups.close()
        await conn.close()


def test_an_offset_fetch_during_a_commit_waits_for_it(
    zookeeper: ZooKeeperServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 13's "OffsetFetch racing a commit", made certain: with the followers of the
    group's offsets partition frozen, a commit of 7 (over 5) stays appended but unreplicated.
    Meanwhile OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for it, as Kafka
    does, and without it the old 5; a consumer asking for its committed offset — a member
    taking the partition over — waits, and after the thaw reads 7, not 5 (from 5 it would
    re-read, and its commits would go back below 7)."""
    settings = {
        "replica.lag.time.max.ms": "60000",
        "offsets.commit.timeout.ms": "60000",
        "zookeeper.session.timeout.ms": "30000",  # frozen followers stay registered, in the ISR
    }
    cluster = Cluster(zookeeper, tmp_path, settings=settings).start()
    try:
        topic = create_topic(cluster)
        asyncio.run(_fetch_during_a_commit(cluster, topic, monkeypatch))
    finally:
        cluster.stop()


async def _fetch_during_a_commit(
    cluster: Cluster, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tp = (topic, 0)
    conn = await connect_any(cluster.bootstrap_servers)
    groups = GroupAdmin(conn)
    committer_conn = await connect_any(cluster.bootstrap_servers)
    committer = GroupAdmin(committer_conn)
    consumer = AsyncConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": GROUP})
    asked = [0]  # the consumer's OffsetFetch requests (a spy: each still goes to the broker)
    admin = consumer._membership().admin
    fetch = admin.fetch_offsets

    async def counted(*args: Any, **kwargs: Any) -> dict[tuple[str, int], int]:
        asked[0] += 1
        return await fetch(*args, **kwargs)

    monkeypatch.setattr(admin, "fetch_offsets", counted)
    try:
        await _commit_retrying(groups, {tp: 5})
        index = partition_for(GROUP, int(FAST_SETTINGS["offsets.topic.num.partitions"]))
        leader, replicas, isr = partitions_of(cluster, "__consumer_offsets")[index]
        assert sorted(isr) == sorted(replicas) and len(replicas) == 3
        followers = [r for r in replicas if r != leader]
        for client in (groups, committer, admin):  # found before the freeze: the leader
            assert (await client.find_coordinator(GROUP))[0] == leader
            await client.coordinator(GROUP)
        for follower in followers:
            cluster.brokers[follower].freeze()
        try:
            # A connection of its own: a broker answers one connection's requests in order.
            commit = asyncio.create_task(committer.commit_offsets(GROUP, {tp: 7}))
            deadline = time.monotonic() + 15  # well within the ZooKeeper session
            while not await _unstable(groups, tp):  # until the commit is appended
                assert time.monotonic() < deadline and not commit.done()
                await asyncio.sleep(0.05)
            assert await groups.fetch_offsets(GROUP, [tp]) == {tp: 5}
            taking_over = asyncio.create_task(consumer.committed([tp]))
            while asked[0] < 2:  # answered UNSTABLE_OFFSET_COMMIT once, asking again
                assert not taking_over.done(), f"read {taking_over.result()} during the commit"
                assert time.monotonic() < deadline and not commit.done()
                await asyncio.sleep(0.05)
        finally:
            for follower in followers:
                cluster.brokers[follower].thaw()
        await commit
        assert await taking_over == {tp: 7}
        assert await groups.fetch_offsets(GROUP, [tp], require_stable=True) == {tp: 7}
    finally:
        await consumer.close()
        for admin_, conn_ in ((groups, conn), (committer, committer_conn)):
            await admin_.close()
            await conn_.close()


async def _unstable(groups: GroupAdmin, tp: tuple[str, int]) -> bool:
    """Whether OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for `tp`."""
    try:
        await groups.fetch_offsets(GROUP, [tp], require_stable=True)
    except KafkaError as e:
        assert e.code == error_codes.UNSTABLE_OFFSET_COMMIT.code, e
        return True
    return False


async def _commit_retrying(groups: GroupAdmin, offsets: dict[tuple[str, int], int]) -> None:
    """Commit, retrying what a client retries (a coordinator still loading or moving)."""
    for _ in range(100):
        try:
            await groups.commit_offsets(GROUP, offsets)
            return
        except KafkaError as e:
            if not e.retriable:
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("the commit never succeeded")


def test_a_topic_config_change_reaches_every_leader(cluster: Cluster) -> None:
    """AlterConfigs lands on one broker; through `/config/changes` the leaders on the other
    brokers apply it too (here: `max.message.bytes` refusing a bigger record)."""
    topic = f"t-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    spread = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    admin.create_topics([NewTopic(topic, 3, replica_assignment=spread)])[topic].result(30)
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "retries": 0})

    def refused_everywhere() -> bool:
        errors: list[object] = []
        for partition in range(3):
            producer.produce(
                topic,
                b"x" * 5000,
                partition=partition,
                on_delivery=lambda err, _msg: errors.append(err),
            )
        assert producer.flush(30) == 0
        return all(e is not None and e.code() == ClientError.MSG_SIZE_TOO_LARGE for e in errors)

    wait_until(refused_everywhere, 20, "every leader refusing records over max.message.bytes")


def test_followers_fetch_with_the_replica_fetch_settings(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """With `replica.fetch.min.bytes` far above one record, a follower's fetch waits the whole
    `replica.fetch.wait.max.ms` at the leader, so each acks=all produce after the first waits
    about that long for its ISR (with the defaults, 1 byte and 500 ms, it takes milliseconds)."""
    settings = {"replica.fetch.min.bytes": "1048576", "replica.fetch.wait.max.ms": "1500"}
    cluster = Cluster(zookeeper, tmp_path, settings=settings).start()
    try:
        topic = create_topic(cluster, partitions=1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        producer.produce(topic, b"first")  # the followers' fetches now wait afresh
        assert producer.flush(30) == 0
        for i in range(2):
            start = time.monotonic()
            producer.produce(topic, b"record %d" % i)
            assert producer.flush(30) == 0
            assert time.monotonic() - start >= 1.2
    finally:
        cluster.stop()
