"""Log compaction on real segment files: what survives, offsets, tombstones, swaps, crashes."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from riverlog.protocol.records.batch_header import read_batch_header
from riverlog.protocol.records.v2 import Record, RecordBatch, encode_batch, iter_record_batches
from riverlog.storage import checkpoint
from riverlog.storage.cleaner import LogCleaner
from riverlog.storage.log import PartitionLog
from riverlog.storage.log_config import LogConfig
from riverlog.storage.retention import apply_retention
from riverlog.storage.segment import CLEANED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX

BASE = {"cleanup.policy": "compact", "segment.bytes": "100000", "index.interval.bytes": "64"}
TS = 1_000


def now() -> int:
    return int(time.time() * 1000)


def open_log(path: Path, **overrides: str) -> PartitionLog:
    return PartitionLog(path / "topic-0", LogConfig.from_map({**BASE, **overrides}))


def put(lg: PartitionLog, key: bytes, value: bytes | None, ts: int = TS) -> int:
    first = lg.append(encode_batch([Record(0, ts, key, value)]), leader_epoch=0).first_offset
    lg.update_high_watermark(lg.log_end_offset)
    return first


def batches(lg: PartitionLog) -> list[RecordBatch]:
    """Every batch, read through `PartitionLog.read` from the log start to its end."""
    out: list[RecordBatch] = []
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        region = lg.read(offset, 1 << 20).records
        if region is None:
            break
        raw = os.pread(region.fileno, region.length, region.offset)
        found = list(iter_record_batches(raw))
        out.extend(found)
        offset = found[-1].header.next_offset
    return out


def contents(lg: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in batches(lg) for r in b.records]


def fill(lg: PartitionLog) -> dict[bytes, tuple[int, bytes | None]]:
    """Three segments of updates to keys a, b, c (b deleted), then an active segment."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for round_ in range(3):
        for key in (b"a", b"b", b"c"):
            value: bytes | None = b"%s%d" % (key, round_)
            if key == b"b" and round_ == 2:
                value = None
            latest[key] = (put(lg, key, value), value)
        lg.roll()
    return latest


def expected(
    latest: dict[bytes, tuple[int, bytes | None]],
) -> list[tuple[int, bytes, bytes | None]]:
    return sorted((offset, key, value) for key, (offset, value) in latest.items())


