"""The log manager: clean and unclean restarts, checkpoints, housekeeping on real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.storage import checkpoint
from riverlog.storage.manager import CLEAN_SHUTDOWN_FILE, LogManager, parse_partition_dir

SMALL = {"segment.bytes": "4096", "index.interval.bytes": "256"}


def _batch(i: int, ts: int = 1_000) -> bytes:
    return encode_batch([Record(0, ts, b"k%d" % i, b"v" * 100)])


def test_partition_dir_names() -> None:
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir("lost+found") is None
    assert parse_partition_dir("-3") is None


def test_clean_restart_keeps_everything_without_scanning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mgr = LogManager(tmp_path, SMALL)
    lg = mgr.get_or_create("events", 0)
    for i in range(100):
        lg.append(_batch(i), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)
    mgr.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    for name in (checkpoint.RECOVERY_POINT_FILE, checkpoint.HIGH_WATERMARK_FILE):
        assert checkpoint.read_offsets(tmp_path / name) == {("events", 0): 100}

    again = LogManager(tmp_path, SMALL)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    reopened = again.get("events", 0)
    assert reopened is not None
    assert (reopened.log_end_offset, reopened.high_watermark) == (100, 100)
    assert reopened.recovery_point == 100
    again.shutdown()


def test_unclean_restart_recovers_from_the_recovery_point(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, SMALL)
    lg = mgr.get_or_create("events", 0)
    for i in range(60):
        lg.append(_batch(i), leader_epoch=0)
    lg.flush()
    mgr.write_checkpoints()
    for i in range(60, 80):
        lg.append(_batch(i), leader_epoch=0)
    lg.active.flush_indexes()
    tail = lg.active.log_path
    # Crash: no shutdown; the last batch was only half written.
    with open(tail, "r+b") as f:
        f.truncate(tail.stat().st_size - 50)
    again = LogManager(tmp_path, SMALL)
    recovered = again.get("events", 0)
    assert recovered is not None
    assert recovered.log_end_offset == 79
    assert recovered.append(_batch(99), leader_epoch=0).first_offset == 79
    again.shutdown()


def test_tick_applies_retention_and_checkpoints(tmp_path: Path) -> None:
    now = 10_000_000
    clock = [now]
    mgr = LogManager(
        tmp_path,
        {**SMALL, "retention.ms": "1000"},
        clock_ms=lambda: clock[0],
        retention_check_interval_ms=1,
        checkpoint_interval_ms=1,
    )
    lg = mgr.get_or_create("old", 0)
    for i in range(100):
        lg.append(_batch(i, ts=now - 5000 if i < 90 else now), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)
    segments_before = len(lg.segments)
    mgr.tick(now)
    assert len(lg.segments) < segments_before
    assert lg.log_start_offset > 0
    assert lg.read(lg.log_start_offset, 1 << 20).records is not None
    starts = checkpoint.read_offsets(tmp_path / checkpoint.LOG_START_OFFSET_FILE)
    assert starts == {("old", 0): lg.log_start_offset}
    first_round = set((tmp_path / "old-0").glob("*.log.deleted"))
    assert first_round  # renamed, not yet unlinked: readers may still hold them
    clock[0] = now + 120_000
    mgr.tick(now + 120_000)  # past file.delete.delay.ms: those files are gone
    assert not first_round & set((tmp_path / "old-0").glob("*.log.deleted"))
    assert lg.log_end_offset == 100  # everything expired now, the end offset stays
    mgr.shutdown()


def test_delete_removes_the_partition_directory(tmp_path: Path) -> None:
    mgr = LogManager(tmp_path, SMALL)
    mgr.get_or_create("gone", 3).append(_batch(0), leader_epoch=0)
    mgr.delete("gone", 3)
    assert not (tmp_path / "gone-3").exists() and mgr.get("gone", 3) is None
    mgr.shutdown()


def test_tick_compacts_compacted_topics_and_checkpoints_the_cleaner(tmp_path: Path) -> None:
    mgr = LogManager(
        tmp_path,
        {**SMALL, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"},
        retention_check_interval_ms=1,
        checkpoint_interval_ms=1,
    )
    lg = mgr.get_or_create("users", 0)
    for i in range(200):
        lg.append(encode_batch([Record(0, 1_000 + i, b"user-%d" % (i % 5), b"v%d" % i)]), 0)
    lg.update_high_watermark(lg.log_end_offset)
    before = lg.size_bytes
    mgr.tick(10_000)
    assert lg.size_bytes < before / 2
    assert checkpoint.read_offsets(tmp_path / checkpoint.CLEANER_OFFSET_FILE)[("users", 0)] > 0
    mgr.shutdown()
