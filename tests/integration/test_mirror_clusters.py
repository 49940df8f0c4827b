"""Mirroring between two 3-broker clusters (one ZooKeeper, two chroots) with
`riverlog connect-mirror-maker` as a process (issue 26).

1. Under produce load, a source leader, a target leader and the mirror process are each
   SIGKILLed and restarted: the target then holds every source record, in order per
   partition; at-least-once, so it may hold some twice — counted and printed.
2. A consumer group reading on the source fails over to the target at the offsets the
   checkpoints translated (`consumer-groups --reset-offsets --from-checkpoints a`) and misses
   nothing, re-reading at most `offset.lag.max` records per partition.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer
from riverlog.mirror.records import Checkpoint
from riverlog.protocol.error_codes import UNKNOWN_TOPIC_OR_PARTITION, KafkaError
from tests.cluster_harness import Cluster, isr_full, partitions_of, wait_until
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(150)
LAG_MAX = 10


class MirrorProcess:
    """`riverlog connect-mirror-maker` on a properties file; killed and restarted by PID."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "riverlog", "connect-mirror-maker", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(30)


@pytest.fixture(scope="module")
def two_clusters(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, Cluster, MirrorProcess]]:
    a = Cluster(zookeeper, tmp_path_factory.mktemp("cluster-a")).start()
    b = Cluster(zookeeper, tmp_path_factory.mktemp("cluster-b")).start()
    directory = tmp_path_factory.mktemp("mirror")
    config = directory / "mm2.properties"
    config.write_text(
        "\n".join(
            [
                "clusters = a, b",
                f"a.bootstrap.servers = {a.bootstrap_servers}",
                f"b.bootstrap.servers = {b.bootstrap_servers}",
                "a->b.enabled = true",
                "a->b.topics = events-.*",
                "replication.factor = 3",
                "refresh.topics.interval.seconds = 1",
                "emit.checkpoints.interval.seconds = 1",
                "offset.flush.interval.ms = 500",
                f"offset.lag.max = {LAG_MAX}",
                "a.consumer.session.timeout.ms = 6000",
                "a.consumer.heartbeat.interval.ms = 1000",
                "b.producer.request.timeout.ms = 5000",
                "b.producer.retry.backoff.ms = 200",
                "",
            ]
        )
    )
    mirror = MirrorProcess(config, directory / "mirror.log")
    mirror.start()
    try:
        yield a, b, mirror
    finally:
        if mirror.proc is not None and mirror.proc.poll() is None:
            mirror.kill()
        a.stop()
        b.stop()


