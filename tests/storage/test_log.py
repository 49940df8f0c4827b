"""PartitionLog on real files: appends, reads, rolls, timestamps, producers, epochs,
truncation, flushing. Refused appends: test_log_refusals.py; retention and DeleteRecords:
test_log_retention.py; LogConfig: test_log_config.py; recovery: test_recovery.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from riverlog.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records.batch_header import TIMESTAMP_LOG_APPEND_TIME
from riverlog.protocol.records.v2 import iter_record_batches
from riverlog.storage.log import PartitionLog
from riverlog.storage.segment import WRITE_CHUNK
from riverlog.storage.timestamp_search import MAX_TIMESTAMP
from tests.storage.logtools import (
    CODECS,
    ManualClock,
    Model,
    assert_matches,
    config,
    filled_log,
    make_batch,
    open_log,
    read_all,
    read_region,
    recs,
    segment_files,
)

STAMPED = 17  # the first bytes of a batch: the log sets its base offset and leader epoch


# --- appends and reads -------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_appends_get_consecutive_offsets(tmp_path: Path, codec: int) -> None:
    log = open_log(tmp_path)
    model = Model()
    for n in (1, 3, 7, 2):
        r = recs(n, tag=b"%d" % n)
        result = log.append(make_batch(r, codec=codec), leader_epoch=0)
        assert result.first_offset == model.end
        assert result.last_offset == model.end + n - 1
        assert not result.duplicate
        model.add(result.first_offset, r)
    assert log.log_end_offset == 13
    assert_matches(log, model)
    assert [b.header.compression for b in read_all(log)] == [codec] * 4


def test_read_from_middle_of_batch_returns_the_whole_batch_first(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(3):
        log.append(make_batch(recs(5)), leader_epoch=0)
    for offset in range(15):
        batches = list(iter_record_batches(read_region(log, offset)))
        assert batches[0].header.base_offset == offset - offset % 5
        assert [b.header.base_offset for b in batches] == list(range(offset - offset % 5, 15, 5))


def test_max_bytes_bound_and_kip74_first_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sizes = []
    for n in (2, 2, 2, 2):
        sizes.append(len(make_batch(recs(n))))
        log.append(make_batch(recs(n)), leader_epoch=0)
    # max_bytes covering two batches and a bit: region never exceeds max_bytes. The offset
    # index (one entry per 4096 bytes by default) knows no batch start in range, so the
    # region ends inside the third batch, as Kafka's would.
    result = log.read(0, sizes[0] + sizes[1] + 10)
    assert result.records is not None
    assert result.records.length == sizes[0] + sizes[1] + 10
    data = read_region(log, 0, sizes[0] + sizes[1] + 10)
    assert [b.header.base_offset for b in iter_record_batches(data)] == [0, 2]
    # KIP-74: a first batch larger than max_bytes is still returned whole.
    for max_bytes in (0, 1, sizes[2] - 1):
        result = log.read(4, max_bytes)
        assert result.records is not None and result.records.length == sizes[2]
        got = list(iter_record_batches(read_region(log, 4, max_bytes)))
        assert [b.header.base_offset for b in got] == [4]
    # Without min_one_batch (a later partition of a fetch): nothing rather than a cut-off
    # batch, as Kafka answers.
    for max_bytes in (1, sizes[2] - 1):
        assert log.read(4, max_bytes, min_one_batch=False).records is None
    assert log.read(4, sizes[2], min_one_batch=False).records is not None


def test_max_bytes_read_ends_at_an_indexed_batch_start(tmp_path: Path) -> None:
    # Every batch indexed: a region cut short by max_bytes holds whole batches only, so a
    # follower does not receive a partial batch it drops and fetches again.
    log = open_log(tmp_path, index_interval_bytes=1)
    sizes = []
    for n in (2, 2, 2, 2):
        sizes.append(len(make_batch(recs(n))))
        log.append(make_batch(recs(n)), leader_epoch=0)
    for extra in (0, 1, sizes[2] - 1):
        result = log.read(2, sizes[1] + sizes[2] + extra)
        assert result.records is not None
        assert result.records.length == sizes[1] + sizes[2]
        assert result.log_end_offset == log.log_end_offset == 8
    result = log.read(2, sizes[1] - 1)  # KIP-74: the first batch whole even so
    assert result.records is not None and result.records.length == sizes[1]
    result = log.read(0, 10**6)  # everything to the end: nothing to cut
    assert result.records is not None and result.records.length == sum(sizes)


def test_max_offset_bounds_the_read(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(4):
        log.append(make_batch(recs(3)), leader_epoch=0)
    log.update_high_watermark(6)
    result = log.read(0, 1 << 20, max_offset=6)
    assert result.high_watermark == 6 and result.log_end_offset == 12
    got = list(iter_record_batches(read_region(log, 0, max_offset=6)))
    assert [b.header.base_offset for b in got] == [0, 3]
    assert result.records is not None
    assert result.records.length == sum(b.header.size for b in got)
    assert log.read(6, 1 << 20, max_offset=6).records is None
    assert log.read(12, 1 << 20).records is None


def test_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(4):
        log.append(make_batch(recs(3)), leader_epoch=0)
    with pytest.raises(KafkaError) as e:
        log.read(13, 100)
    assert e.value.error is error_codes.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError) as e:
        log.read(-1, 100)
    assert e.value.error is error_codes.OFFSET_OUT_OF_RANGE
    log.update_high_watermark(12)
    assert log.delete_records_before(5) == 5
    with pytest.raises(KafkaError) as e:
        log.read(4, 100)
    assert e.value.error is error_codes.OFFSET_OUT_OF_RANGE
    # The start offset itself is readable: the batch holding it comes back.
    got = list(iter_record_batches(read_region(log, 5)))
    assert got[0].header.base_offset == 3


# --- rolling -----------------------------------------------------------------------------


def test_roll_by_segment_bytes_and_file_names(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000, index_interval_bytes=100)
    model = Model()
    for i in range(30):
        r = recs(2, tag=b"%d" % i)
        model.add(log.append(make_batch(r), leader_epoch=0).first_offset, r)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    assert all(s.size <= 1000 for s in log.segments)
    log.close()
    directory = tmp_path / "t-0"
    logs = segment_files(directory)
    assert [p.name for p in logs] == [f"{b:020d}.log" for b in bases]
    for p in logs:
        assert len(p.name) == 24
        assert p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists()
    # Every segment starts at a batch boundary of the model and holds whole batches.
    starts = {b.base_offset for b in model.batches}
    assert set(bases) <= starts
    log = PartitionLog(
        directory, config(segment_bytes=1000), recovery_point=60, clean_shutdown=True
    )
    assert_matches(log, model)


def test_roll_by_segment_ms_uses_batch_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append(make_batch([(b"a", b"1", 10_000)]), leader_epoch=0, now_ms=10_000)
    log.append(make_batch([(b"a", b"2", 10_900)]), leader_epoch=0, now_ms=10_900)
    assert len(log.segments) == 1
    log.append(make_batch([(b"a", b"3", 11_001)]), leader_epoch=0, now_ms=11_001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    # Data stamped long ago does not roll a segment per append.
    log.append(make_batch([(b"a", b"4", 11_002)]), leader_epoch=0, now_ms=99_000_000)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_by_segment_ms_without_timestamps_uses_wall_clock(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    now = log.active.created_ms
    log.append(make_batch([(b"a", b"1", -1)]), leader_epoch=0, now_ms=now)
    log.append(make_batch([(b"a", b"2", -1)]), leader_epoch=0, now_ms=now + 500)
    assert len(log.segments) == 1
    log.append(make_batch([(b"a", b"3", -1)]), leader_epoch=0, now_ms=now + 5_000)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_explicit_roll_and_empty_roll_is_noop(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(recs(2)), leader_epoch=0)
    log.roll()
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append(make_batch(recs(2)), leader_epoch=0)
    assert log.log_end_offset == 4 and log.active.base_offset == 2


# --- timestamps --------------------------------------------------------------------------


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, index_interval_bytes=1)
    stamps = [100, 200, 150, 300, 300, 250, 400]
    for ts in stamps:
        log.append(make_batch([(b"k", b"x" * 60, ts)]), leader_epoch=0)
    assert len(log.segments) > 2
    for target in range(50, 450, 25):
        want = next(((i, t) for i, t in enumerate(stamps) if t >= target), None)
        assert log.offset_for_timestamp(target) == want, target
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (7, -1)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (6, 400)
    log.update_high_watermark(7)
    log.delete_records_before(2)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (2, -1)
    assert log.offset_for_timestamp(100) == (2, 150)


def test_max_timestamp_first_record_holding_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([(b"a", b"", 10), (b"b", b"", 50), (b"c", b"", 50)]), leader_epoch=0)
    log.append(make_batch([(b"a", b"", 20)]), leader_epoch=0)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (1, 50)


def test_empty_log_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (0, -1)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    assert log.offset_for_timestamp(5) is None


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time(tmp_path: Path, codec: int) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    result = log.append(make_batch(recs(3, ts=5), codec=codec), leader_epoch=0, now_ms=777_000)
    assert result.log_append_time_ms == 777_000
    (batch,) = read_all(log)  # iter_record_batches verifies the CRC
    assert batch.header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert batch.header.max_timestamp == 777_000
    assert [r.timestamp for r in batch.records] == [777_000] * 3
    assert [r.value for r in batch.records] == [v for _, v, _ in recs(3)]
    assert log.offset_for_timestamp(777_000) == (0, 777_000)
    log.close()
    again = PartitionLog(tmp_path / "t-0", log.config, recovery_point=0, clean_shutdown=False)
    assert again.log_end_offset == 3  # recovery verified the rewritten CRC


# --- idempotent producers ----------------------------------------------------------------


def _pbatch(seq: int, n: int = 2, epoch: int = 0, pid: int = 42) -> bytes:
    return make_batch(
        recs(n, tag=b"s%d" % seq), producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def _producer_checks(log: PartitionLog, first: tuple[int, int], second: tuple[int, int]) -> None:
    end = log.log_end_offset
    dup = log.append(_pbatch(0), leader_epoch=0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == first
    dup = log.append(_pbatch(2, 3), leader_epoch=0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == second
    assert log.log_end_offset == end
    with pytest.raises(KafkaError) as e:
        log.append(_pbatch(9), leader_epoch=0)
    assert e.value.error is error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == end


def test_idempotent_producer(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch(recs(1)), leader_epoch=0)
    a = log.append(_pbatch(0), leader_epoch=0)
    b = log.append(_pbatch(2, 3), leader_epoch=0)
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset) == (1, 2, 3, 5)
    _producer_checks(log, (1, 2), (3, 5))
    # Sequence continues; another producer is independent.
    assert log.append(_pbatch(5), leader_epoch=0).first_offset == 6
    assert log.append(_pbatch(100, pid=7), leader_epoch=0).first_offset == 8
    # Epoch bump: must start at 0, then the old epoch is fenced.
    with pytest.raises(KafkaError) as e:
        log.append(_pbatch(7, epoch=1), leader_epoch=0)
    assert e.value.error is error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(_pbatch(0, epoch=1), leader_epoch=0).first_offset == 10
    with pytest.raises(KafkaError) as e:
        log.append(_pbatch(7, epoch=0), leader_epoch=0)
    assert e.value.error is error_codes.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 12


def test_duplicate_in_multi_batch_request_is_rejected(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(_pbatch(0), leader_epoch=0)
    with pytest.raises(KafkaError) as e:
        log.append(_pbatch(2) + _pbatch(0), leader_epoch=0)
    assert e.value.error is error_codes.DUPLICATE_SEQUENCE_NUMBER
    assert log.log_end_offset == 2


@pytest.mark.parametrize("restart", ["clean", "unclean", "unclean_no_snapshots", "clean_rolled"])
def test_producer_state_survives_restart(tmp_path: Path, restart: str) -> None:
    directory = tmp_path / "t-0"
    cfg = config(segment_bytes=300) if restart == "clean_rolled" else config()
    log = PartitionLog(directory, cfg)
    for i in range(5):
        log.append(make_batch(recs(1, tag=b"x%d" % i)), leader_epoch=0)
    log.append(_pbatch(0), leader_epoch=0)
    log.append(_pbatch(2, 3), leader_epoch=0)
    log.append(make_batch(recs(1)), leader_epoch=0)
    end = log.log_end_offset
    if restart.startswith("clean"):
        log.close()
        log = PartitionLog(directory, cfg, recovery_point=end, clean_shutdown=True)
    else:
        log.close(clean=False)
        if restart == "unclean_no_snapshots":
            for p in directory.glob("*.snapshot"):
                p.unlink()
        log = PartitionLog(directory, cfg, recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == end
    _producer_checks(log, (5, 6), (7, 9))
    assert log.append(_pbatch(5), leader_epoch=0).first_offset == end


# --- leader epochs -----------------------------------------------------------------------


def test_leader_epoch_cache_follows_appends_and_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500)
    starts = []
    for epoch in (0, 0, 1, 3, 3, 3, 4):
        starts.append(log.append(make_batch(recs(2)), leader_epoch=epoch).first_offset)
    assert log.epochs.entries == [(0, 0), (1, 4), (3, 6), (4, 12)]
    assert log.epochs.end_offset_for(2, log.log_end_offset) == (1, 6)
    assert log.epochs.end_offset_for(4, log.log_end_offset) == (4, 14)
    (batch,) = list(iter_record_batches(read_region(log, 6)))[:1]
    assert batch.header.partition_leader_epoch == 3
    log.truncate_to(12)
    assert log.epochs.entries == [(0, 0), (1, 4), (3, 6)]
    log.truncate_to(8)
    assert log.epochs.entries == [(0, 0), (1, 4), (3, 6)]
    log.truncate_to(5)  # mid-batch: the whole batch [4, 5] goes
    assert log.log_end_offset == 4
    assert log.epochs.entries == [(0, 0)]
    log.append(make_batch(recs(1)), leader_epoch=7)
    assert log.epochs.entries == [(0, 0), (7, 4)]
    log.close()
    again = PartitionLog(log.directory, log.config, recovery_point=5, clean_shutdown=True)
    assert again.epochs.entries == [(0, 0), (7, 4)]


def test_missing_epoch_checkpoint_is_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for epoch in (1, 1, 2, 5):
        log.append(make_batch(recs(1)), leader_epoch=epoch)
    log.close()
    (log.directory / "leader-epoch-checkpoint").write_text("garbage")
    again = PartitionLog(log.directory, log.config, recovery_point=4, clean_shutdown=True)
    assert again.epochs.entries == [(1, 0), (2, 2), (5, 3)]


# --- truncation --------------------------------------------------------------------------


def test_truncate_in_the_middle_of_a_segment(tmp_path: Path) -> None:
    log, model = filled_log(tmp_path)
    seg = log.segments[1]
    inner = [b for b in model.batches if seg.base_offset < b.base_offset < seg.next_offset]
    target = inner[0].base_offset
    later = [s.log_path for s in log.segments[2:]]
    log.truncate_to(target)
    model.truncate_to(target)
    assert log.log_end_offset == target
    assert len(log.segments) == 2
    assert_matches(log, model)
    assert not any(p.exists() for p in later)
    log.delete_expired_files(0, force=True)
    assert [p.name for p in segment_files(log.directory)] == [
        f"{s.base_offset:020d}.log" for s in log.segments
    ]
    assert not list(log.directory.glob("*.deleted"))
    r = recs(2, tag=b"after")
    model.add(log.append(make_batch(r), leader_epoch=0).first_offset, r)
    assert_matches(log, model)
    log.close()
    again = PartitionLog(log.directory, log.config, recovery_point=0, clean_shutdown=False)
    assert_matches(again, model)


def test_truncate_across_segments_to_a_segment_base(tmp_path: Path) -> None:
    log, model = filled_log(tmp_path)
    target = log.segments[2].base_offset
    log.truncate_to(target)
    model.truncate_to(target)
    assert log.log_end_offset == target
    assert_matches(log, model)
    r = recs(1, tag=b"after")
    assert log.append(make_batch(r), leader_epoch=0).first_offset == target
    model.add(target, r)
    assert_matches(log, model)


def test_truncate_everything_and_beyond_end(tmp_path: Path) -> None:
    log, _ = filled_log(tmp_path)
    end = log.log_end_offset
    log.truncate_to(end + 10)
    assert log.log_end_offset == end
    log.truncate_to(0)
    assert log.log_end_offset == 0
    assert read_all(log) == []
    assert log.append(make_batch(recs(2)), leader_epoch=0).first_offset == 0


def test_truncate_keeps_high_watermark_and_recovery_point_below_end(tmp_path: Path) -> None:
    log, _ = filled_log(tmp_path)
    log.flush()
    log.update_high_watermark(log.log_end_offset)
    log.truncate_to(10)
    assert log.log_end_offset <= 10
    assert log.high_watermark <= log.log_end_offset
    assert log.recovery_point <= log.log_end_offset


# --- flushing ----------------------------------------------------------------------------


def test_flush_messages_advances_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path, flush_messages=1)
    for _ in range(3):
        log.append(make_batch(recs(2)), leader_epoch=0)
        assert log.recovery_point == log.log_end_offset
    lazy = PartitionLog(tmp_path / "u-0", config(flush_messages=5))
    lazy.append(make_batch(recs(2)), leader_epoch=0)
    assert lazy.recovery_point == 0
    lazy.append(make_batch(recs(3)), leader_epoch=0)
    assert lazy.recovery_point == 5


def test_flush_ms(tmp_path: Path) -> None:
    clock = ManualClock(1_000)
    log = PartitionLog(tmp_path / "t-0", config(flush_ms=100), clock_ms=clock)
    log.append(make_batch(recs(1)), leader_epoch=0)
    assert not log.maybe_flush(1_050)
    assert log.maybe_flush(1_100)
    assert log.recovery_point == 1
    assert not log.maybe_flush(5_000)  # nothing unflushed


def test_offset_for_timestamp_skips_records_below_log_start_within_a_segment(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    for ts in (100, 200, 300):
        log.append(make_batch([(b"k", b"v", ts)]), leader_epoch=0)
    log.update_high_watermark(3)
    log.delete_records_before(1)
    assert log.offset_for_timestamp(150) == (1, 200)
    assert log.offset_for_timestamp(50) == (1, 200)  # actual: None
    assert log.offset_for_timestamp(100) == (1, 200)  # actual: None


def test_producer_state_follows_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    log.append(_pbatch(0), leader_epoch=0)
    log.append(_pbatch(2), leader_epoch=0)
    log.append(_pbatch(4), leader_epoch=0)
    assert len(log.segments) > 1
    log.truncate_to(2)
    # Sequences 2 and 4 were truncated away: they are new again, not duplicates.
    again = log.append(_pbatch(2), leader_epoch=0)
    assert not again.duplicate and again.first_offset == 2
    with pytest.raises(KafkaError) as e:
        log.append(_pbatch(6), leader_epoch=0)
    assert e.value.error is error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(_pbatch(0), leader_epoch=0).duplicate


def test_a_request_larger_than_one_write_lands_whole(tmp_path: Path) -> None:
    """Appends go to the file in writes of at most WRITE_CHUNK: a 3-batch request of ~2.7 MiB
    is written in pieces and lands byte for byte (past the offset and leader epoch the leader
    stamps), readable with its offsets."""
    log = open_log(tmp_path)
    log.append(make_batch(recs(1)), leader_epoch=0)
    start = log.active.size
    parts = [make_batch(recs(900, size=1000, tag=b"%d" % i)) for i in range(3)]
    data = b"".join(parts)
    assert len(data) > 2 * WRITE_CHUNK
    result = log.append(data, leader_epoch=0)
    assert (result.first_offset, result.last_offset) == (1, 2700)
    assert log.active.size == start + len(data)
    position = start
    for part in parts:
        written = os.pread(log.active.fd, len(part), position)
        assert written[STAMPED:] == part[STAMPED:]
        position += len(part)
    read_back = [(b.header.base_offset, len(b.records)) for b in read_all(log, 1)]
    assert read_back == [(1, 900), (901, 900), (1801, 900)]
