"""Mirroring between two 3-broker clusters (one ZooKeeper, two chroots) with
`riverlog connect-mirror-maker` as a process (issue 26).

1. Under produce load, a source leader, a target leader and the mirror processes are each
   SIGKILLed and restarted. Two mirrors copy the same topic: the at-least-once one (flow a->b,
   remote topic `a.T`) and an exactly-once one (the same clusters under the aliases src/dst,
   `dst.exactly.once.source.support = enabled`, remote topic `src.T`). The target then holds
   every source record in order per partition: at-least-once may hold some twice (counted
   and printed); exactly-once, read with read_committed, holds each exactly once.
2. A consumer group reading on the source fails over to the target at the offsets the
   checkpoints translated (`consumer-groups --reset-offsets --from-checkpoints a`) and misses
   nothing, re-reading at most `offset.lag.max` records per partition.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer
from riverlog.mirror.records import Checkpoint
from riverlog.protocol import messages as m
from riverlog.protocol.error_codes import UNKNOWN_TOPIC_OR_PARTITION, KafkaError
from tests.cluster_harness import Cluster, isr_full, partitions_of, wait_until
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(400)
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


TXN_SETTINGS = {
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "6",
}


def mm2_properties(a: Cluster, b: Cluster, source: str, target: str, *extra: str) -> str:
    return "\n".join(
        [
            f"clusters = {source}, {target}",
            f"{source}.bootstrap.servers = {a.bootstrap_servers}",
            f"{target}.bootstrap.servers = {b.bootstrap_servers}",
            f"{source}->{target}.enabled = true",
            f"{source}->{target}.topics = events-.*",
            "replication.factor = 3",
            "refresh.topics.interval.seconds = 1",
            "emit.checkpoints.interval.seconds = 1",
            "offset.flush.interval.ms = 3000",  # a kill is likely to find records uncommitted
            f"offset.lag.max = {LAG_MAX}",
            f"{source}.consumer.session.timeout.ms = 6000",
            f"{source}.consumer.heartbeat.interval.ms = 1000",
            f"{target}.producer.request.timeout.ms = 5000",
            f"{target}.producer.retry.backoff.ms = 200",
            *extra,
            "",
        ]
    )


@pytest.fixture(scope="module")
def two_clusters(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, Cluster, MirrorProcess, MirrorProcess]]:
    """The clusters, the at-least-once mirror a->b and the exactly-once mirror src->dst."""
    a = Cluster(zookeeper, tmp_path_factory.mktemp("cluster-a"), settings=TXN_SETTINGS).start()
    b = Cluster(zookeeper, tmp_path_factory.mktemp("cluster-b"), settings=TXN_SETTINGS).start()
    directory = tmp_path_factory.mktemp("mirror")
    config = directory / "mm2.properties"
    config.write_text(mm2_properties(a, b, "a", "b"))
    eos_config = directory / "mm2-eos.properties"
    eos_config.write_text(
        mm2_properties(
            a,
            b,
            "src",
            "dst",
            "dst.exactly.once.source.support = enabled",
            "src->dst.exactly.once.support = required",
            "offset.storage.partitions = 5",
            "emit.checkpoints.enabled = false",
        )
    )
    mirror = MirrorProcess(config, directory / "mirror.log")
    eos_mirror = MirrorProcess(eos_config, directory / "mirror-eos.log")
    mirror.start()
    eos_mirror.start()
    try:
        yield a, b, mirror, eos_mirror
    finally:
        for m in (mirror, eos_mirror):
            if m.proc is not None and m.proc.poll() is None:
                m.kill()
        a.stop()
        b.stop()


async def read_partition(
    bootstrap: str, topic: str, partition: int, isolation: str = "read_uncommitted"
) -> list[bytes]:
    """Every value of one partition, up to its end offset (high watermark) now."""
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        end = (await admin.list_offsets([(topic, partition)], -1))[(topic, partition)]
    consumer = AsyncConsumer(
        {
            "bootstrap.servers": bootstrap,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    consumer.assign([(topic, partition)])
    values: list[bytes] = []
    async with consumer:
        while await consumer.position((topic, partition)) < end:
            values += [r.value or b"" for r in await consumer.poll(500)]
    return values


async def open_transaction_records(bootstrap: str, topic: str) -> int:
    """Records of transactions still open on `topic` (high watermark minus last stable
    offset, summed over its 3 partitions); 0 when the cluster cannot say now."""
    tps = [(topic, p) for p in range(3)]
    try:
        async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
            ends = await admin.list_offsets(tps, -1)
            total = 0
            for name, p in tps:
                leader = await admin.cluster.leader_of(name, p)
                request = m.ListOffsetsRequest(
                    replica_id=-1,
                    isolation_level=1,  # read_committed: the last stable offset
                    topics=[
                        m.ListOffsetsRequest.ListOffsetsTopic(
                            name=name,
                            partitions=[
                                m.ListOffsetsRequest.ListOffsetsPartition(
                                    partition_index=p, timestamp=-1
                                )
                            ],
                        )
                    ],
                )
                answer = await (await admin.cluster.connection(leader)).send(request)
                assert isinstance(answer, m.ListOffsetsResponse)
                found = answer.topics[0].partitions[0]
                if found.error_code:
                    return 0
                total += ends[(name, p)] - found.offset
            return total
    except (KafkaError, ConnectionError):
        return 0


def first_copies(values: list[bytes]) -> list[bytes]:
    seen: set[bytes] = set()
    return [v for v in values if not (v in seen or seen.add(v))]  # type: ignore[func-returns-value]


async def test_the_target_holds_every_record_through_kills(
    two_clusters: tuple[Cluster, Cluster, MirrorProcess, MirrorProcess],
) -> None:
    a, b, mirror, eos_mirror = two_clusters
    topic_name = f"events-{uuid.uuid4().hex[:6]}"
    admin_a = {"bootstrap.servers": a.bootstrap_servers}
    async with AsyncAdmin(admin_a) as admin:
        await admin.create_topic(topic_name, 3, 3, {"min.insync.replicas": "2"})
    await asyncio.to_thread(wait_until, lambda: isr_full(a, topic_name), 60, "a's ISR full")
    remote, eos_remote = f"a.{topic_name}", f"src.{topic_name}"
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
        """Records both mirrors put on the target now (the fewer); 0 while its leaders are
        moving (a killed broker)."""
        try:
            async with AsyncAdmin({"bootstrap.servers": b.bootstrap_servers}) as admin:
                if not {remote, eos_remote} <= set(await admin.list_topics()):
                    return 0
                ends = await admin.list_offsets(
                    [(t, p) for t in (remote, eos_remote) for p in range(3)], -1
                )
                return min(sum(ends[(t, p)] for p in range(3)) for t in (remote, eos_remote))
        except (KafkaError, ConnectionError) as e:
            if isinstance(e, KafkaError) and not e.retriable:
                raise
            return 0

    async def progress(more: int) -> None:
        deadline = time.monotonic() + 120  # generous: CI machines can be loaded
        while not (start := await mirrored()):
            assert time.monotonic() < deadline, "the target's offsets stayed unknown"
            await asyncio.sleep(0.2)
        while await mirrored() < start + more:
            assert time.monotonic() < deadline, "the mirrors made no progress"
            await asyncio.sleep(0.2)

    producing = asyncio.create_task(produce())
    try:
        await progress(300)
        leader = partitions_of(a, topic_name)[0][0]
        await asyncio.to_thread(a.brokers[leader].kill)
        await progress(300)
        await asyncio.to_thread(a.brokers[leader].start, 90.0)
        await asyncio.to_thread(wait_until, lambda: isr_full(a, topic_name), 60, "a's ISR")

        leader = partitions_of(b, remote)[0][0]
        await asyncio.to_thread(b.brokers[leader].kill)
        await progress(300)
        await asyncio.to_thread(b.brokers[leader].start, 90.0)
        await asyncio.to_thread(wait_until, lambda: isr_full(b, remote), 60, "b's ISR")

        # The exactly-once mirror is killed with records of an open transaction on the
        # target: frozen (SIGSTOP) until one is seen, then SIGKILLed.
        assert eos_mirror.proc is not None
        deadline = time.monotonic() + 60
        while True:
            os.kill(eos_mirror.proc.pid, signal.SIGSTOP)
            if await open_transaction_records(b.bootstrap_servers, eos_remote) > 0:
                break
            os.kill(eos_mirror.proc.pid, signal.SIGCONT)
            assert time.monotonic() < deadline, "never saw an open transaction"
            await asyncio.sleep(0.2)
        await asyncio.to_thread(mirror.kill)
        await asyncio.to_thread(eos_mirror.kill)
        await asyncio.sleep(0.5)  # records keep arriving on the source meanwhile
        mirror.start()
        eos_mirror.start()
        await progress(300)
    finally:
        stop.set()
        await producing
        for broker in [*a.brokers.values(), *b.brokers.values()]:
            if not broker.running:  # a failed step left it down: the next test needs it
                await asyncio.to_thread(broker.start, 90.0)
        for m in (mirror, eos_mirror):
            if m.proc is None or m.proc.poll() is not None:
                m.start()

    duplicates = 0
    uncommitted = 0
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
        while True:
            exact = await read_partition(b.bootstrap_servers, eos_remote, p, "read_committed")
            if len(exact) >= len(source) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert exact == source, f"partition {p}: exactly-once copy differs"
        uncommitted += len(await read_partition(b.bootstrap_servers, eos_remote, p)) - len(exact)
    assert uncommitted > 0, "the killed exactly-once mirror left no aborted records"
    print(
        f"\nmirrored {sent[0]} records through three kills; at-least-once duplicates: "
        f"{duplicates}; exactly-once duplicates: 0 (records of aborted transactions, "
        f"invisible to read_committed: {uncommitted})"
    )


async def test_a_group_fails_over_at_translated_offsets(
    two_clusters: tuple[Cluster, Cluster, MirrorProcess, MirrorProcess],
) -> None:
    a, b, mirror, _ = two_clusters
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
