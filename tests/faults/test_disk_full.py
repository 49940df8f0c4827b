"""A log dir that fills up (ENOSPC): the append that hit it must fail, and the partition must
stay whole — every acknowledged record readable, before and after a restart.

Found by the fault suite (`disk-full` on a leader, bench/bench_faults.py --disk-mb): a batch
that hit ENOSPC half-written stays in the leader's active segment; followers refuse it forever
("Corrupt record batch ... CRC is ..., header says ...") and the leader shrinks its ISR to
itself, so the partition is stuck below min.insync.replicas even after space came back. Needs
root (a small tmpfs as the log dir)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from tests.integration.conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "data"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
        capture_output=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def fill(path: Path, leave: int) -> None:
    """Take every free byte of `path`'s file system, then give back `leave` bytes."""
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 20, 4096):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        f.truncate(max(0, f.tell() - leave))


def produce(bs: str, values: list[bytes]) -> dict[bytes, int]:
    """Send with acks=all in as few batches as fit; value -> offset of those acknowledged."""
    acked: dict[bytes, int] = {}

    def done(err: object, msg: object) -> None:
        if err is None:
            acked[msg.value()] = msg.offset()  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": bs,
            "linger.ms": 200,
            "acks": "all",
            "message.timeout.ms": 10000,
            "enable.idempotence": False,
            "retries": 0,
        }
    )
    for v in values:
        producer.produce("disk", v, partition=0, on_delivery=done)
    producer.flush(30)
    return acked


def read_all(bs: str) -> tuple[dict[bytes, int], list[str]]:
    """Every record of partition 0 from the start (up to its end, or what 15 s of polling
    found), and the errors met on the way."""
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "disk-check",
            "enable.auto.commit": False,  # each read starts from the beginning
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe(["disk"])
    found: dict[bytes, int] = {}
    errors: list[str] = []
    try:
        deadline = time.monotonic() + 15  # a partition that never reaches its end: stop
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                errors.append(str(msg.error()))
                continue
            found[msg.value()] = msg.offset()
    finally:
        consumer.close()
    return found, errors


