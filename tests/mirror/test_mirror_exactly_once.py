"""Exactly-once `riverlog mirror-maker` between two embedded brokers, and the mirror's metrics.

- Records and source offsets commit in one transaction on the target: a read_committed reader
  sees every record once; the offsets topic on the target holds where each partition stopped;
  a mirror that dies with a transaction open leaves nothing visible of it, and the next one
  (same transactional ids: it fences the dead one's producers) resumes from the stored
  offsets, not from the source group's.
- The metrics endpoint (`--metrics.listener`) counts exactly the records and bytes mirrored,
  shows zero lag once caught up, and has a latency observation per partition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from riverlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.mirror import mm1
from riverlog.mirror.flow import SendFailed
from riverlog.mirror.records import decode_source_offset, source_offset_key

pytestmark = pytest.mark.timeout(90)
PARTITIONS = 3


@pytest.fixture(scope="module")
def clusters() -> tuple[EmbeddedBroker, EmbeddedBroker]:  # type: ignore[misc]
    with (
        broker(overrides={"broker.id": "1"}) as source,
        broker(overrides={"broker.id": "2"}) as target,
    ):
        yield source, target


async def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    async with AsyncProducer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(first, first + count):
            await producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 3)
        await producer.flush()


async def committed_values(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Per partition, every value a read_committed reader sees, up to the end offsets now."""
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        tps = [(topic, p) for p in range(PARTITIONS)]
        ends = await admin.list_offsets(tps, -1)
    consumer = AsyncConsumer(
        {
            "bootstrap.servers": bootstrap,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign(tps)
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    async with consumer:
        async with asyncio.timeout(20):
            while any([await consumer.position(tp) < ends[tp] for tp in tps]):
                for r in await consumer.poll(200):
                    out[r.partition].append(r.value or b"")
    return out


async def wait_for(bootstrap: str, topic: str, count: int) -> dict[int, list[bytes]]:
    async with asyncio.timeout(30):
        while True:
            async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
                exists = topic in await admin.list_topics()
            if exists:
                values = await committed_values(bootstrap, topic)
                if sum(map(len, values.values())) >= count:
                    return values
            await asyncio.sleep(0.2)


def expected(topic_count: int) -> dict[int, list[bytes]]:
    return {p: [f"v{i}".encode() for i in range(p, topic_count, 3)] for p in range(PARTITIONS)}


def options(
    source: EmbeddedBroker, target: EmbeddedBroker, group: str, **extra: object
) -> mm1.MirrorMakerOptions:
    settings: dict[str, object] = {
        "consumer": {
            "bootstrap.servers": source.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": "6000",  # a killed member's partitions move on soon
            "heartbeat.interval.ms": "1000",
        },
        "producer": {"bootstrap.servers": target.bootstrap_servers, "linger.ms": "1"},
        "include": f"{group}-events",
        "offset_commit_interval_ms": 200,
        "exactly_once": True,
    }
    return mm1.MirrorMakerOptions(**{**settings, **extra})  # type: ignore[arg-type]


async def stored_offsets(target: str, group: str, topic: str) -> dict[int, int]:
    """What the offsets topic on the target says, per source partition (last offset)."""
    name = mm1.offsets_topic(group)
    keys = {
        source_offset_key("mirror-maker", {"group": group, "topic": topic, "partition": p}): p
        for p in range(PARTITIONS)
    }
    async with AsyncAdmin({"bootstrap.servers": target}) as admin:
        count = len((await admin.describe_topics([name]))[0].partitions)
        ends = await admin.list_offsets([(name, p) for p in range(count)], -1)
    consumer = AsyncConsumer(
        {
            "bootstrap.servers": target,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign(list(ends))
    out: dict[int, int] = {}
    async with consumer:
        async with asyncio.timeout(20):
            while any([await consumer.position(tp) < end for tp, end in ends.items()]):
                for r in await consumer.poll(200):
                    if (r.key or b"") in keys and r.value is not None:
                        out[keys[r.key or b""]] = decode_source_offset(r.value)
    return out


async def test_exactly_once_resumes_from_the_offsets_on_the_target(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker], tmp_path: Path
) -> None:
    source, target = clusters
    group = "eos"
    topic = f"{group}-events"
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        await admin.create_topic(topic, PARTITIONS, 1)
    async with AsyncAdmin({"bootstrap.servers": target.bootstrap_servers}) as admin:
        await admin.create_topic(topic, PARTITIONS, 1)
    await produce(source.bootstrap_servers, topic, 0, 300)
    stop = asyncio.Event()
    task = asyncio.create_task(mm1.run(options(source, target, group, num_streams=2), stop))
    assert await wait_for(target.bootstrap_servers, topic, 300) == expected(300)
    stop.set()
    await task
    assert await stored_offsets(target.bootstrap_servers, group, topic) == {0: 99, 1: 99, 2: 99}
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        assert await admin.group_offsets(group) == {}  # the source group holds nothing

    # A mirror dies with a transaction open: its records are never visible, and the next
    # run fences its producers and resumes from the stored offsets.
    await produce(source.bootstrap_servers, topic, 300, 60)
    (tmp_path / "c.properties").write_text(
        f"bootstrap.servers={source.bootstrap_servers}\ngroup.id={group}\n"
        "session.timeout.ms=6000\nheartbeat.interval.ms=1000\n"
    )
    (tmp_path / "p.properties").write_text(f"bootstrap.servers={target.bootstrap_servers}\n")
    dying = subprocess.Popen(
        [
            *(sys.executable, "-m", "riverlog", "mirror-maker", "--include", topic),
            *("--consumer.config", str(tmp_path / "c.properties")),
            *("--producer.config", str(tmp_path / "p.properties")),
            *("--offset.commit.interval.ms", "600000", "--exactly.once.source.support", "enabled"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(60):
            while True:  # the 60 new records reached the target, uncommitted
                async with AsyncAdmin({"bootstrap.servers": target.bootstrap_servers}) as admin:
                    ends = await admin.list_offsets([(topic, p) for p in range(PARTITIONS)], -1)
                if sum(ends.values()) >= 360 + 3:  # and the 3 commit markers of the first run
                    break
                await asyncio.sleep(0.1)
    finally:
        dying.kill()  # SIGKILL: the transactions stay open
        dying.wait(10)
    # (a read_committed reader now waits at the open transactions: it never sees them)
    await produce(source.bootstrap_servers, topic, 360, 30)
    stop = asyncio.Event()
    task = asyncio.create_task(mm1.run(options(source, target, group), stop))
    assert await wait_for(target.bootstrap_servers, topic, 390) == expected(390)  # 60 aborted
    stop.set()
    await task
    assert await stored_offsets(target.bootstrap_servers, group, topic) == {
        0: 129,
        1: 129,
        2: 129,
    }


async def test_a_fenced_mirror_stops(clusters: tuple[EmbeddedBroker, EmbeddedBroker]) -> None:
    """Two mirrors with the same transactional ids (a zombie and its successor, here made
    by sharing the `transactional.id` prefix): the older one is fenced and stops."""
    source, target = clusters
    topic = "fenced-events"
    for cluster in clusters:
        async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            await admin.create_topic(topic, PARTITIONS, 1)
    await produce(source.bootstrap_servers, topic, 0, 30)
    shared = {"transactional.id": "same-mirror"}

    def run(group: str) -> mm1.MirrorMakerOptions:
        base = options(source, target, group)
        return dataclasses.replace(base, producer={**base.producer, **shared}, include=topic)

    zombie_stop, successor_stop = asyncio.Event(), asyncio.Event()
    zombie = asyncio.create_task(mm1.run(run("fenced-1"), zombie_stop))
    await wait_for(target.bootstrap_servers, topic, 30)
    successor = asyncio.create_task(mm1.run(run("fenced-2"), successor_stop))
    try:
        async with asyncio.timeout(30):
            while not zombie.done():  # records keep coming: the zombie must write again
                await produce(source.bootstrap_servers, topic, 30, 3)
                await asyncio.sleep(0.2)
        with pytest.raises(SendFailed, match="fenced"):
            await zombie
    finally:
        zombie_stop.set()
        successor_stop.set()
        await successor


async def test_a_record_the_target_refuses_stops_the_mirror_after_retries(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker], caplog: pytest.LogCaptureFixture
) -> None:
    """A failed transaction is aborted and the partition resumes from its stored offset;
    one that keeps failing (a record too large for the target) stops the mirror."""
    source, target = clusters
    topic = "refused-events"
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        await admin.create_topic(topic, PARTITIONS, 1)
    async with AsyncAdmin({"bootstrap.servers": target.bootstrap_servers}) as admin:
        await admin.create_topic(topic, PARTITIONS, 1, {"max.message.bytes": "2000"})
    await produce(source.bootstrap_servers, topic, 0, 3)
    async with AsyncProducer({"bootstrap.servers": source.bootstrap_servers}) as producer:
        await producer.send(topic, b"x" * 5000, partition=0)
    run = dataclasses.replace(options(source, target, "refused"), include=topic)
    with pytest.raises(SendFailed, match="5 transactions in a row failed"):
        async with asyncio.timeout(60):
            await mm1.run(run, asyncio.Event())
    assert caplog.text.count("resuming from its stored offset") == 4
    assert await committed_values(target.bootstrap_servers, topic) == {
        0: [],  # never committed: the big record shares partition 0's transaction
        1: [b"v1"],
        2: [b"v2"],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
async def test_the_metrics_endpoint_counts_what_was_mirrored(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker], exactly_once: bool
) -> None:
    source, target = clusters
    group = f"metrics-{'eos' if exactly_once else 'alo'}"
    topic = f"{group}-events"
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        await admin.create_topic(topic, PARTITIONS, 1)
    async with AsyncAdmin({"bootstrap.servers": target.bootstrap_servers}) as admin:
        await admin.create_topic(topic, PARTITIONS, 1)
    await produce(source.bootstrap_servers, topic, 0, 600)
    port = free_port()
    stop = asyncio.Event()
    run = options(
        source,
        target,
        group,
        exactly_once=exactly_once,
        metrics_listener=f"http://127.0.0.1:{port}",
    )
    task = asyncio.create_task(mm1.run(run, stop))
    mirrored = await wait_for(target.bootstrap_servers, topic, 600)
    assert mirrored == expected(600)
    prefix = "kafka_connect_mirror_mirrorsourceconnector_"
    async with asyncio.timeout(20):
        while True:  # lag is known once a fetch answered at the end of every partition
            metrics = await asyncio.to_thread(scrape, port)
            lag = metrics.get("kafka_consumer_consumer_fetch_manager_metrics_records_lag", {})
            if len(lag) == PARTITIONS and not any(lag.values()):
                break
            await asyncio.sleep(0.2)
    stop.set()
    await task
    records = metrics[prefix + "record_count_total"]
    byte_counts = metrics[prefix + "byte_count_total"]
    latencies = metrics[prefix + "replication_latency_ms_count"]
    for p in range(PARTITIONS):
        labels = (
            ("partition", str(p)),
            ("source", "source"),
            ("target", "target"),
            ("topic", topic),
        )
        assert records[labels] == len(mirrored[p]) == 200
        size = sum(len(v) + len(f"k{v.decode()[1:]}") for v in mirrored[p])
        assert byte_counts[labels] == size
        assert latencies[labels] >= 1
    assert {dict(k)["client_id"] for k in lag} == {f"{group}-0"}
