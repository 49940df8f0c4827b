"""`riverlog replica-verification` against three broker processes around a real ZooKeeper.

A healthy RF=3 topic verifies with zero lag and no divergence. A stopped follower shows as
lag. Then the follower is made to diverge for real: while it is stopped the leader takes ten
more records, and the same offsets, in the same leader epoch, are written with other contents
into the follower's own log with riverlog's storage layer; restarted, the follower agrees with
the leader on epochs and end offset, so nothing truncates the forgery, and the tool finds the
batches whose checksums differ.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from riverlog.cli.replica_verifier import batch_headers
from riverlog.client.connection import Connection
from riverlog.protocol.messages import FetchRequest, FetchResponse
from riverlog.protocol.records.batch_header import BatchHeader
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.storage.manager import LogManager
from tests.cluster_harness import (
    Cluster,
    controller_of,
    create_assigned_topic,
    isr_full,
    partitions_of,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)
LAG = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}: max lag is (-?\d+) for partition "
    r"(\S+) at offset (-?\d+) among (\d+) partitions$"
)


def verify(cluster: Cluster, topic: str, run_ms: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "replica-verification",
            "--broker-list",
            cluster.bootstrap_servers,
            "--topic-white-list",
            topic,
            "--time",
            "-2",
            "--time-ms",
            str(run_ms),
            "--report-interval-ms",
            "300",
            "--max-wait-ms",
            "100",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def produce(cluster: Cluster, topic: str, partition: int, count: int, tag: str) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 20}
    )
    for i in range(count):
        producer.produce(topic, f"{tag}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def leader_batches(address: str, topic: str, offset: int) -> list[tuple[BatchHeader, int]]:
    """The leader's batches from `offset` as a consumer reads them: (header, record count)."""

    async def fetch() -> list[tuple[BatchHeader, int]]:
        host, port = address.split(":")
        conn = await Connection.open(host, int(port))
        try:
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
            )
            response = await conn.send(request, 12)
        finally:
            await conn.close()
        assert isinstance(response, FetchResponse)
        data = response.responses[0].partitions[0]
        assert data.error_code == 0 and isinstance(data.records, bytes | bytearray | memoryview)
        return [(h, h.records_count) for h in batch_headers(data.records)]

    return asyncio.run(fetch())


def forge_into(data_dir: Path, topic: str, originals: list[tuple[BatchHeader, int]]) -> None:
    """Write batches at the originals' offsets and leader epochs, with other values, into a
    stopped broker's log of `topic`-0, through riverlog's storage layer."""
    manager = LogManager(data_dir, cleaner_enabled=False)
    try:
        plog = manager.get(topic, 0)
        assert plog is not None
        for header, count in originals:
            forged = encode_batch(
                [
                    Record(header.base_offset + i, header.base_timestamp, None, b"forged")
                    for i in range(count)
                ],
                base_offset=header.base_offset,
                partition_leader_epoch=header.partition_leader_epoch,
            )
            plog.append_as_follower(forged)
    finally:
        manager.shutdown()


def lag_reports(out: str) -> list[tuple[int, str, int, int]]:
    found = [LAG.match(line) for line in out.splitlines()]
    return [(int(m[1]), m[2], int(m[3]), int(m[4])) for m in found if m]


def test_zero_divergence_when_healthy_lag_and_a_forged_replica_found(cluster: Cluster) -> None:
    wait_until(lambda: controller_of(cluster) > 0, 15, "a controller")
    controller = controller_of(cluster)
    leader, follower = [b for b in cluster.brokers if b != controller]
    plan = [[leader, follower, controller], [controller, leader, follower]]
    topic = create_assigned_topic(cluster, plan)
    for partition in (0, 1):
        produce(cluster, topic, partition, 50, "healthy")
    wait_until(lambda: isr_full(cluster, topic), 30, "a full ISR")

    healthy = verify(cluster, topic, 2000)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.splitlines()[0].endswith(": verification process is started.")
    reports = lag_reports(healthy.stdout)
    assert reports and reports[-1][0] == 0 and reports[-1][3] == 2, healthy.stdout
    assert "checksum" not in healthy.stdout and "doesn't match" not in healthy.stdout

    cluster.brokers[follower].stop()
    wait_until(lambda: follower not in partitions_of(cluster, topic)[0][2], 30, "ISR shrink")
    produce(cluster, topic, 0, 10, "later")
    lagging = verify(cluster, topic, 1200)
    assert lagging.returncode == 0, lagging.stdout + lagging.stderr
    assert lag_reports(lagging.stdout)[-1][:3] == (60, f"{topic}-0", 0), lagging.stdout

    originals = leader_batches(cluster.brokers[leader].address, topic, 50)
    assert sum(count for _, count in originals) == 10
    forge_into(cluster.brokers[follower].data_dir, topic, originals)
    cluster.brokers[follower].start()
    wait_until(lambda: isr_full(cluster, topic), 30, "the forged follower back in the ISR")

    diverged = verify(cluster, topic, 2000)
    assert diverged.returncode == 1, diverged.stdout + diverged.stderr
    found = re.findall(
        rf": partition {re.escape(topic)}-0 has unmatched checksum at offset "
        rf"(\d+); replica (\d+)'s checksum \d+; replica (\d+)'s checksum \d+",
        diverged.stdout,
    )
    assert {int(offset) for offset, _, _ in found} == {h.last_offset for h, _ in originals}
    assert all(follower in (int(a), int(b)) for _, a, b in found)
    assert f"{topic}-1 has unmatched" not in diverged.stdout
    assert lag_reports(diverged.stdout)[-1][0] == 0, diverged.stdout
