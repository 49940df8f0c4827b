"""A machine crash: the page cache's unflushed writes are lost (`riverlog.testing.crashfs`,
a FUSE layer that keeps unsynced data in its own memory and drops it on command).

The layer itself; then one broker whose log dir is on it: killed with the machine, it must
come back cleanly (torn tails truncated, indexes rebuilt, no exception) and serve a clean
prefix of what it acknowledged — all of it with `flush.messages=1`. Root only (FUSE mount);
skipped with the reason where FUSE cannot mount."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.testing.crash_mount import CrashMount, why_not
from tests.integration.conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[CrashMount]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    with CrashMount(tmp_path / "backing", tmp_path / "disk") as mounted:
        yield mounted


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_synced_data_survives_a_crash_and_unsynced_data_does_not(disk: CrashMount) -> None:
    root = disk.mountpoint
    (root / "synced").write_bytes(b"old")
    fsync(root / "synced")
    fsync(root)
    with open(root / "synced", "ab") as f:
        f.write(b"+new")  # never fsynced
    with open(root / "unsynced-name", "wb") as f:
        f.write(b"data")
        f.flush()
        os.fsync(f.fileno())  # the data is durable, its name is not: the directory was not
    (root / "dir").mkdir()
    assert (root / "synced").read_bytes() == b"old+new"  # reads see the page cache
    assert disk.pending() == {
        "pending_bytes": 4,
        "new_names": ["/dir", "/unsynced-name"],
    }
    report = disk.crash()
    assert report["lost_bytes"] == 4
    disk.mount()
    assert sorted(p.name for p in root.iterdir()) == ["synced"]
    assert (root / "synced").read_bytes() == b"old"


def test_a_crash_may_write_back_some_dirty_pages(disk: CrashMount) -> None:
    """With write-back, each dirty 4 KiB page is on the disk whole or not at all."""
    root = disk.mountpoint
    data = bytes(range(256)) * 16 * 16  # 16 pages
    (root / "f").write_bytes(b"")
    fsync(root)
    (root / "f").write_bytes(data)
    report = disk.crash(writeback=0.5, seed=3)
    assert 0 < report["kept_bytes"] < len(data)
    disk.mount()
    after = (root / "f").read_bytes()
    assert len(after) % 4096 == 0 and len(after) <= len(data)
    pages = [after[i : i + 4096] for i in range(0, len(after), 4096)]
    assert all(p in (data[i * 4096 : (i + 1) * 4096], bytes(4096)) for i, p in enumerate(pages))
    assert sum(1 for p in pages if any(p)) * 4096 == report["kept_bytes"]


# --- one broker on the crashing disk --------------------------------------------------------


def create_topic(bs: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def produce(bs: str, topic: str, rounds: int, per_round: int) -> dict[int, bytes]:
    """acks=1, one batch per round; offset -> value of every acknowledged record."""
    acked: dict[int, bytes] = {}

    def done(err: object, msg: object) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bs, "acks": "1", "linger.ms": 5})
    for r in range(rounds):
        for i in range(per_round):
            producer.produce(topic, b"r%03d-%04d-" % (r, i) + b"x" * 200, on_delivery=done)
        producer.flush(30)
    assert producer.flush(30) == 0
    return acked


def read_all(
    bs: str, topic: str, start: int = OFFSET_BEGINNING
) -> tuple[dict[int, bytes], list[str]]:
    """Every record of partition 0 from `start` to its end; the errors met."""
    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "crash-check",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, start)])
    found: dict[int, bytes] = {}
    errors: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                errors.append(str(msg.error()))
                continue
            found[msg.offset()] = msg.value()
        else:
            errors.append("no end of partition within 30 s")
    finally:
        consumer.close()
    return found, errors


def machine_crash(broker: BrokerProcess, disk: CrashMount, writeback: float) -> dict[str, object]:
    broker.stop(signal.SIGKILL)
    report = disk.crash(writeback=writeback, seed=11)
    disk.mount()
    return report


def broker_log(disk: CrashMount) -> str:
    path = disk.mountpoint.parent / f"{disk.mountpoint.name}.broker.log"
    return path.read_text(errors="replace")


BROKER = ("offsets.topic.num.partitions=1",)


def run_crash(disk: CrashMount, writeback: float, *settings: str) -> tuple[dict, dict, dict]:
    """Produce with acks=1, crash the machine, restart: (acked, read back, crash report)."""
    overrides = (*BROKER, *settings)
    broker: BrokerProcess | None = start_broker(disk.mountpoint, *overrides)
    try:
        assert broker is not None
        create_topic(broker.bootstrap_servers, "crash")
        acked = produce(broker.bootstrap_servers, "crash", rounds=10, per_round=40)
        assert len(acked) == 400
        report = machine_crash(broker, disk, writeback)
        broker = None
        broker = start_broker(disk.mountpoint, *overrides)
        found, errors = read_all(broker.bootstrap_servers, "crash")
        assert not errors, errors
        if found:  # a read from the middle goes through the rebuilt offset index
            middle = len(found) // 2
            tail, errors = read_all(broker.bootstrap_servers, "crash", middle)
            assert not errors and tail == {o: v for o, v in found.items() if o >= middle}
        # the broker can still take writes where the recovered log ends
        more = produce(broker.bootstrap_servers, "crash", rounds=1, per_round=10)
        assert sorted(more) == list(range(len(found), len(found) + 10))
    finally:
        if broker is not None:
            broker.stop()
    log = broker_log(disk)
    assert "Traceback" not in log, log[-3000:]
    # meta.properties survived: the broker came back in the same cluster
    assert len(set(re.findall(r"listening on \S+ \(cluster (\S+)\)", log))) == 1, log[-3000:]
    return acked, found, report


def test_without_flush_a_crashed_broker_recovers_a_clean_prefix(disk: CrashMount) -> None:
    """acks=1, no flush: what was not synced may be lost, but what is read afterwards is a
    prefix of what was acknowledged, offset for offset: torn tails and holes (half of the
    dirty pages written back before the power went) truncated, indexes rebuilt."""
    acked, found, report = run_crash(disk, 0.5)
    assert report["lost_bytes"] and report["kept_bytes"]
    assert 0 < len(found) < len(acked)  # (seeded: the first pages were written back)
    assert sorted(found) == list(range(len(found)))  # from offset 0, no gaps
    assert all(found[o] == acked[o] for o in found)


def test_with_flush_messages_1_nothing_acknowledged_is_lost(disk: CrashMount) -> None:
    """The same crash with every message fsynced before it is acknowledged: nothing lost."""
    acked, found, _ = run_crash(disk, 0.0, "log.flush.interval.messages=1")
    assert found == acked
