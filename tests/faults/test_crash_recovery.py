"""riverlog's storage across a machine crash (the crashfs layer: unsynced writes and names
not made durable are lost), in-process and deterministic: the regression tests of what the
crash layer found in the broker. Root only; skipped with the reason where FUSE cannot mount.

- A new partition directory was never fsynced into its log dir: with flush.messages=1 every
  acknowledged record had been fsynced, yet the crash took the whole partition away.
- meta.properties was written without fsync: after the crash it was empty and a standalone
  broker came back under a new cluster id (tests/faults/test_machine_crash.py shows that).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.storage import checkpoint
from riverlog.storage.manager import LogManager
from riverlog.testing.crash_mount import CrashMount, why_not

pytestmark = pytest.mark.timeout(120)

FLUSH_EACH = {"flush.messages": "1", "segment.bytes": "4096", "index.interval.bytes": "256"}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[CrashMount]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    with CrashMount(tmp_path / "backing", tmp_path / "disk") as mounted:
        yield mounted


def batch(i: int) -> bytes:
    return encode_batch([Record(0, 1_700_000_000_000 + i, b"k%d" % i, b"v%d-" % i + b"x" * 100)])


def abandon(manager: LogManager) -> None:
    """The process died with the machine: its descriptors are simply gone."""
    for partition_log in manager.logs.values():
        for seg in partition_log.segments:
            seg.closed = True
            with contextlib.suppress(OSError):
                os.close(seg.fd)


def test_a_new_partition_with_flush_messages_1_survives_a_machine_crash(
    disk: CrashMount,
) -> None:
    manager = LogManager(disk.mountpoint, FLUSH_EACH)
    partition_log = manager.get_or_create("events", 0)
    for i in range(40):  # several segments, each append fsynced before it returns
        partition_log.append(batch(i), leader_epoch=0)
    end = partition_log.log_end_offset
    assert len(partition_log.segments) > 1
    assert disk.pending()["pending_bytes"] == 0
    abandon(manager)
    disk.crash()
    disk.mount()
    again = LogManager(disk.mountpoint, FLUSH_EACH)
    recovered = again.get("events", 0)
    assert recovered is not None, "the partition directory did not survive the crash"
    assert recovered.log_end_offset == end
    abandon(again)


def test_after_a_flush_no_name_in_the_partition_directory_is_pending(disk: CrashMount) -> None:
    """Kafka's LocalLog.flush rule: a flush that covers a segment created since the last one
    fsyncs the partition directory, so the segment's name is durable with its data."""
    root = disk.mountpoint / "events-0"
    manager = LogManager(disk.mountpoint, {"segment.bytes": "4096"})
    partition_log = manager.get_or_create("events", 0)
    for i in range(40):
        partition_log.append(batch(i), leader_epoch=0)
    partition_log.flush()
    pending = [n for n in disk.pending()["new_names"] if n.startswith(f"/{root.name}")]
    assert pending == []
    abandon(manager)


def test_a_checkpoint_is_the_old_or_the_new_one_after_a_crash(disk: CrashMount) -> None:
    """write tmp, fsync, rename, fsync the directory: never empty, never missing."""
    path = disk.mountpoint / checkpoint.RECOVERY_POINT_FILE
    checkpoint.write_offsets(path, {("a", 0): 1})
    checkpoint.write_offsets(path, {("a", 0): 2})
    disk.crash()
    disk.mount()
    assert checkpoint.read_offsets(path) == {("a", 0): 2}
    assert sorted(p.name for p in disk.mountpoint.iterdir()) == [checkpoint.RECOVERY_POINT_FILE]


def test_segments_that_lost_all_their_data_do_not_leave_a_gap(disk: CrashMount) -> None:
    """Segments rolled after the last flush come back from the crash as empty files (their
    names were made durable, their data was not). Recovery must end the log where the data
    ends: an empty segment in the middle or at the end would otherwise put the log end
    offset past offsets that no longer exist, so consumers wait at the gap forever and a
    restarted follower keeps a hole that leader-epoch truncation does not see."""
    settings = {"segment.bytes": "2048", "index.interval.bytes": "256"}
    manager = LogManager(disk.mountpoint, settings)
    partition_log = manager.get_or_create("events", 0)
    for i in range(20):
        partition_log.append(batch(i), leader_epoch=0)
    partition_log.flush()
    manager.write_checkpoints()
    flushed = partition_log.log_end_offset
    for i in range(20, 60):  # several more segments, none of them flushed
        partition_log.append(batch(i), leader_epoch=0)
    assert len(partition_log.segments) > 4
    abandon(manager)
    disk.crash()
    disk.mount()
    again = LogManager(disk.mountpoint, settings)
    recovered = again.get("events", 0)
    assert recovered is not None
    assert recovered.log_end_offset == flushed
    assert all(seg.size > 0 for seg in recovered.segments[:-1])
    assert recovered.append(batch(99), leader_epoch=0).first_offset == flushed
    abandon(again)


def test_a_rolled_segment_is_flushed_by_the_housekeeping(disk: CrashMount) -> None:
    """As Kafka schedules a flush at every roll: after the next housekeeping round only the
    active segment can lose data in a crash."""
    settings = {"segment.bytes": "2048", "index.interval.bytes": "256"}
    manager = LogManager(disk.mountpoint, settings)
    partition_log = manager.get_or_create("events", 0)
    for i in range(40):
        partition_log.append(batch(i), leader_epoch=0)
    active = partition_log.active.base_offset
    assert active > 0 and partition_log.recovery_point == 0
    manager.tick()
    manager.write_checkpoints()
    assert partition_log.recovery_point == partition_log.log_end_offset
    partition_log.append(batch(40), leader_epoch=0)  # unflushed: the crash takes it
    abandon(manager)
    disk.crash()
    disk.mount()
    again = LogManager(disk.mountpoint, settings)
    recovered = again.get("events", 0)
    assert recovered is not None
    assert recovered.log_end_offset == 40
    abandon(again)


def test_a_crash_after_a_clean_shutdown_loses_nothing(disk: CrashMount) -> None:
    """The clean-shutdown marker promises that no recovery is needed: everything it covers
    must be on the disk before it is, or a crash after a clean stop would skip the recovery
    of torn segments."""
    settings = {"segment.bytes": "2048", "index.interval.bytes": "256"}
    manager = LogManager(disk.mountpoint, settings)
    partition_log = manager.get_or_create("events", 0)
    for i in range(30):
        partition_log.append(batch(i), leader_epoch=0)
    partition_log.update_high_watermark(30)
    manager.shutdown()
    assert disk.pending() == {"pending_bytes": 0, "new_names": []}
    disk.crash()
    disk.mount()
    again = LogManager(disk.mountpoint, settings)
    recovered = again.get("events", 0)
    assert recovered is not None and recovered.log_end_offset == 30
    assert recovered.append(batch(30), leader_epoch=0).first_offset == 30
    abandon(again)