def test_a_full_log_dir_fails_the_append_and_keeps_every_acknowledged_record(
    small_disk: Path,
) -> None:
    broker: BrokerProcess | None = start_broker(small_disk)
    try:
        assert broker is not None
        bs = broker.bootstrap_servers
        subprocess.run(
            [
                sys.executable,
                "-m",
                "riverlog",
                "topics",
                "--bootstrap-server",
                bs,
                "--create",
                "--topic",
                "disk",
                "--partitions",
                "1",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        acked = produce(bs, [b"before-%d" % i for i in range(10)])
        assert len(acked) == 10
        filler = small_disk / "zz-filler"
        fill(filler, leave=64 * 1024)
        big = [b"big-%03d-" % i + b"x" * 20_000 for i in range(30)]  # ~600 KB in one batch
        acked_big = produce(bs, big)
        assert len(acked_big) < len(big)  # the disk could not take them all
        filler.unlink()
        after = produce(bs, [b"after-%d" % i for i in range(10)])
        assert len(after) == 10
        acked |= acked_big | after
        found, errors = read_all(bs)
        assert not errors, errors
        assert {v: found.get(v) for v in acked} == acked
        broker.stop()
        broker = None
        broker = start_broker(small_disk)
        found, errors = read_all(broker.bootstrap_servers)
        assert not errors, errors
        assert {v: found.get(v) for v in acked} == acked
    finally:
        if broker is not None:
            broker.stop()


def test_a_full_disk_during_housekeeping_leaves_the_directory_online(small_disk: Path) -> None:
    """Found by the long run (seed 1601, fault 209): the disk filled while the log manager
    wrote its checkpoints, and the ENOSPC took the whole log directory offline — the broker
    left every ISR until a restart, although the write was cut off whole and nothing was
    lost. Now housekeeping skips the round, leaves no temporary file, and the next round
    after space came back writes the checkpoints."""
    from riverlog.storage import checkpoint
    from riverlog.storage.manager import LogManager

    failed: list[Path] = []
    manager = LogManager(small_disk, {}, on_dir_failure=failed.append)
    manager.get_or_create("disk", 0)
    hog = small_disk / "hog"
    fill(hog, 0)
    for rf in (checkpoint.RECOVERY_POINT_FILE, checkpoint.HIGH_WATERMARK_FILE):
        (small_disk / rf).unlink(missing_ok=True)
    manager.write_checkpoints()
    manager.tick(10**12)
    assert failed == [] and manager.offline_dirs == set()
    assert not list(small_disk.glob("*.tmp"))
    hog.unlink()
    manager.write_checkpoints()
    assert (small_disk / checkpoint.RECOVERY_POINT_FILE).exists()
    assert checkpoint.read_offsets(small_disk / checkpoint.HIGH_WATERMARK_FILE) == {("disk", 0): 0}
    manager.shutdown()


def test_a_broker_whose_every_log_dir_failed_stops(tmp_path: Path) -> None:
    """Kafka's LogDirFailureHandler: with no log directory online, the broker shuts down
    (a supervisor restarts it, and recovery starts from the logs). riverlog kept running
    with nothing to serve — in the long run (seed 1601) a broker stayed out of every ISR
    until the end. The directory is broken as Kafka's LogDirFailureTest breaks it (moved
    away, a file in its place: the next segment roll fails with ENOTDIR)."""
    data = tmp_path / "data"
    data.mkdir()
    broker = start_broker(data, "log.segment.bytes=1000")
    try:
        produce(broker.bootstrap_servers, [b"v" * 600])
        data.rename(tmp_path / "data.gone")
        data.write_bytes(b"")
        produce(broker.bootstrap_servers, [b"w" * 600, b"x" * 600])  # rolls: fails
        assert broker.proc.wait(timeout=60) == 1
    finally:
        broker.stop()
    logged = (tmp_path / "data.broker.log").read_text()
    assert "Shutdown broker because all log dirs in" in logged


async def test_a_truncation_cut_short_by_a_full_disk_takes_the_directory_offline(
    small_disk: Path, tmp_path: Path
) -> None:
    """Found by the long run (seed 1602): a follower's truncation (OffsetForLeaderEpoch said
    the leader's epoch ends earlier) met a full disk half-way — a segment's files renamed
    for deletion, its index flush refused — and the fetcher only logged and retried; the
    log was left with segments it could no longer cut, and the follower refused its
    leader's batches as out of order until the run gave up. A truncation is several writes,
    not one that is cut off whole: an I/O error there now takes the directory offline, and
    with no directory left the broker stops (Kafka's rule), to recover on restart. The log,
    the full disk and the replica manager are real; only the leader's answer is given."""
    from riverlog.protocol.messages import OffsetForLeaderEpochResponse as Answer
    from riverlog.protocol.records.v2 import Record, encode_batch
    from tests.server.test_replica_manager import ManualClock, T, leading

    clock = ManualClock()
    manager, _ = leading(tmp_path, clock, small_disk, **{"segment.bytes": "2000"})
    stopped: list[bool] = []
    manager.on_all_dirs_failed = lambda: stopped.append(True)
    for _ in range(12):  # five records per segment
        manager.append(T, 0, memoryview(encode_batch([Record(0, 0, b"k", b"v" * 300)])), acks=1)
    fill(small_disk / "hog", 0)

    class Leader:  # the leader's answer: its epoch 4 ends at offset 3
        async def send(self, request: object, version: int) -> Answer:
            end = Answer.EpochEndOffset(partition=0, leader_epoch=4, end_offset=3)
            return Answer(topics=[Answer.OffsetForLeaderTopicResult(topic=T, partitions=[end])])

    hosted = manager.get(T, 0)
    manager.fetchers.follow(hosted, ("127.0.0.1", 9))  # nothing listens there: it backs off
    fetcher = manager.fetchers._fetchers[hosted.leader_id]
    try:
        await fetcher._reconcile(Leader())  # type: ignore[arg-type]
    finally:
        await manager.fetchers.stop()
    assert manager.logs.offline_dirs == {small_disk} and stopped == [True]
    assert hosted.key in manager.offline and hosted.key not in fetcher.partitions