async def read_partition(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    """Every value of one partition, up to its end offset now."""
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        end = (await admin.list_offsets([(topic, partition)], -1))[(topic, partition)]
    consumer = AsyncConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    consumer.assign([(topic, partition)])
    values: list[bytes] = []
    async with consumer:
        while await consumer.position((topic, partition)) < end:
            values += [r.value or b"" for r in await consumer.poll(500)]
    return values


def first_copies(values: list[bytes]) -> list[bytes]:
    seen: set[bytes] = set()
    return [v for v in values if not (v in seen or seen.add(v))]  # type: ignore[func-returns-value]


async def test_the_target_holds_every_record_through_kills(
    two_clusters: tuple[Cluster, Cluster, MirrorProcess],
) -> None:
    a, b, mirror = two_clusters
    topic_name = f"events-{uuid.uuid4().hex[:6]}"
    admin_a = {"bootstrap.servers": a.bootstrap_servers}
    async with AsyncAdmin(admin_a) as admin:
        await admin.create_topic(topic_name, 3, 3, {"min.insync.replicas": "2"})
    await asyncio.to_thread(wait_until, lambda: isr_full(a, topic_name), 60, "a's ISR full")
    remote = f"a.{topic_name}"
    stop = asyncio.Event()
    sent = [0]

    async def produce() -> None:
        config = {**admin_a, "linger.ms": 5, "retry.backoff.ms": 200, "request.timeout.ms": 5000}
        async with AsyncProducer(config) as producer:
            while not stop.is_set():
                for _ in range(30):
                    p = sent[0] % 3
                    try:
                        await producer.send(topic_name, f"{p}:{sent[0]}".encode(), partition=p)
                    except KafkaError as e:  # a restarted broker's first metadata can lack
                        assert e.error is UNKNOWN_TOPIC_OR_PARTITION  # partitions: send again
                        await asyncio.sleep(0.1)  # retry backoff
                        await producer.cluster.refresh([topic_name])
                        continue
                    sent[0] += 1
                await asyncio.sleep(0.05)  # ~600 records/s
            await producer.flush(60)

    async def mirrored() -> int:
        """Records on the target now; 0 while its leaders are moving (a killed broker)."""
        try:
            async with AsyncAdmin({"bootstrap.servers": b.bootstrap_servers}) as admin:
                if remote not in await admin.list_topics():
                    return 0
                ends = await admin.list_offsets([(remote, p) for p in range(3)], -1)
                return sum(ends.values())
        except (KafkaError, ConnectionError) as e:
            if isinstance(e, KafkaError) and not e.retriable:
                raise
            return 0

    async def progress(more: int) -> None:
        deadline = time.monotonic() + 60
        while not (start := await mirrored()):
            assert time.monotonic() < deadline, "the target's offsets stayed unknown"
            await asyncio.sleep(0.2)
        while await mirrored() < start + more:
            assert time.monotonic() < deadline, "the mirror made no progress"
            await asyncio.sleep(0.2)

    producing = asyncio.create_task(produce())
    try:
        await progress(300)
        leader = partitions_of(a, topic_name)[0][0]
        await asyncio.to_thread(a.brokers[leader].kill)
        await progress(300)
        await asyncio.to_thread(a.brokers[leader].start)
        await asyncio.to_thread(wait_until, lambda: isr_full(a, topic_name), 60, "a's ISR")

        leader = partitions_of(b, remote)[0][0]
        await asyncio.to_thread(b.brokers[leader].kill)
        await progress(300)
        await asyncio.to_thread(b.brokers[leader].start)
        await asyncio.to_thread(wait_until, lambda: isr_full(b, remote), 60, "b's ISR")

        await asyncio.to_thread(mirror.kill)
        await asyncio.sleep(0.5)  # records keep arriving on the source meanwhile
        mirror.start()
        await progress(300)
    finally:
        stop.set()
        await producing
        for broker in [*a.brokers.values(), *b.brokers.values()]:
            if not broker.running:  # a failed step left it down: the next test needs it
                await asyncio.to_thread(broker.start)
        if mirror.proc is None or mirror.proc.poll() is not None:
            mirror.start()

    duplicates = 0
    for p in range(3):
        source = await read_partition(a.bootstrap_servers, topic_name, p)
        deadline = time.monotonic() + 60
        while True:
            target = await read_partition(b.bootstrap_servers, remote, p)
            if len(first_copies(target)) >= len(source) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert first_copies(target) == source, f"partition {p}: not every record, in order"
        duplicates += len(target) - len(source)
    print(
        f"\nmirrored {sent[0]} records through three kills; at-least-once duplicates: {duplicates}"
    )


async def test_a_group_fails_over_at_translated_offsets(
    two_clusters: tuple[Cluster, Cluster, MirrorProcess],
) -> None:
    a, b, mirror = two_clusters
    assert mirror.proc is not None and mirror.proc.poll() is None
    topic = "events-failover"
    remote = f"a.{topic}"
    source_config = {"bootstrap.servers": a.bootstrap_servers}
    async with AsyncAdmin(source_config) as admin:
        await admin.create_topic(topic, 3, 3)
    async with AsyncProducer(source_config) as producer:
        for i in range(900):
            await producer.send(topic, f"{i % 3}:{i}".encode(), partition=i % 3)
    # The application reads part of the topic on the source and commits as it goes.
    consumed: set[bytes] = set()
    committed: dict[tuple[str, int], int] = {}
    group = {
        **source_config,
        "group.id": "app",
        "enable.auto.commit": "false",
        "auto.offset.reset": "earliest",
    }
    consumer = AsyncConsumer(group)
    consumer.subscribe([topic])
    async with consumer:
        async with asyncio.timeout(30):
            while len(consumed) < 400:
                for r in await consumer.poll(500):
                    consumed.add(r.value or b"")
                    committed[(r.topic, r.partition)] = r.offset + 1
                await consumer.commit(dict(committed))

    # The source cluster is "lost": wait for the checkpoint of the last commit, then move.
    async def checkpointed() -> dict[tuple[str, int], int]:
        latest: dict[tuple[str, int], int] = {}
        for r in await read_partition_records(b.bootstrap_servers, "a.checkpoints.internal"):
            c = Checkpoint.decode(r[0], r[1])
            if c.group == "app":
                latest[(c.topic[len("a.") :], c.partition)] = c.upstream_offset
        return latest

    deadline = time.monotonic() + 30
    while await checkpointed() != committed:
        assert time.monotonic() < deadline, "no checkpoint of the group's last commit"
        await asyncio.sleep(0.5)
    reset = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "riverlog",
            "consumer-groups",
            "--bootstrap-server",
            b.bootstrap_servers,
            "--reset-offsets",
            "--group",
            "app",
            "--all-topics",
            "--from-checkpoints",
            "a",
            "--execute",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert reset.returncode == 0, reset.stderr
    assert remote in reset.stdout

    reread = 0
    target = AsyncConsumer({**group, "bootstrap.servers": b.bootstrap_servers})
    target.subscribe([remote])
    after: set[bytes] = set()
    async with target:
        async with asyncio.timeout(30):
            while len(consumed | after) < 900:
                for r in await target.poll(500):
                    value = r.value or b""
                    reread += value in consumed
                    after.add(value)
    assert consumed | after == {f"{i % 3}:{i}".encode() for i in range(900)}
    assert reread <= 3 * LAG_MAX, f"re-read {reread} records"


async def read_partition_records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        if topic not in await admin.list_topics():
            return []
        end = (await admin.list_offsets([(topic, 0)], -1))[(topic, 0)]
    consumer = AsyncConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    consumer.assign([(topic, 0)])
    out: list[tuple[bytes, bytes]] = []
    async with consumer:
        while await consumer.position((topic, 0)) < end:
            out += [(r.key or b"", r.value or b"") for r in await consumer.poll(500)]
    return out
