"""A partition log's start moving up: retention by time and by size (never past the high
watermark), DeleteRecords (kept across a restart), and a reader keeping a deleted segment
readable until `file.delete.delay.ms` has passed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.storage.log import PartitionLog
from riverlog.storage.retention import apply_retention
from tests.storage.logtools import (
    ManualClock,
    Model,
    assert_matches,
    config,
    filled_log,
    make_batch,
    recs,
)


def test_retention_by_time(tmp_path: Path) -> None:
    clock = ManualClock()
    log = PartitionLog(
        tmp_path / "t-0",
        config(segment_bytes=600, retention_ms=10_000, file_delete_delay_ms=0),
        clock_ms=clock,
    )
    model = Model()
    for i in range(12):
        ts = 1_000 if i < 6 else 100_000
        r = [(b"k", b"x" * 100, ts)]
        model.add(log.append(make_batch(r), leader_epoch=0, now_ms=ts).first_offset, r)
    log.update_high_watermark(log.log_end_offset)
    old = [s for s in log.segments if s.max_timestamp == 1_000]
    assert old
    assert apply_retention(log, 50_000) == len(old)
    assert log.log_start_offset == log.segments[0].base_offset == old[-1].next_offset
    model.keep_from(log.log_start_offset)
    assert_matches(log, model)
    assert apply_retention(log, 50_000) == 0
    # Everything expired: the log end survives in a new empty segment.
    end = log.log_end_offset
    apply_retention(log, 10**9)
    assert log.log_end_offset == end == log.log_start_offset
    assert log.append(make_batch(recs(1)), leader_epoch=0, now_ms=10**9).first_offset == end


def test_retention_by_bytes(tmp_path: Path) -> None:
    log, model = filled_log(tmp_path)
    log.update_high_watermark(log.log_end_offset)
    total = log.size_bytes
    limit = total // 2
    log.config = config(
        segment_bytes=600, retention_bytes=limit, retention_ms=-1, file_delete_delay_ms=1000
    )
    deleted = apply_retention(log, 10**12)
    assert deleted > 0
    assert log.size_bytes >= limit
    assert log.size_bytes - log.segments[0].size < limit  # one more would go below
    model.keep_from(log.log_start_offset)
    assert_matches(log, model)


def test_retention_never_passes_high_watermark(tmp_path: Path) -> None:
    log, model = filled_log(tmp_path)
    log.config = config(segment_bytes=600, retention_ms=1)
    log.update_high_watermark(log.segments[2].base_offset + 1)
    hw = log.high_watermark
    apply_retention(log, 10**12)
    assert log.log_start_offset <= hw
    assert all(s.next_offset > hw for s in log.segments)
    assert log.segments[0].base_offset <= hw
    model.keep_from(log.log_start_offset)
    assert_matches(log, model)
    log.update_high_watermark(0)
    assert apply_retention(log, 10**12) == 0


def test_delete_records_before(tmp_path: Path) -> None:
    log, model = filled_log(tmp_path)
    log.config = config(segment_bytes=600, retention_ms=-1)
    log.update_high_watermark(20)
    with pytest.raises(KafkaError) as e:
        log.delete_records_before(21)
    assert e.value.error is error_codes.OFFSET_OUT_OF_RANGE
    target = log.segments[2].base_offset + 1
    assert log.delete_records_before(target) == target
    assert log.delete_records_before(3) == target  # never moves back
    assert log.log_start_offset == target
    assert apply_retention(log, 0) == 2
    assert log.log_start_offset == target
    assert log.segments[0].base_offset < target
    model.keep_from(target)
    assert_matches(log, model)
    log.close()
    again = PartitionLog(
        log.directory, log.config, recovery_point=0, log_start_offset=target, clean_shutdown=False
    )
    assert again.log_start_offset == target
    assert_matches(again, model)


def test_reader_keeps_deleted_segment_until_delete_delay(tmp_path: Path) -> None:
    clock = ManualClock(1_000_000)
    log, _ = filled_log(tmp_path, clock=clock)
    region = log.read(0, 1 << 20).records
    assert region is not None
    before = os.pread(region.fileno, region.length, region.offset)
    log.config = config(segment_bytes=600, retention_ms=-1, file_delete_delay_ms=1000)
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(log.segments[1].base_offset)
    assert apply_retention(log, clock.now) == 1
    assert list(log.directory.glob("*.log.deleted"))
    assert os.pread(region.fileno, region.length, region.offset) == before
    assert log.delete_expired_files(clock.now + 999) == 0
    assert os.pread(region.fileno, region.length, region.offset) == before
    assert log.delete_expired_files(clock.now + 1000) == 1
    assert not list(log.directory.glob("*.deleted"))
    with pytest.raises(OSError):
        os.pread(region.fileno, region.length, region.offset)
