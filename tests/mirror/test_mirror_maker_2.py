"""MirrorMaker 2 flows (`riverlog connect-mirror-maker`) between two embedded brokers: remote
topics with the source's partitions and configs, new topics and added partitions picked up,
no loops, offset syncs and checkpoints in Kafka's formats, group offsets synced for inactive
groups, and `consumer-groups --reset-offsets --from-checkpoints` applying them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest

from riverlog.cli.main import main
from riverlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer
from riverlog.client import admin_requests as admin_ops
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.mirror import mm2, mm2_config
from riverlog.mirror.records import Checkpoint, OffsetSync
from tests.mirror.test_mirror_maker import read_all

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[EmbeddedBroker, EmbeddedBroker]]:
    with (
        broker(overrides={"broker.id": "1"}) as source,
        broker(overrides={"broker.id": "2"}) as target,
    ):
        yield source, target


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 30
) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not await check():
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def flows(source: EmbeddedBroker, target: EmbeddedBroker, **extra: str) -> list[mm2_config.Flow]:
    props = {
        "clusters": "a, b",
        "a.bootstrap.servers": source.bootstrap_servers,
        "b.bootstrap.servers": target.bootstrap_servers,
        "a->b.enabled": "true",
        "a->b.topics": "orders.*, payments, b\\..*",
        "replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "refresh.topics.interval.seconds": "0.5",
        "sync.topic.configs.interval.seconds": "0.5",
        "emit.checkpoints.interval.seconds": "0.5",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "0.5",
        "offset.flush.interval.ms": "300",
        "offset.lag.max": "10",
        **extra,
    }
    return mm2_config.parse(props)


async def test_a_flow_mirrors_topics_configs_and_group_offsets(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker], capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = clusters
    a = {"bootstrap.servers": source.bootstrap_servers}
    b = {"bootstrap.servers": target.bootstrap_servers}
    async with AsyncAdmin(a) as admin:
        await admin.create_topic(
            "orders", 2, 1, {"retention.ms": "3600000", "min.insync.replicas": "1"}
        )
        await admin.create_topic("b.orders", 1, 1)  # a remote topic of b: never back to b
    async with AsyncProducer(a) as producer:
        for i in range(100):
            await producer.send(
                "orders",
                f"o{i}".encode(),
                key=b"k",
                partition=i % 2,
                headers=[("n", str(i).encode())],
            )
            await producer.send("b.orders", b"loop", partition=0)
    # A group that read 30 + 20 records of orders on the source.
    consumer = AsyncConsumer({**a, "group.id": "billing", "enable.auto.commit": "false"})
    consumer.assign([("orders", 0), ("orders", 1)])
    async with consumer:
        await consumer.commit({("orders", 0): 30, ("orders", 1): 20})

    stop = asyncio.Event()
    task = asyncio.create_task(mm2.run(flows(source, target), stop))
    try:
        mirrored = await read_all(target.bootstrap_servers, "a.orders", 100)
        assert sorted((r.partition, r.offset, r.value) for r in mirrored) == sorted(
            (i % 2, i // 2, f"o{i}".encode()) for i in range(100)
        )
        async with AsyncAdmin(b) as target_admin:
            names = await target_admin.list_topics()
            assert "a.orders" in names and "a.b.orders" not in names and "b.orders" not in names
            conn = await target_admin.cluster.any_connection()
            assert await admin_ops.topic_config_overrides(conn, "a.orders") == {
                "retention.ms": "3600000"  # min.insync.replicas is excluded, as in Kafka
            }

            # Group offsets: translated, checkpointed, and committed for the idle group on b.
            async def synced() -> bool:
                return await target_admin.group_offsets("billing") == {
                    ("a.orders", 0): 30,
                    ("a.orders", 1): 20,
                }

            await eventually(synced, "billing's offsets on b")

            # A new matching topic, a topic that grew, a config that changed.
            async with AsyncAdmin(a) as admin:
                await admin.create_topic("payments", 1, 1)
                await admin.create_partitions("orders", 3)
                await admin.alter_configs(
                    admin_ops.TOPIC_RESOURCE, "orders", set={"retention.ms": "7200000"}
                )
            async with AsyncProducer(a) as producer:
                await producer.send("payments", b"p0")
                await producer.send("orders", b"o-new", partition=2)

            async def picked_up() -> bool:
                topics = {t.name: len(t.partitions) for t in await target_admin.describe_topics()}
                return topics.get("a.payments") == 1 and topics.get("a.orders") == 3

            await eventually(picked_up, "a.payments and a grown a.orders")
            assert [r.value for r in await read_all(target.bootstrap_servers, "a.payments", 1)] == [
                b"p0"
            ]
            grown = await read_all(target.bootstrap_servers, "a.orders", 101)
            assert [(r.partition, r.value) for r in grown if r.partition == 2] == [(2, b"o-new")]

            async def config_synced() -> bool:
                overrides = await admin_ops.topic_config_overrides(conn, "a.orders")
                return overrides.get("retention.ms") == "7200000"

            await eventually(config_synced, "retention.ms synced")
    finally:
        stop.set()
        await task

    # The internal topics hold Kafka's record formats.
    syncs = await read_all(source.bootstrap_servers, "mm2-offset-syncs.b.internal", 1)
    decoded = [OffsetSync.decode(r.key or b"", r.value or b"") for r in syncs]
    assert {(s.topic, s.partition) for s in decoded} >= {("orders", 0), ("orders", 1)}
    assert all(s.upstream_offset == s.downstream_offset for s in decoded)
    points = await read_all(target.bootstrap_servers, "a.checkpoints.internal", 2)
    latest = {}
    for r in points:
        c = Checkpoint.decode(r.key or b"", r.value or b"")
        latest[(c.group, c.topic, c.partition)] = (c.upstream_offset, c.downstream_offset)
    assert latest == {("billing", "a.orders", 0): (30, 30), ("billing", "a.orders", 1): (20, 20)}

    # The tool shows the translation, and applies it with --execute.
    code = await asyncio.to_thread(
        main,
        [
            "consumer-groups",
            "--bootstrap-server",
            target.bootstrap_servers,
            "--reset-offsets",
            "--group",
            "audit",
            "--all-topics",
            "--from-checkpoints",
            "a",
            "--dry-run",
        ],
    )
    assert code == 0
    assert "audit" not in capsys.readouterr().out  # no checkpoint for audit: nothing planned
    async with AsyncAdmin(b) as target_admin:
        await target_admin.reset_group_offsets("billing", {("a.orders", 0): 0})
    code = await asyncio.to_thread(
        main,
        [
            "consumer-groups",
            "--bootstrap-server",
            target.bootstrap_servers,
            "--reset-offsets",
            "--group",
            "billing",
            "--all-topics",
            "--from-checkpoints",
            "a",
            "--execute",
        ],
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "a.orders" in out and "30" in out
    async with AsyncAdmin(b) as target_admin:
        assert (await target_admin.group_offsets("billing"))[("a.orders", 0)] == 30


async def test_the_identity_policy_keeps_names(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker],
) -> None:
    source, target = clusters
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        await admin.create_topic("orders-identity", 1, 1)
    async with AsyncProducer({"bootstrap.servers": source.bootstrap_servers}) as producer:
        await producer.send("orders-identity", b"same name")
    chosen = flows(
        source,
        target,
        **{
            "a->b.topics": "orders-identity",
            "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        },
    )
    stop = asyncio.Event()
    task = asyncio.create_task(mm2.run(chosen, stop))
    try:
        records = await read_all(target.bootstrap_servers, "orders-identity", 1)
        assert [r.value for r in records] == [b"same name"]
    finally:
        stop.set()
        await task


async def test_active_active_flows_do_not_loop(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker],
) -> None:
    """a->b and b->a both on: a's `ring` goes to b as `a.ring`, b's `ring` to a as `b.ring`,
    and `a.ring` never comes back to a as `b.a.ring`."""
    source, target = clusters
    both = {
        "a->b.topics": "ring.*, a\\.ring.*, b\\.ring.*",
        "b->a.enabled": "true",
        "b->a.topics": ".*ring.*",
    }
    chosen = flows(source, target, **both)
    assert [f.name for f in chosen] == ["a->b", "b->a"]
    a = {"bootstrap.servers": source.bootstrap_servers}
    b = {"bootstrap.servers": target.bootstrap_servers}
    stop = asyncio.Event()
    task = asyncio.create_task(mm2.run(chosen, stop))
    try:
        async with AsyncAdmin(a) as admin_a, AsyncAdmin(b) as admin_b:
            await admin_a.create_topic("ring", 1, 1)

            async def on_b() -> bool:
                return "a.ring" in await admin_b.list_topics()

            await eventually(on_b, "a.ring on b")
            await admin_b.create_topic("ring", 1, 1)

            async def on_a() -> bool:
                return "b.ring" in await admin_a.list_topics()

            await eventually(on_a, "b.ring on a")  # b->a synced topics after a.ring existed
            assert "b.a.ring" not in await admin_a.list_topics()
            assert "a.b.ring" not in await admin_b.list_topics()
    finally:
        stop.set()
        await task