def test_latest_value_per_key_survives_with_original_offsets(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    latest = fill(lg)
    put(lg, b"a", b"active")  # offset 9, in the active segment
    cleaner = LogCleaner()
    assert cleaner.dirty_ratio(lg) == 1.0
    result = cleaner.clean(lg, now())
    assert (result.first_dirty_offset, result.end_offset) == (0, 9)
    assert contents(lg) == [*expected(latest), (9, b"a", b"active")]
    assert cleaner.offsets == {("topic", 0): 9}
    assert cleaner.dirty_ratio(lg) == 0.0
    assert lg.log_end_offset == 10
    assert len(lg.segments) == 2  # the three cleaned segments were merged into one
    # The cleaned segment still ends where the group ended.
    assert lg.segments[0].next_offset == 9


def test_reading_a_removed_offset_returns_the_next_surviving_batch(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    fill(lg)
    LogCleaner().clean(lg, now())
    first = next(iter_record_batches(_read(lg, 0)))
    assert first.records[0].offset == 6  # offsets 0..5 were all superseded
    assert next(iter_record_batches(_read(lg, 7))).records[0].offset == 7
    assert lg.offset_for_timestamp(0) == (6, TS)


def _read(lg: PartitionLog, offset: int) -> bytes:
    region = lg.read(offset, 1).records
    assert region is not None
    return os.pread(region.fileno, region.length, region.offset)


def test_tombstones_go_only_after_delete_retention(tmp_path: Path) -> None:
    lg = open_log(tmp_path, **{"delete.retention.ms": "60000"})
    latest = fill(lg)
    cleaner = LogCleaner()
    cleaner.clean(lg, now())
    assert (7, b"b", None) in contents(lg)  # the tombstone stays, older b values went
    assert [r for r in contents(lg) if r[1] == b"b"] == [(7, b"b", None)]
    put(lg, b"c", b"new")
    lg.roll()
    cleaner.clean(lg, now() + 30_000)  # rewrites the segment; the clock does not restart
    assert (7, b"b", None) in contents(lg)
    put(lg, b"c", b"newer")
    lg.roll()
    cleaner.clean(lg, now() + 120_000)
    del latest[b"b"]
    latest[b"c"] = (10, b"newer")
    assert contents(lg) == expected(latest)


def test_active_segment_and_data_above_high_watermark_are_untouched(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    fill(lg)
    for i in range(3):
        put(lg, b"a", b"x%d" % i)
    active = lg.active
    before = active.log_path.read_bytes()
    lg.update_high_watermark(6)  # the third segment [6, 9) is not fully replicated yet
    result = LogCleaner().clean(lg, now())
    assert result.end_offset == 6
    assert lg.active is active and active.log_path.read_bytes() == before
    offsets = [r[0] for r in contents(lg)]
    assert offsets == [3, 4, 5, 6, 7, 8, 9, 10, 11]  # only [0, 6) was compacted


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path: Path) -> None:
    lg = open_log(tmp_path, **{"min.compaction.lag.ms": "10000"})
    put(lg, b"a", b"old", ts=TS)
    lg.roll()
    put(lg, b"a", b"recent", ts=now())
    lg.roll()
    put(lg, b"a", b"active")
    cleaner = LogCleaner()
    result = cleaner.clean(lg, now())
    assert result.end_offset == 1  # the segment with a recent record is not cleanable
    assert [r[0] for r in contents(lg)] == [0, 1, 2]
    assert cleaner.clean(lg, now() + 20_000).end_offset == 2
    assert [r[0] for r in contents(lg)] == [1, 2]


def test_dirty_ratio_threshold(tmp_path: Path) -> None:
    lg = open_log(tmp_path, **{"min.cleanable.dirty.ratio": "0.5"})
    cleaner = LogCleaner()
    for i in range(10):
        put(lg, b"k%d" % i, b"v" * 50)
    lg.roll()
    cleaner.clean(lg, now())
    put(lg, b"k0", b"w" * 50)
    lg.roll()
    put(lg, b"active", b"x")
    ratio = cleaner.dirty_ratio(lg)
    assert 0 < ratio < 0.5
    assert cleaner.clean_if_needed(lg, now()) is None
    for i in range(1, 10):
        put(lg, b"k%d" % i, b"w" * 50)
    lg.roll()
    assert cleaner.dirty_ratio(lg) >= 0.5
    result = cleaner.clean_if_needed(lg, now())
    assert result is not None and result.records_removed == 10
    assert [r[2] for r in contents(lg) if r[1] != b"active"] == [b"w" * 50] * 10


def test_not_compacted_without_compact_policy(tmp_path: Path) -> None:
    lg = open_log(tmp_path, **{"cleanup.policy": "delete"})
    fill(lg)
    assert LogCleaner().clean_if_needed(lg, now()) is None
    assert len(contents(lg)) == 9


def test_compact_and_delete_policy(tmp_path: Path) -> None:
    lg = open_log(tmp_path, **{"cleanup.policy": "compact,delete", "retention.ms": "60000"})
    put(lg, b"a", b"ancient", ts=TS)
    put(lg, b"b", b"ancient", ts=TS)
    lg.roll()
    t = now()
    put(lg, b"a", b"1", ts=t)
    put(lg, b"a", b"2", ts=t)
    lg.roll()
    put(lg, b"a", b"3", ts=t)
    cleaner = LogCleaner()
    assert cleaner.clean_if_needed(lg, t) is not None
    assert apply_retention(lg, t) == 0  # the merged segment holds recent records
    assert contents(lg) == [(1, b"b", b"ancient"), (3, b"a", b"2"), (4, b"a", b"3")]
    lg.roll()
    assert apply_retention(lg, t + 120_000) == 2
    assert contents(lg) == []
    assert lg.log_start_offset == 5
    assert cleaner.first_dirty_offset(lg) == 5


def test_producer_fields_and_last_batch_of_a_producer_are_kept(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    data = encode_batch(
        [Record(0, TS, b"a", b"1"), Record(1, TS, b"b", b"1"), Record(2, TS, b"a", b"2")],
        producer_id=7,
        producer_epoch=3,
        base_sequence=0,
        compression_type=1,
    )
    lg.append(data, leader_epoch=5)
    lg.append(
        encode_batch([Record(0, TS, b"b", b"2")], producer_id=7, producer_epoch=3, base_sequence=3),
        leader_epoch=5,
    )
    lg.append(encode_batch([Record(0, TS, b"b", b"3")]), leader_epoch=5)
    lg.roll()
    put(lg, b"x", b"active")
    LogCleaner().clean(lg, now())
    first, producer_last, plain = batches(lg)[:3]
    h = first.header
    assert [r.offset for r in first.records] == [2]
    assert (h.base_offset, h.last_offset, h.producer_id, h.producer_epoch) == (0, 2, 7, 3)
    assert (h.base_sequence, h.last_sequence, h.compression, h.partition_leader_epoch) == (
        0,
        2,
        1,
        5,
    )
    assert producer_last.records == []  # empty, kept for the producer's state
    assert (producer_last.header.base_offset, producer_last.header.last_sequence) == (3, 3)
    assert [r.offset for r in plain.records] == [4]
    # The producer's next batch is still checked against sequence 3.
    retry = encode_batch(
        [Record(0, TS, b"b", b"2")], producer_id=7, producer_epoch=3, base_sequence=3
    )
    assert lg.append(retry, leader_epoch=5).duplicate


def _txn(lg: PartitionLog, pid: int, key: bytes, value: bytes, seq: int) -> None:
    batch = encode_batch(
        [Record(0, TS, key, value)],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
    )
    lg.append(batch, leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)


def _data(lg: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (r.offset, r.key, r.value)
        for b in batches(lg)
        if not b.header.is_control
        for r in b.records
    ]


def _marker(lg: PartitionLog, pid: int, commit: bool) -> None:
    lg.append_marker(pid, 0, commit, 0, 0)
    lg.update_high_watermark(lg.log_end_offset)


def test_open_transactions_stop_cleaning_at_the_last_stable_offset(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    put(lg, b"a", b"plain")
    _txn(lg, 1, b"a", b"txn", 0)  # offset 1, never decided
    put(lg, b"b", b"1")
    put(lg, b"b", b"2")
    lg.roll()
    put(lg, b"z", b"active")
    before = contents(lg)
    LogCleaner().clean(lg, now())
    assert contents(lg) == before  # the segment reaches past the LSO (1): not cleanable


def test_aborted_data_goes_committed_data_compacts_and_markers_go_later(
    tmp_path: Path,
) -> None:
    lg = open_log(tmp_path, **{"delete.retention.ms": "60000"})
    put(lg, b"a", b"plain")  # 0
    _txn(lg, 1, b"a", b"aborted", 0)  # 1
    _txn(lg, 2, b"b", b"committed", 0)  # 2
    _marker(lg, 1, False)  # 3: abort
    _marker(lg, 2, True)  # 4: commit
    put(lg, b"b", b"later")  # 5
    lg.roll()
    put(lg, b"z", b"active")  # 6
    cleaner = LogCleaner()
    cleaner.clean(lg, now())
    # aborted data gone; the committed record was shadowed by a later one; markers stay
    # (younger than delete.retention.ms)
    assert _data(lg) == [(0, b"a", b"plain"), (5, b"b", b"later"), (6, b"z", b"active")]
    control = [b.header.base_offset for b in batches(lg) if b.header.is_control]
    assert control == [3, 4]
    assert lg.aborted_transactions(0, 7)[0][:3] == (1, 1, 3)  # the index moved along
    put(lg, b"c", b"1")
    lg.roll()
    cleaner.clean(lg, now() + 120_000)
    assert [b.header.base_offset for b in batches(lg) if b.header.is_control] == []
    assert _data(lg)[-2:] == [(6, b"z", b"active"), (7, b"c", b"1")]


def _at(batch: bytes, offset: int) -> bytes:
    data = bytearray(batch)
    data[0:8] = offset.to_bytes(8, "big")
    assert read_batch_header(data).base_offset == offset
    return bytes(data)


def test_checkpoint_round_trip_and_out_of_range_reset(tmp_path: Path) -> None:
    lg = open_log(tmp_path)
    fill(lg)
    cleaner = LogCleaner()
    cleaner.clean(lg, now())
    cleaner.write_checkpoint(tmp_path)
    assert checkpoint.read_offsets(tmp_path / checkpoint.CLEANER_OFFSET_FILE) == {("topic", 0): 9}
    again = LogCleaner.from_checkpoint(tmp_path)
    assert again.first_dirty_offset(lg) == 9
    lg.truncate_to(5)
    assert again.first_dirty_offset(lg) == 0  # beyond the end: start over


def test_appends_during_cleaning_lose_nothing(tmp_path: Path) -> None:
    lg = open_log(tmp_path, **{"segment.bytes": "2000"})
    cleaner = LogCleaner()
    done = threading.Event()
    written: dict[bytes, tuple[int, bytes]] = {}
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            for i in range(600):
                key = b"k%d" % (i % 17)
                written[key] = (put(lg, key, b"v%d" % i), b"v%d" % i)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=appender)
    thread.start()
    passes = 0
    while not done.is_set():
        cleaner.clean(lg, now())
        passes += 1
        done.wait(0.02)  # a pass holds the GIL for long stretches: let the appender run
    thread.join()
    assert not errors and passes > 1
    end = lg.log_end_offset
    lg.roll()
    cleaner.clean(lg, now())
    records = contents(lg)
    offsets = [r[0] for r in records]
    assert offsets == sorted(set(offsets))
    assert records == sorted((o, k, v) for k, (o, v) in written.items())
    assert lg.log_end_offset == end == 600


def test_crash_during_cleaning_recovers_compacted_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lg = open_log(tmp_path)
    latest = fill(lg)
    put(lg, b"a", b"active")  # not in the cleanable range: a2 at 6 stays too
    directory = lg.directory
    config = lg.config

    class Crash(Exception):
        pass

    def crash(*_: object) -> None:
        raise Crash

    monkeypatch.setattr(lg, "replace_segments", crash)
    with pytest.raises(Crash):
        LogCleaner().clean(lg, now())
    assert (directory / f"{0:020d}{LOG_SUFFIX}{SWAP_SUFFIX}").exists()
    # An unfinished cleaning of a later group: must be discarded.
    (directory / f"{3:020d}{LOG_SUFFIX}{CLEANED_SUFFIX}").write_bytes(b"garbage" * 10)
    lg.close(clean=False)
    reopened = PartitionLog(directory, config, clean_shutdown=False, recovery_point=0)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert contents(reopened) == [*expected(latest), (9, b"a", b"active")]
    assert reopened.log_end_offset == 10
    assert not list(directory.glob(f"*{SWAP_SUFFIX}")) + list(directory.glob(f"*{CLEANED_SUFFIX}"))
    assert [s.base_offset for s in reopened.segments] == [0, 9]
    reopened.close()


def test_retention_during_cleaning_aborts_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lg = open_log(tmp_path, **{"segment.bytes": "150"})  # one segment per group
    fill(lg)
    cleaner = LogCleaner()
    build = cleaner._build_offset_map

    def build_then_retention(*args: Any) -> dict[bytes, int]:
        offset_map = build(*args)
        lg.remove_segments([lg.segments[0]])  # retention runs while the cleaner works
        return offset_map

    monkeypatch.setattr(cleaner, "_build_offset_map", build_then_retention)
    result = cleaner.clean(lg, now())
    assert result.groups_aborted == 1 and result.segments_replaced > 1
    assert not list(lg.directory.glob(f"*{SWAP_SUFFIX}"))
    assert not list(lg.directory.glob(f"*{CLEANED_SUFFIX}"))
    assert result.end_offset == 0  # the skipped first group is dirty again
    assert cleaner.first_dirty_offset(lg) == lg.log_start_offset  # from the new log start
    assert [r[0] for r in contents(lg)][-3:] == [6, 7, 8]
    monkeypatch.undo()
    assert cleaner.clean(lg, now()).end_offset == 9
    assert [r[0] for r in contents(lg)] == [6, 7, 8]
